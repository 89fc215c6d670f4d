"""One run of an ablation: the job function every executor calls.

:func:`call_job` runs one job (arm × repeat) in a fresh worker process (:mod:`.workers`) and returns
its record; the local executor (:mod:`.runner`) calls it in its threads, the Slurm executor
(:mod:`.slurm`) through :func:`run_detached` in one Slurm job per run.  A job that crashes or runs
past its timeout becomes an error record; an exception on the way (no space for the cache
directory, a GPU that is not visible) too.

Around every job the machine's load is read (:mod:`.load`), and every record says when it ran
(``start_s``, ``end_s``: seconds since the executor started), so that the report can tell a load
that changed.  The records do not depend on the number of GPUs or the executor.

**Processes at once** (``Plan.parallel``): the local executor passes each job a ``barrier`` (:mod:`.quiet`)
through which its worker waits for a turn to measure while nothing of the ablation compiles; with
several workers per GPU the GPU utilisation is not read around runs (the ablation's own workers
share the GPU).  Every record says how its process started (``start``: ``forkserver`` with the
``server`` it was forked from, or ``subprocess``, see :mod:`.workers`) and when (``started_at``,
``ended_at``: ``time.monotonic()`` in this process, the clock of the worker's ``phase_spans``).
"""

from __future__ import annotations

import json
import os
import time
import traceback
from typing import Any

from . import fingerprint, load
from .spec import Arm
from .workers import Workers, knob_env, physical_gpu, read_output, reap, worker_env

#: The module every worker runs (``python -m``, or forked from the fork server).
WORKER = "inductor_knobs.ablation.worker"

#: GPU index -> when (``time.perf_counter()``) this ablation's last worker on it exited, where its
#: utilisation could be read (see :func:`_readings`).
_GPU_RELEASED: dict[int, float] = {}


def _readings(gpu: int | None, when: str) -> dict[str, Any]:
    out: dict[str, Any] = {f"load_{when}": load.cpu_load()}
    if gpu is not None:
        if when == "before":
            # NVML's utilisation covers its last sample period: read sooner after our own previous
            # worker exited, it counts that worker's last kernels as another process's.
            settle = _GPU_RELEASED.get(gpu, float("-inf")) + load.NVML_SAMPLE_PERIOD_S - time.perf_counter()
            time.sleep(max(0.0, settle))
        busy = load.gpu_utilization(gpu)
        if busy is not None:
            out[f"gpu_utilization_{when}"] = busy
            if when == "after":
                _GPU_RELEASED[gpu] = time.perf_counter()
    return out


#: How a run started and was measured: a forked run has ``server``, a new interpreter a ``start_note``,
#: a local run ``quiet`` (the barrier it measured under) and ``compile_threads`` (its Inductor compile threads, None:
#: Inductor's own choice), set by the runner.
RECORD_START_KEYS = ("start", "start_note", "server", "quiet", "compile_threads")


def stamp(record: dict[str, Any], job: dict[str, Any]) -> dict[str, Any]:
    """Give ``record`` a ``run_id``, if its worker reported none the fingerprint its parent knows, and
    every key of how it started and was measured (``start``, ``start_note``, ``server``, ``quiet``,
    ``compile_threads``: None where they do not apply), so that every executor's records have one schema.

    Args:
        record (dict[str, Any]): a finished run's record (changed in place).
        job (dict[str, Any]): its job.

    Returns:
        dict[str, Any]: ``record``.
    """
    record.setdefault("run_id", fingerprint.new_run_id())
    for key in RECORD_START_KEYS:
        record.setdefault(key, None)
    if not isinstance(record.get("fingerprint"), dict):
        arm = Arm(**job["arm"])
        try:
            record["fingerprint"] = fingerprint.partial(job, knob_env(arm, job.get("emulate")))
        except Exception as err:  # noqa: BLE001 - a record is never lost for want of its fingerprint
            record["fingerprint_error"] = f"{type(err).__name__}: {err}"
    return record


def run_job(
    job: dict[str, Any],
    arm: Arm,
    gpu: int | None,
    timeout: float,
    workers: Workers | None = None,
    origin: float | None = None,
    parallel: int = 1,
    compile_threads: int | None = None,
    barrier: dict[str, Any] | None = None,
) -> dict[str, Any] | None:
    """Run one job in a fresh process, in its own session, with a private cache directory.

    Args:
        job (dict[str, Any]): the job (see :meth:`.plan.Plan.jobs`), passed to the worker as JSON.
        arm (Arm): the job's arm.
        gpu (int | None): this process's GPU index for it, or None on CPU.
        timeout (float): seconds before the worker and everything it started are killed (its wait for
            a turn to measure included).
        workers (Workers | None): the registry that the executor stops on an interruption (None: a
            private one, whose workers start as new interpreters).
        origin (float | None): the ``time.perf_counter()`` that ``start_s`` and ``end_s`` count from
            (None: now).
        parallel (int): workers on this GPU at once; above 1 the GPU's utilisation is not read.
        compile_threads (int | None): Inductor compile threads for the worker, or None (Inductor's default).
        barrier (dict[str, Any] | None): the job's place in the measurement barrier
            (:meth:`.quiet.Quiet.admit`), or None (the worker measures as soon as it has compiled).

    Returns:
        dict[str, Any] | None: the record (a crash or timeout is an error record) with the load
        readings around it, or None if ``workers`` was stopped before or while it ran.

    Raises:
        InvalidKnobValue: ``gpu`` is not among this process's ``CUDA_VISIBLE_DEVICES``.
    """
    workers = workers if workers is not None else Workers()
    device = physical_gpu(gpu, os.environ.get("CUDA_VISIBLE_DEVICES")) if gpu is not None else None
    # Repeat 0 compiles with empty caches (the arm's compile price) and publishes its Triton binaries; a later repeat
    # compiles with the ablation's shared Triton directory from its start (.kernel_share).
    cold = int(job["repeat"]) == 0
    if barrier is not None:
        job = {**job, "barrier": barrier}
        if gpu is not None and parallel > 1:  # workers share this GPU: they take turns at autotune benchmarks
            job["gpu_lock"] = workers.gpu_lock_path(gpu)
    watched = gpu if parallel == 1 else None  # with several at once the GPU is busy with our own workers
    before = _readings(watched, "before")
    start, started_at = time.perf_counter(), time.monotonic()
    origin = start if origin is None else origin
    started = workers.start(
        WORKER,
        [json.dumps(job)],
        lambda cache: worker_env(
            arm, gpu, cache, job.get("emulate"), kernels=workers.kernels, cold=cold, compile_threads=compile_threads
        ),
    )
    if started is None:
        return None
    proc, cache = started
    try:
        returncode = proc.wait(timeout)
        if returncode is None:
            reap(proc)
    finally:
        if proc.poll() is None:  # an exception on the way: leave nothing running
            reap(proc)
        stdout, stderr = read_output(cache)
        killed = workers.done(proc, cache)
    end, ended_at = time.perf_counter(), time.monotonic()
    if killed:
        return None
    lines = stdout.strip().splitlines()
    result = json.loads(lines[-1]) if lines and lines[-1].startswith("{") else None
    if returncode is None:
        result = {"ok": False, "error": f"timed out after {timeout:.0f} s", "traceback": stderr[-3000:]}
    elif result is None:
        result = {"ok": False, "error": f"worker exited {proc.returncode} without a result", "traceback": stderr[-3000:]}
    return {
        **result,
        **proc.start,
        "arm": arm.name,
        "repeat": job["repeat"],
        "index": job["index"],
        "gpu": gpu,
        "cuda_visible_devices": device,
        "wall_seconds": end - start,
        "start_s": start - origin,
        "end_s": end - origin,
        "started_at": started_at,
        "ended_at": ended_at,
        "kernel_cache": "shared" if workers.kernels and not cold else "cold",
        **before,
        **_readings(watched, "after"),
    }


def call_job(
    job: dict[str, Any],
    arm: Arm,
    gpu: int | None,
    timeout: float,
    shard: int,
    workers: Workers | None = None,
    origin: float | None = None,
    parallel: int = 1,
    compile_threads: int | None = None,
    barrier: dict[str, Any] | None = None,
) -> dict[str, Any] | None:
    """:func:`run_job`, with an exception on the way turned into an error record, and ``shard``, a
    ``run_id`` and a fingerprint (:func:`stamp`) added: the job function that every executor calls.

    Args:
        job, arm, gpu, timeout, workers, origin, parallel, compile_threads, barrier: as :func:`run_job`.
        shard (int): this shard's index (``Plan.shard[0]``), stored in the record.

    Returns:
        dict[str, Any] | None: the record, or None if ``workers`` was stopped before or while it ran.
    """
    try:
        record = run_job(job, arm, gpu, timeout, workers, origin, parallel, compile_threads, barrier)
    except Exception as err:  # noqa: BLE001 - a failed run, not a lost one
        tail = traceback.format_exc()[-3000:]
        record = {"ok": False, "error": f"{type(err).__name__}: {err}", "traceback": tail}
        record.update(arm=job["arm"]["name"], repeat=job["repeat"], index=job["index"], gpu=gpu)
    if record is not None:
        record["shard"] = shard
        stamp(record, job)
    return record


def run_detached(job: dict[str, Any], arm: Arm, gpu: int | None, timeout: float, shard: int, epoch: float) -> dict[str, Any]:
    """:func:`call_job` in a process of its own on another machine (one Slurm job, see :mod:`.slurm`).

    The local executor's ``start_s`` and ``end_s`` count from its start in the same process; here they
    count from ``epoch`` instead, the submitting process's wall clock (``time.time()``) when it
    submitted, so that the records of jobs on several nodes share one time axis (as far as the
    nodes' clocks agree).

    Args:
        job, arm, gpu, timeout, shard: as :func:`call_job` (``gpu``: 0 for the job's first allocated
            GPU, which Slurm's ``CUDA_VISIBLE_DEVICES`` names; None on CPU).
        epoch (float): seconds since the Unix epoch that ``start_s`` and ``end_s`` count from.

    Returns:
        dict[str, Any]: the record (a crash or timeout is an error record).
    """
    origin = time.perf_counter() - (time.time() - epoch)
    record = call_job(job, arm, gpu, timeout, shard, origin=origin)
    if record is not None and record.get("start") == "subprocess":
        record.setdefault("start_note", "one run per Slurm job: a fork server would import torch for that one run")
    if record is None:  # pragma: no cover - a private registry is never stopped
        record = {"ok": False, "error": "the worker was stopped", "arm": arm.name, "repeat": job["repeat"]}
        record.update(index=job["index"], gpu=gpu, shard=shard)
    return record
