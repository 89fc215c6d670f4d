"""The Slurm executor: every run of an ablation is one Slurm job (``ablate --executor slurm``).

The jobs are submitted with `submitit <https://github.com/facebookincubator/submitit>`_ as one job
array (``AutoExecutor(folder=<out>/slurm, cluster="slurm")`` and ``executor.batch()``), and each
runs :func:`.job.run_detached`: the same job function the local executor calls in its threads
(:func:`.job.call_job`, one fresh ``inductor_knobs.ablation.worker`` process with private Inductor
and Triton cache directories), only on a Slurm node.  The records come back through submitit's result
files and are the local executor's records, field for field; the report does not know where they ran.
The options of the jobs are checked before anything is submitted (:mod:`.slurm_options`).

What differs from the local executor:

- Every Slurm job compiles with empty caches (``"kernel_cache": "cold"``): Triton binaries are not
  shared between repeats, which the local executor does on one machine.
- Jobs run at once as far as Slurm lets them (one job per run, each with the options below); give
  ``--slurm-sbatch-flag exclusive`` for one job per node at a time, as a quiet machine would measure.
- The load readings (``load_before``, ``load_after``) are the node's, which other jobs may share.

**A job that dies** (``scancel``, a node failure, the time limit) leaves no result file, or, when
Slurm's SIGTERM reached the worker first, the error record of a worker that exited -15 (submitit keeps
SIGTERM from its own process, which then still returns the record).  While it waits, :func:`execute`
checks the result files every :data:`POLL_S` seconds and asks ``squeue`` for the jobs' states every
:data:`QUEUE_POLL_S` seconds; a job in a final state without a result (or gone from the queue, as a
pending array element that was cancelled is) becomes an error record.  Every failed run's error names
its Slurm job (and its final state where ``squeue`` still has it) and its log files (submitit's
``<folder>/<job>_0_log.out`` and ``.err``; the record's ``log`` is the latter).  The other runs are
kept, and ``ablate --resume`` runs the failed ones again (see :mod:`.store`).

SIGINT or SIGTERM while waiting cancels the jobs that have not finished (``scancel``) and keeps the
finished runs, as the local executor does.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from typing import Any

from .errors import SlurmSubmitFailed
from .job import run_detached, stamp
from .plan import Plan, SlurmOptions
from .signals import Interrupted, signals_ignored

#: Seconds between two looks at the jobs' result files, and between two ``squeue`` calls.
POLL_S, QUEUE_POLL_S = 1.0, 5.0

#: Seconds a job may stay ``COMPLETED`` without its result file (a shared file system's delay) before
#: it counts as failed.
RESULT_GRACE_S = 30.0

#: Slurm job states after which a job never runs again (``squeue``'s long names).
FINAL_STATES = frozenset(
    {"BOOT_FAIL", "CANCELLED", "COMPLETED", "DEADLINE", "FAILED", "NODE_FAIL", "OUT_OF_MEMORY", "PREEMPTED", "REVOKED", "TIMEOUT"}
)


def queue_states(job_ids: list[str]) -> dict[str, str] | None:
    """The Slurm states of ``job_ids`` and of every element of the arrays among them.

    Args:
        job_ids: Slurm job ids (``123``, or array elements such as ``123_4``).

    Returns:
        Job id (``123_4`` for an array element) -> its ``squeue`` state (``PENDING``, ``CANCELLED``,
        ...), for every job slurmctld still knows (a finished job for ``MinJobAge`` seconds; a pending
        array element that was cancelled is forgotten at once); None when ``squeue`` failed.
    """
    arrays = sorted({job.split("_")[0] for job in job_ids})
    if not arrays:
        return {}
    command = ["squeue", "--states=all", "--array", "--noheader", "--format=%i|%T", "--jobs", ",".join(arrays)]
    try:
        out = subprocess.run(command, capture_output=True, text=True, timeout=60, check=False)
    except (OSError, subprocess.TimeoutExpired):
        return None
    if out.returncode != 0:
        # squeue exits 1 with "Invalid job id specified" once every job asked for is forgotten.
        return {} if "invalid job id" in out.stderr.lower() else None
    states = {}
    for line in out.stdout.splitlines():
        job, _, state = line.strip().partition("|")
        if job and state:
            states[job] = state.strip().upper()
    return states


def _log_paths(job: Any) -> tuple[str, str]:
    return str(job.paths.stdout), str(job.paths.stderr)


def _dead_record(job: Any, spec: dict[str, Any], gpu: int | None, shard: int, why: str) -> dict[str, Any]:
    """The error record of a Slurm job that ended without a result: it names the job and its logs."""
    stdout, stderr = _log_paths(job)
    written = [p for p in (stdout, stderr) if os.path.exists(p)]
    tail = ""
    for path in reversed(written):
        with open(path, encoding="utf-8", errors="replace") as src:
            tail = src.read()[-3000:]
        if tail.strip():
            break
    logs = f"logs {stdout}, {stderr}" + ("" if written else " (not written: the job never started)")
    return {
        "ok": False,
        "error": f"Slurm job {job.job_id} {why}; {logs}",
        "traceback": tail,
        "arm": spec["arm"]["name"],
        "repeat": spec["repeat"],
        "index": spec["index"],
        "gpu": gpu,
        "shard": shard,
        "log": stderr,
    }


def _result_record(job: Any, spec: dict[str, Any], gpu: int | None, shard: int) -> dict[str, Any]:
    """The record in a finished job's result file, or an error record naming its logs."""
    try:
        record = job.result()
    except Exception as err:  # noqa: BLE001 - submitit re-raises whatever ended the job (FailedJobError, ...)
        first = str(err).strip().splitlines()[0] if str(err).strip() else type(err).__name__
        return {**_dead_record(job, spec, gpu, shard, f"failed: {first}"), "traceback": str(err)[-3000:]}
    if not isinstance(record, dict):
        return _dead_record(job, spec, gpu, shard, f"returned {type(record).__name__}, not a record")
    if not record.get("ok"):
        # A job cancelled while its worker ran: Slurm's SIGTERM reaches the worker, whose parent (which
        # submitit keeps from SIGTERM) still returns its error record; the error names the job and its logs.
        stdout, stderr = _log_paths(job)
        state = (queue_states([str(job.job_id)]) or {}).get(str(job.job_id), "")
        ended = f" ended {state}" if state in FINAL_STATES - {"COMPLETED"} else ""
        record = {**record, "error": f"{record.get('error')} (Slurm job {job.job_id}{ended}; logs {stdout}, {stderr})"}
        record["log"] = stderr
    return record


class SlurmRun:
    """One :func:`execute`'s submitted jobs; ``job_ids`` maps each job index to its Slurm job id."""

    def __init__(self) -> None:
        self.job_ids: dict[int, str] = {}
        self.folder: str | None = None


def execute(
    plan: Plan,
    folder: str,
    progress: bool = True,
    jobs: list[dict[str, Any]] | None = None,
    on_record: Callable[[dict[str, Any]], None] | None = None,
    run: SlurmRun | None = None,
) -> list[dict[str, Any]]:
    """Run ``jobs`` of ``plan`` as one Slurm job each (one job array) and wait for them.

    Args:
        plan: what to run; ``plan.slurm`` holds the job options.
        folder: submitit's folder for the jobs' pickles, results and logs (``<out>/slurm``); it must
            be on a file system the nodes share.
        progress: show a progress bar on stderr.
        jobs: the jobs to run (None: every job of ``plan``).
        on_record: called with every record as it comes back (:meth:`.store.RunStore.save`).
        run: filled with the Slurm job ids, for results.json.

    Returns:
        One record per job, by job index: the worker's record, or an error record for a job that
        died (cancelled, node failure, time limit), which names the job's log files.

    Raises:
        SlurmSubmitFailed: ``sbatch`` refused the jobs (nothing was submitted).
        Interrupted: SIGINT or SIGTERM arrived (under :func:`.signals.signals_raise`); the jobs that had
            not finished were cancelled, ``runs`` holds the finished ones.
    """
    import submitit
    from tqdm import tqdm

    jobs = plan.jobs() if jobs is None else jobs
    run = run if run is not None else SlurmRun()
    run.folder = folder
    if not jobs:
        return []
    options = plan.slurm or SlurmOptions()
    arms = {a.name: a for a in plan.arms}
    gpu = 0 if plan.device == "cuda" else None  # the job's first GPU, as Slurm's CUDA_VISIBLE_DEVICES names it
    shard = plan.shard[0]
    try:
        executor = submitit.AutoExecutor(folder=folder, cluster="slurm")
        executor.update_parameters(**options.parameters(plan))
        epoch = time.time()
        with executor.batch():
            submitted = [
                executor.submit(run_detached, job, arms[job["arm"]["name"]], gpu, plan.timeout, shard, epoch) for job in jobs
            ]
    except Exception as err:  # sbatch's refusal comes as CalledProcessError or submitit's own errors
        text = " ".join(str(err).split())
        raise SlurmSubmitFailed(f"sbatch refused the ablation's {len(jobs)} job(s): {text[:500]}") from err
    for job, slurm_job in zip(jobs, submitted):
        run.job_ids[int(job["index"])] = str(slurm_job.job_id)
    first = str(submitted[0].job_id).split("_")[0]
    print(f"slurm: submitted {len(jobs)} job(s) as Slurm job {first}; logs in {folder}", file=sys.stderr)

    pending = dict(enumerate(submitted))
    results: list[dict[str, Any]] = []
    completed_since: dict[int, float] = {}  # COMPLETED (or gone) without a result file, since when
    bar = tqdm(total=len(jobs), desc=f"ablate {plan.workload} (slurm)", unit="run", disable=not progress, file=sys.stderr)

    def finish(i: int, record: dict[str, Any]) -> None:
        pending.pop(i, None)
        stamp(record, jobs[i])  # a job that died has no run id yet
        if on_record is not None:
            try:
                on_record(record)
            except OSError as err:
                print(f"warning: run {record['index']}'s record was not kept for --resume: {err}", file=sys.stderr)
        results.append(record)
        bar.set_postfix_str(f"{record['arm']} #{record['repeat']} {'ok' if record.get('ok') else 'FAILED'}")
        bar.update()

    last_queue = time.monotonic()
    try:
        while pending:
            for i, slurm_job in list(pending.items()):
                if slurm_job.paths.result_pickle.exists():
                    finish(i, _result_record(slurm_job, jobs[i], gpu, shard))
            if pending and time.monotonic() - last_queue >= QUEUE_POLL_S:
                last_queue = time.monotonic()
                states = queue_states([str(j.job_id) for j in pending.values()])
                for i, slurm_job in list(pending.items()) if states is not None else []:
                    if states is None or slurm_job.paths.result_pickle.exists():
                        continue  # written since the look above: collected next round
                    state = states.get(str(slurm_job.job_id), "")
                    if state in FINAL_STATES - {"COMPLETED"}:
                        finish(i, _dead_record(slurm_job, jobs[i], gpu, shard, f"ended {state} without a result"))
                    elif state in ("COMPLETED", ""):
                        since = completed_since.setdefault(i, time.monotonic())
                        # gone from the queue: seen twice (a cancelled pending array element is
                        # forgotten at once); COMPLETED: the result file may still be on its way
                        grace = RESULT_GRACE_S if state else QUEUE_POLL_S
                        if time.monotonic() - since >= grace:
                            why = (
                                "completed without a result file"
                                if state
                                else "left the Slurm queue without a result (cancelled while pending, or forgotten)"
                            )
                            finish(i, _dead_record(slurm_job, jobs[i], gpu, shard, why))
                    else:
                        completed_since.pop(i, None)
            if pending:
                time.sleep(POLL_S)
        bar.close()
    except (Interrupted, KeyboardInterrupt) as stop:
        with signals_ignored():
            left = [str(j.job_id) for j in pending.values()]
            if left:  # one scancel for all of them
                with contextlib.suppress(OSError, subprocess.SubprocessError):
                    subprocess.run(["scancel", *left], capture_output=True, timeout=60, check=False)
            bar.close()
        signum = stop.signum if isinstance(stop, Interrupted) else int(signal.SIGINT)
        raise Interrupted(signum, sorted(results, key=lambda r: r["index"]), len(jobs)) from None
    return sorted(results, key=lambda r: r["index"])
