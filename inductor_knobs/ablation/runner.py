"""The local executor: every run of an ablation in a fresh process here, repeats interleaved (ABCABC…),
spread over GPUs.

Each job (arm × repeat) is one worker process (:func:`.job.call_job`, :mod:`.workers`).  With several
GPUs, one thread per GPU takes the next job in the interleaved order, so every GPU runs one process
at a time.  A job that crashes or runs past its timeout becomes an error record; the others still
run.  The records do not depend on the number of GPUs: one GPU or several (``--gpus 0,1``) give the
same fields, so the command's total ``wall_seconds`` of the two can be compared directly.

**Processes at once** (``Plan.parallel``, CUDA only): each GPU gets that many job threads, so that
many workers start, import, build and compile on it at once.  Their measurements never overlap:
every worker takes the GPU's lock file for its warm-up, samples and profiling (see :mod:`.job`).
What does overlap is one worker's measurement with another's compilation and autotuning (CPU work,
and short GPU benchmark bursts); the full-GPU A/A control of the main job shows what that costs.
With several at once, each worker gets ``CPUs / (GPUs × parallel)`` Inductor compile threads.

On SIGINT or SIGTERM (under :func:`.signals.signals_raise`) :func:`execute` kills every worker's
process group, removes the temporary directories and raises :class:`.signals.Interrupted` with the
runs that had finished.
"""

from __future__ import annotations

import os
import queue
import signal
import sys
import threading
import time
from collections.abc import Callable
from typing import Any

from .job import call_job
from .plan import Plan
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
    workers = Workers(share_kernels=plan.device == "cuda")
    bar = tqdm(total=len(jobs), desc=f"ablate {plan.workload}", unit="run", disable=not progress, file=sys.stderr)
    origin = time.perf_counter()
    on_gpu = plan.device == "cuda" and bool(plan.gpus)
    parallel = max(1, plan.parallel) if on_gpu else 1
    slots: list[int | None] = [g for g in plan.gpus for _ in range(parallel)] if on_gpu else [None]
    threads_each = max(1, (os.cpu_count() or 1) // len(slots)) if parallel > 1 else None

    def worker(gpu: int | None) -> None:
        while not workers.stopped:
            try:
                job = pending.get_nowait()
            except queue.Empty:
                return
            arm = arms[job["arm"]["name"]]
            record = call_job(job, arm, gpu, plan.timeout, plan.shard[0], workers, origin, parallel, threads_each)
            if record is None:  # stopped: the interruption handler reports what finished
                return
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
        workers.remove_dirs()
    return sorted(results, key=lambda r: r["index"])
