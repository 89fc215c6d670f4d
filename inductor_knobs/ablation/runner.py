"""The local executor: every run of an ablation in a fresh process here, repeats interleaved (ABCABC…),
spread over GPUs.

Each job (arm × repeat) is one worker process (:func:`.job.call_job`, :mod:`.workers`).  With several
GPUs, one thread per GPU takes the next job in the interleaved order, so every GPU runs one process
at a time.  A job that crashes or runs past its timeout becomes an error record; the others still
run.  The records do not depend on the number of GPUs: one GPU or several (``--gpus 0,1``) give the
same fields, so the command's total ``wall_seconds`` of the two can be compared directly.

**Start-up paid once**: with more than one job, the workers are forked from one fork server that
imported torch and the workload's libraries once (:mod:`.forkserver`, :meth:`.workers.Workers.start`).

**Processes at once, measured in quiet** (``Plan.parallel``): each lane (a GPU, or the CPU) compiles up
to ``parallel`` workers at once, and every worker measures only through the phase barrier of
:mod:`.quiet`: one at a time on the whole host, pinned to its lane's CPUs, and only while no worker of the
ablation compiles.  Each lane has :func:`.quiet.live_cap` job threads (workers that have compiled
wait for their turn, holding a thread each).  With several at once, each worker gets
``CPUs / (lanes × parallel)`` Inductor compile threads.

On SIGINT or SIGTERM (under :func:`.signals.signals_raise`) :func:`execute` kills every worker's
process group, removes the temporary directories and raises :class:`.signals.Interrupted` with the
runs that had finished.
"""

from __future__ import annotations

import queue
import signal
import sys
import threading
import time
from collections.abc import Callable
from typing import Any

from .forkserver import preload_modules
from .job import call_job
from .plan import Plan
from .quiet import Quiet, live_cap, usable_cpus
from .signals import Interrupted, signals_ignored
from .workers import Workers


def execute(
    plan: Plan,
    progress: bool = True,
    jobs: list[dict[str, Any]] | None = None,
    on_record: Callable[[dict[str, Any]], None] | None = None,
) -> list[dict[str, Any]]:
    """Run every job of ``plan`` here; one thread per GPU (or one on CPU) takes jobs in order.

    Args:
        plan (Plan): what to run.
        progress (bool): show a progress bar on stderr.
        jobs (list[dict[str, Any]] | None): the jobs to run (None: every job of ``plan``; a resumed
            ablation passes the missing ones).
        on_record (Callable[[dict[str, Any]], None] | None): called with every record as it finishes
            (in a job thread; :meth:`.store.RunStore.save`).

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
    pending: queue.Queue[dict[str, Any]] = queue.Queue()
    for job in jobs:
        pending.put(job)
    results: list[dict[str, Any]] = []
    lock = threading.Lock()
    on_gpu = plan.device == "cuda" and bool(plan.gpus)
    lanes: list[int | None] = list(plan.gpus) if on_gpu else [None]
    parallel = max(1, plan.parallel)
    threads_each = max(1, usable_cpus() // (len(lanes) * parallel)) if parallel > 1 else None
    preload = preload_modules(plan.workload, plan.device) if len(jobs) > 1 else None
    workers = Workers(share_kernels=plan.device == "cuda", preload=preload, compile_threads=threads_each)
    if preload is None:
        workers.start_note = "one run: a fork server would import torch for that one run"
    cap = live_cap(parallel, len(jobs), len(lanes))
    quiet = Quiet(lanes, parallel, cap, len(jobs))
    slots = [lane for lane in lanes for _ in range(cap)]
    bar = tqdm(total=len(jobs), desc=f"ablate {plan.workload}", unit="run", disable=not progress, file=sys.stderr)
    origin = time.perf_counter()

    def worker(gpu: int | None) -> None:
        while not workers.stopped:
            barrier = quiet.admit(gpu)
            if barrier is None:
                return
            try:
                job = pending.get_nowait()
            except queue.Empty:  # pragma: no cover - admit() counts the jobs
                quiet.finished(barrier)
                return
            arm = arms[job["arm"]["name"]]
            try:
                record = call_job(job, arm, gpu, plan.timeout, plan.shard[0], workers, origin, parallel, threads_each, barrier)
            finally:
                quiet.finished(barrier)
            if record is None:  # stopped: the interruption handler reports what finished
                return
            record["quiet"] = {"barrier": True, "parallel": parallel, "cap": cap, "lanes": len(lanes)}
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
    try:
        # The fork server imports once, here, before any run's clock starts (its own cost goes to
        # every record's ``server``); an interruption meanwhile ends it.
        workers.fork_server()
        for t in threads:
            t.start()
        for t in threads:
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
