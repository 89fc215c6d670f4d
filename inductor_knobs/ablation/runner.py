"""The local executor: every run of an ablation in a fresh process here, repeats interleaved (ABCABC…),
blocked by GPU.

Each job (arm × repeat) is one worker process (:func:`.job.call_job`, :mod:`.workers`).  With several
GPUs, repeat ``r`` of every arm runs on the same GPU, ``gpus[r mod len(gpus)]``
(:func:`.plan.gpu_for_repeat`), so that every arm has the same processes on each GPU and no arm is
confounded with a GPU; each GPU's threads take its jobs in the interleaved order, or longest compile first
where all of them are measured in one phase (:mod:`.order`).  A job that crashes
or runs past its timeout becomes an error record; the others still run.  Every record says which GPU
it ran on (``gpu``, and ``cuda_visible_devices``: the physical GPU).  The records do not depend on the
number of GPUs: one GPU or several (``--gpus 0,1``) give the same fields, so the command's total
``wall_seconds`` of the two can be compared directly.

**Start-up paid once**: with more than one job, the workers are forked from one fork server that
imported torch and the workload's libraries once (:mod:`.forkserver`, :meth:`.workers.Workers.start`).

**Processes at once, measured in quiet** (``Plan.parallel``): the host compiles up to ``parallel`` workers
per lane (a GPU, or the CPU) at once, ``parallel × lanes`` in all, on whichever lanes their repeats are (a
lane may hold more jobs than another when the repeats are not a multiple of the GPUs), and every worker
measures only through the phase barrier of :mod:`.quiet`: one at a time on the whole host, pinned to its
lane's CPUs, and only while no worker of the ablation compiles.  Each lane has up to :func:`.quiet.live_cap`
job threads (workers that have compiled wait for their turn, holding a thread each).  With several at
once, each worker gets ``CPUs / (lanes × parallel)`` Inductor compile threads.

On SIGINT or SIGTERM (under :func:`.signals.signals_raise`) :func:`execute` kills every worker's
process group, removes the temporary directories and raises :class:`.signals.Interrupted` with the
runs that had finished.
"""

from __future__ import annotations

import contextlib
import signal
import sys
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

from .forkserver import preload_modules
from .job import call_job
from .order import Backlog
from .plan import Plan, gpu_for_repeat, runs_per_lane, smallest_gpu_gib
from .quiet import Quiet, live_cap, usable_cpus
from .signals import Interrupted, signals_ignored
from .workers import Workers, inherited_compile_threads


def _lanes(plan: Plan) -> list[int | None]:
    """The GPUs of ``plan`` (one lane each), or ``[None]`` (the CPU)."""
    return list(plan.gpus) if plan.device == "cuda" and plan.gpus else [None]


def make_workers(plan: Plan, runs: int) -> Workers:
    """The :class:`.workers.Workers` of an ablation of ``runs`` runs: its fork server's modules (none for
    one run: a server would import torch for that one run) and the ablation's Inductor compile threads
    (``TORCHINDUCTOR_COMPILE_THREADS`` where this process has it, which every worker inherits; else
    ``--compile-threads``; else with several workers at once per lane, ``CPUs / (lanes x parallel)`` each; else
    Inductor's own choice, which the server and every run make from the same CPUs: the worker pins itself only to
    measure).

    Args:
        plan (Plan): the ablation.
        runs (int): how many runs it will start.

    Returns:
        Workers: nothing started yet.
    """
    parallel = max(1, plan.parallel)
    threads = max(1, usable_cpus() // (len(_lanes(plan)) * parallel)) if parallel > 1 else None
    if plan.compile_threads is not None:  # --compile-threads (build_plan refused a different inherited value)
        threads = plan.compile_threads
    inherited = inherited_compile_threads() or ""
    if inherited.isdigit() and int(inherited) >= 1:  # every worker inherits it: say so
        threads = int(inherited)
    preload = preload_modules(plan.workload, plan.device) if runs > 1 else None
    workers = Workers(share_kernels=plan.device == "cuda", preload=preload, compile_threads=threads)
    if preload is None:
        workers.start_note = "one run: a fork server would import torch for that one run"
    return workers


@contextlib.contextmanager
def early_workers(plan: Plan) -> Iterator[Workers | None]:
    """The workers of ``plan`` with their fork server already importing, for the command's own start-up
    (results.json's environment, the run store) to overlap it; ended however the block ends.

    Only the local executor forks runs; the server starts for a plan of more than one run.  The block's
    :func:`execute` waits for the server where it forks the first run; a bad argument found inside the
    block, or SIGINT meanwhile, leaves the block through ``Workers.remove_dirs``, which kills a server
    still importing with its process group.

    Args:
        plan (Plan): the ablation.

    Yields:
        Workers | None: for :func:`execute` (None with the Slurm executor).
    """
    if plan.executor == "slurm":
        yield None
        return
    workers = make_workers(plan, len(plan.jobs()))
    try:
        workers.start_server()
        yield workers
    finally:
        workers.remove_dirs()


def execute(
    plan: Plan,
    progress: bool = True,
    jobs: list[dict[str, Any]] | None = None,
    on_record: Callable[[dict[str, Any]], None] | None = None,
    workers: Workers | None = None,
    before_measuring: Callable[[], Any] | None = None,
) -> list[dict[str, Any]]:
    """Run every job of ``plan`` here, repeat ``r`` of every arm on ``gpus[r mod len(gpus)]``
    (:func:`.plan.gpu_for_repeat`; the CPU on CPU); each GPU's threads take its jobs in order.

    Args:
        plan (Plan): what to run.
        progress (bool): show a progress bar on stderr.
        jobs (list[dict[str, Any]] | None): the jobs to run (None: every job of ``plan``; a resumed
            ablation passes the missing ones).
        on_record (Callable[[dict[str, Any]], None] | None): called with every record as it finishes
            (in a job thread; :meth:`.store.RunStore.save`).
        workers (Workers | None): the ablation's workers, their server maybe importing already
            (:func:`early_workers`); None: :func:`make_workers`.  Their directories and server are
            removed at the end either way.
        before_measuring (Callable[[], Any] | None): run in a thread beside the first compiles; no run measures
            before it has returned (:meth:`.quiet.Quiet.hold`), and this returns only after it has.  It must not
            raise (what it raises is printed, and the measurements go on).

    Returns:
        list[dict[str, Any]]: one record per job, by job index, each with ``shard`` (this shard's index).

    Raises:
        Interrupted: SIGINT or SIGTERM arrived (under :func:`.signals.signals_raise`; a
            ``KeyboardInterrupt`` is treated as SIGINT).  Every worker's process group has been killed
            and the temporary directories removed; ``runs`` holds the records of the runs that had finished.
    """
    from tqdm import tqdm

    arms = {a.name: a for a in plan.arms}
    jobs = plan.jobs() if jobs is None else jobs
    lanes = _lanes(plan)
    placed = [(gpu_for_repeat(int(job["repeat"]), lanes), job) for job in jobs]  # in the interleaved order
    counts = runs_per_lane(jobs, lanes)
    results: list[dict[str, Any]] = []
    lock = threading.Lock()
    parallel = max(1, plan.parallel)
    if workers is None:
        workers = make_workers(plan, len(jobs))
    threads_each = workers.compile_threads  # the server's and every worker's: one value per ablation
    cap = live_cap(parallel, max(counts.values()), len(lanes), smallest_gpu_gib(plan.device, plan.gpus))
    quiet = Quiet(lanes, parallel, cap, counts)
    # Longest compile first where the lane is measured in one phase (cap >= its jobs), else plan order (.order).
    pending = Backlog(placed, {lane: cap >= counts[lane] for lane in lanes}, quiet.compile_span)
    slots = [lane for lane in lanes for _ in range(min(cap, counts[lane]))]
    bar = tqdm(total=len(jobs), desc=f"ablate {plan.workload}", unit="run", disable=not progress, file=sys.stderr)
    origin = time.perf_counter()

    def worker(gpu: int | None) -> None:
        while not workers.stopped:
            barrier = quiet.admit(gpu)
            if barrier is None:
                return
            try:
                job = pending.take(gpu, barrier["token"])
                if job is None:  # pragma: no cover - admit() counts each lane's jobs
                    return
                quiet.rank(barrier["token"], int(job["index"]))  # measured in plan order, whatever order it compiled in
                arm = arms[job["arm"]["name"]]
                record = call_job(job, arm, gpu, plan.timeout, plan.shard[0], workers, origin, parallel, threads_each, barrier)
            finally:
                quiet.finished(barrier)
            if record is None:  # stopped: the interruption handler reports what finished
                return
            record["quiet"] = {"barrier": True, "parallel": parallel, "cap": cap, "lanes": len(lanes)}
            record["compile_threads"] = threads_each  # every worker's TORCHINDUCTOR_COMPILE_THREADS (None: Inductor's)
            if on_record is not None:
                try:
                    on_record(record)
                except OSError as err:  # e.g. a full disk: the run still counts, it just cannot be resumed
                    print(f"warning: run {record['index']}'s record was not kept for --resume: {err}", file=sys.stderr)
            with lock:
                results.append(record)
                bar.set_postfix_str(f"{record['arm']} #{record['repeat']} {'ok' if record['ok'] else 'FAILED'}")
                bar.update()

    threads = [threading.Thread(target=worker, args=(g,), daemon=True) for g in slots]
    beside: list[threading.Thread] = []
    if before_measuring is not None:
        release = quiet.hold()

        def first() -> None:
            try:
                before_measuring()
            except Exception as err:  # noqa: BLE001 - said, never raised: it must not cost the runs
                print(f"warning: {err!r} before the first measurement", file=sys.stderr)
            finally:
                release()

        beside.append(threading.Thread(target=first, name="ik-before-measuring", daemon=True))
    try:
        # The fork server imports once, before any run's clock starts (its own cost goes to every
        # record's ``server``); started early (early_workers) it has imported while the command set up,
        # and this waits only for the rest.  An interruption meanwhile ends it.
        workers.fork_server()
        for t in [*beside, *threads]:
            t.start()
        for t in [*threads, *beside]:
            # A bounded join keeps the main thread where a signal handler can raise promptly.
            while t.is_alive():
                t.join(0.5)
        bar.close()
    except (Interrupted, KeyboardInterrupt) as stop:
        with signals_ignored():
            workers.stop()
            quiet.close()
            deadline = time.monotonic() + 15  # the threads reap their killed workers and remove their directories
            for t in threads:
                if t.is_alive():
                    t.join(max(0.0, deadline - time.monotonic()))
            workers.remove_dirs()
            bar.close()
        signum = stop.signum if isinstance(stop, Interrupted) else int(signal.SIGINT)
        with lock:
            done = sorted(results, key=lambda r: r["index"])
        raise Interrupted(signum, done, len(jobs)) from None
    finally:
        quiet.close()
        workers.remove_dirs()
    return sorted(results, key=lambda r: r["index"])
