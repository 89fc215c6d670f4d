"""Run an ablation: every arm in fresh processes, repeats interleaved (ABCABC…), spread over GPUs.

This module is the local executor (:func:`execute`) and the job function that every executor calls
(:func:`call_job`; :mod:`.slurm` calls it in a Slurm job through :func:`run_detached`).

Each job (arm × repeat) is one ``inductor_knobs.ablation.worker`` process with the arm's
``INDUCTOR_KNOBS_*`` variables, its own empty Inductor and Triton cache directories and, on GPUs,
``CUDA_VISIBLE_DEVICES`` set to one GPU (the parent's logical GPU ``i`` mapped through the
parent's own ``CUDA_VISIBLE_DEVICES``).  With several GPUs, one thread per GPU takes the next
job in the interleaved order, so every GPU runs one process at a time.  A job that crashes or
runs past ``timeout`` seconds becomes an error record; the others still run.  Around every job the
runner reads the machine's load (:mod:`.load`), and every record says when it ran (``start_s``,
``end_s``: seconds since :func:`execute` started), so that the report can tell a load that changed.

The records do not depend on the number of GPUs: one GPU or several (``--gpus 0,1``) give the same
fields, so the command's total ``wall_seconds`` of the two can be compared directly.

**Processes at once** (``Plan.parallel``, CUDA only): each GPU gets that many job threads, so that
many workers start, import, build and compile on it at once.  Their measurements never overlap:
every worker takes the GPU's lock file (``measure_lock`` in its job, :func:`fcntl.flock`) for its
warm-up, samples and profiling, and records how long it waited.  What does overlap is one worker's
measurement with another's compilation and autotuning (CPU work, and short GPU benchmark bursts);
the full-GPU A/A control of the main job shows what that costs.  With several at once, each worker
gets ``CPUs / (GPUs × parallel)`` Inductor compile threads, and the GPU utilisation is not read
around runs (the ablation's own workers share the GPU).

**What is shared: Triton kernel binaries, nothing that decides** (CUDA only).  Triton's cache holds
compiled binaries keyed by the kernel's source, compile options and target; reusing one replays no
choice (every process still traces, lowers, autotunes and picks its own kernels).  So repeat 0 of
every arm compiles with empty caches (``"kernel_cache": "cold"``: its compile time is the cold one
the report shows), and when it exits its Triton binaries move into the ablation's shared kernel
directory, which every later repeat uses as its ``TRITON_CACHE_DIR`` (``"shared"``).  Inductor's own
cache (compiled graphs, autotune results) stays private to every process.

Every worker runs in its own session (process group), so that a timeout or an interruption can
kill it together with anything it started (Inductor's compile workers), and so that a Ctrl-C in
the terminal reaches only the parent, which then stops the workers itself: on SIGINT or SIGTERM
(see :func:`signals_raise`) :func:`execute` kills every worker's process group, removes the
temporary cache directories and raises :class:`Interrupted` with the runs that had finished.
"""

from __future__ import annotations

import contextlib
import json
import os
import queue
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
import traceback
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from ..core.knobs import EMULATE_SMS_VAR, ENV_PREFIX
from ..errors import InvalidKnobValue
from . import load
from .spec import Arm

if TYPE_CHECKING:
    from .slurm import SlurmOptions

#: The signals that stop an ablation cleanly (the exit status is 128 + the signal number).
STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM)


@dataclass
class Plan:
    """What to run.

    Attributes:
        workload: a built-in name or ``pkg.module:factory``.
        arms: the arms, baseline first unless ``baseline`` names another.
        repeats: processes per arm.
        device: ``cuda`` or ``cpu``.
        gpus: GPU indices to spread jobs over (CUDA only), as torch numbers them in this process;
            each worker gets the matching entry of this process's ``CUDA_VISIBLE_DEVICES``
            (:func:`physical_gpu`).
        quick: smaller inputs and fewer samples (for CI).
        iters: latency samples per process; warmup: iterations before sampling.
        timeout: seconds per job.
        shard: ``(i, n)``: run only jobs ``j`` with ``j % n == i``.
        emulate: ``INDUCTOR_KNOBS_EMULATE_SMS`` for every job whose arm sets none (an SM count or
            preset), or None.
        smoke: a smoke test: fewer than 3 processes per arm allowed, no intervals.
        sections: arm name -> the table section it belongs to ("" or absent: the main one).
        baselines: arm name -> the arm its speedup is relative to (absent: ``baseline``).
        profile_iters: iterations profiled for GPU kernel time (CUDA only).
        main_job: the arms are the main job's (no --arm, --grid or --config).
        emulation_skipped: why the main job has no emulated small-GPU section, or None.
        parallel: workers per GPU at once (see the module docstring); 1 on CPU.
        executor: where the jobs run: ``local`` (:func:`execute`, here) or ``slurm`` (one Slurm job
            per run, :func:`.slurm.execute`); the records are the same.
        slurm: the Slurm job options (``executor == "slurm"`` only).
    """

    workload: str
    arms: list[Arm]
    repeats: int = 3
    device: str = "cpu"
    gpus: list[int] = field(default_factory=list)
    quick: bool = False
    iters: int = 20
    warmup: int = 3
    timeout: float = 900.0
    shard: tuple[int, int] = (0, 1)
    baseline: str | None = None
    emulate: str | None = None
    smoke: bool = False
    sections: dict[str, str] = field(default_factory=dict)
    baselines: dict[str, str] = field(default_factory=dict)
    profile_iters: int = 5
    main_job: bool = False
    emulation_skipped: str | None = None
    parallel: int = 1
    executor: str = "local"
    slurm: SlurmOptions | None = None

    def jobs(self) -> list[dict[str, Any]]:
        """Interleaved jobs (repeat 0 of every arm, then repeat 1, …), this shard's only."""
        jobs: list[dict[str, Any]] = [
            {
                "index": r * len(self.arms) + a,
                "repeat": r,
                "arm": arm.to_dict(),
                "workload": self.workload,
                "device": self.device,
                "quick": self.quick,
                "iters": self.iters,
                "warmup": self.warmup,
                "seed": 0,
                "emulate": arm.emulate or self.emulate,
                "profile_iters": self.profile_iters,
            }
            for r in range(self.repeats)
            for a, arm in enumerate(self.arms)
        ]
        index, count = self.shard
        return [j for j in jobs if int(j["index"]) % count == index]


class Interrupted(BaseException):
    """SIGINT or SIGTERM arrived during an ablation (raised under :func:`signals_raise`).

    A ``BaseException``, like ``KeyboardInterrupt``, so that no ``except Exception`` on the way (in
    torch, in a user's workload) swallows it.

    Attributes:
        signum: the signal's number.
        runs: the records of the runs that finished before it, by job index (empty when it arrived
            outside :func:`execute`).
        planned: how many runs this shard planned (0 outside :func:`execute`).
    """

    def __init__(self, signum: int, runs: list[dict[str, Any]] | None = None, planned: int = 0) -> None:
        super().__init__(signum)
        self.signum = signum
        self.runs = runs or []
        self.planned = planned

    @property
    def name(self) -> str:
        """The signal's name, e.g. ``SIGINT``."""
        return signal.Signals(self.signum).name

    @property
    def status(self) -> int:
        """The conventional exit status of a process stopped by this signal: 128 + its number."""
        return 128 + self.signum


def _raise_interrupted(signum: int, frame: Any) -> None:
    raise Interrupted(signum)


@contextlib.contextmanager
def _handlers(handler: Any) -> Iterator[None]:
    # Handlers can only be set from the main thread; elsewhere (an embedding application's thread)
    # the process keeps its own.  A signal ignored on entry stays ignored: a shell starts background
    # jobs with SIGINT ignored so that Ctrl-C reaches only the foreground job.
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    previous = {s: signal.getsignal(s) for s in STOP_SIGNALS}
    for s, old in previous.items():
        if old is not signal.SIG_IGN:
            signal.signal(s, handler)
    try:
        yield
    finally:
        for s, old in previous.items():
            if old is not None:  # None: a handler set outside Python, which cannot be put back
                signal.signal(s, old)


def signals_raise() -> contextlib.AbstractContextManager[None]:
    """Inside the block, SIGINT and SIGTERM raise :class:`Interrupted` in the main thread.

    By default SIGINT is a ``KeyboardInterrupt`` wherever the main thread happens to be, and SIGTERM
    ends the process with no cleanup at all; one exception for both lets the caller stop the workers
    and keep the finished runs.  The previous handlers are restored on exit.
    """
    return _handlers(_raise_interrupted)


def signals_ignored() -> contextlib.AbstractContextManager[None]:
    """Inside the block, SIGINT and SIGTERM are ignored (main thread only), so that the cleanup after
    an interruption finishes when Ctrl-C is pressed again.  Start no worker inside: it would inherit
    the ignored signals."""
    return _handlers(signal.SIG_IGN)


def physical_gpu(index: int, visible: str | None) -> str:
    """The ``CUDA_VISIBLE_DEVICES`` value that gives a worker this process's GPU ``index``.

    torch numbers the GPUs it sees 0..n-1 in the order of ``CUDA_VISIBLE_DEVICES``; a worker given
    ``CUDA_VISIBLE_DEVICES=<index>`` would see the machine's GPU ``index`` instead, which may belong
    to another job.  So logical GPU ``i`` maps to the ``i``-th entry of the parent's variable.

    Args:
        index: the GPU's index in this process (as ``--gpus`` and ``torch.cuda`` number it).
        visible: this process's ``CUDA_VISIBLE_DEVICES`` (None: unset, every GPU is visible and
            the index is the machine's).  Entries are ordinals or UUIDs (``GPU-...``, ``MIG-...``);
            like CUDA, the list ends at the first empty or negative entry.

    Returns:
        The entry, verbatim (stripped of spaces).

    Raises:
        InvalidKnobValue: ``index`` is not among the visible entries.
    """
    if visible is None:
        return str(index)
    entries: list[str] = []
    for entry in visible.split(","):
        entry = entry.strip()
        if not entry or entry.startswith("-"):  # CUDA ignores this entry and every one after it
            break
        entries.append(entry)
    if not 0 <= index < len(entries):
        raise InvalidKnobValue(
            f"GPU {index} is not among CUDA_VISIBLE_DEVICES={visible!r}: allowed GPU indices 0..{len(entries) - 1} into that list"
            if entries
            else f"GPU {index} is not among CUDA_VISIBLE_DEVICES={visible!r}: it makes no GPU visible"
        )
    return entries[index]


def worker_env(
    arm: Arm,
    gpu: int | None,
    cache: str,
    emulate: str | None,
    kernels: str | None = None,
    compile_threads: int | None = None,
) -> dict[str, str]:
    """The environment of one worker process.

    Args:
        arm: its ``INDUCTOR_KNOBS_*`` variables replace every one of this process's.
        gpu: this process's GPU index, mapped with :func:`physical_gpu` (None: CPU, unchanged).
        cache: the job's private directory for Inductor's and Triton's caches.
        emulate: ``INDUCTOR_KNOBS_EMULATE_SMS`` for the worker, or None.
        kernels: the ablation's shared Triton kernel directory for this job, or None (private).
        compile_threads: ``TORCHINDUCTOR_COMPILE_THREADS`` unless this process sets it, or None.

    Returns:
        A copy of ``os.environ`` with the changes.

    Raises:
        InvalidKnobValue: ``gpu`` is not among this process's ``CUDA_VISIBLE_DEVICES``.
    """
    env = {k: v for k, v in os.environ.items() if not k.startswith(ENV_PREFIX)}
    env.update({ENV_PREFIX + "ON_MISMATCH": "warn", **arm.env()})
    env.update(
        {"TORCHINDUCTOR_CACHE_DIR": os.path.join(cache, "inductor"), "TRITON_CACHE_DIR": kernels or os.path.join(cache, "triton")}
    )
    if compile_threads is not None:
        env.setdefault("TORCHINDUCTOR_COMPILE_THREADS", str(compile_threads))
    # A user workload (``mymodels:factory``) is named relative to the current directory, as the
    # parent resolved it (workloads.resolve); the worker must find the same module.
    cwd = os.getcwd()
    rest = [p for p in env.get("PYTHONPATH", "").split(os.pathsep) if p and p != cwd]
    env["PYTHONPATH"] = os.pathsep.join([cwd, *rest])
    if gpu is not None:
        env["CUDA_VISIBLE_DEVICES"] = physical_gpu(gpu, os.environ.get("CUDA_VISIBLE_DEVICES"))
    if emulate:
        env[EMULATE_SMS_VAR] = str(emulate)
    return env


def _kill_group(proc: subprocess.Popen[str]) -> None:
    # The worker leads its own process group (start_new_session): this also ends what it started,
    # such as Inductor's compile workers, which would otherwise hold its pipes open.
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass  # the whole group has exited already


class _Workers:
    """The live worker processes and cache directories of one :func:`execute`, and its stop switch.

    One lock orders :meth:`start` and :meth:`stop`: a worker either starts before ``stop`` (and is
    killed by it) or sees the switch and does not start, so no worker outlives an interruption.
    """

    def __init__(self, share_kernels: bool = False) -> None:
        self.lock = threading.Lock()
        self.stopped = False
        self.procs: dict[int, subprocess.Popen[str]] = {}
        self.killed: set[int] = set()
        self.dirs: set[str] = set()
        # The ablation's own directory (made when first needed): the shared Triton kernels and the
        # GPUs' measurement locks.
        self.run_dir: str | None = None
        self.kernels = os.path.join(self._own_dir(), "kernels") if share_kernels else None
        if self.kernels:
            os.makedirs(self.kernels)

    def _own_dir(self) -> str:
        with self.lock:
            if self.run_dir is None:
                self.run_dir = tempfile.mkdtemp(prefix="ik-ablate-run-")
            return self.run_dir

    def measure_lock(self, gpu: int | None) -> str:
        """The lock file that the workers on ``gpu`` take for their measurement."""
        return os.path.join(self._own_dir(), f"gpu{gpu}.lock")

    def keep_kernels(self, cache: str) -> None:
        """Move the Triton binaries a finished cold worker built in ``cache`` into the shared directory.

        Each entry is one kernel's directory; ``os.rename`` moves it whole (same file system) or not at
        all, so a reader never sees part of one.  An entry that is there already stays as it is.
        """
        source = os.path.join(cache, "triton")
        if not self.kernels or not os.path.isdir(source):
            return
        for name in os.listdir(source):
            target = os.path.join(self.kernels, name)
            if not os.path.exists(target):
                with contextlib.suppress(OSError):  # another worker put the same kernel there meanwhile
                    os.rename(os.path.join(source, name), target)

    def start(self, argv: list[str], env_for: Any) -> tuple[subprocess.Popen[str], str] | None:
        """Make a cache directory and start ``argv`` in a new session with ``env_for(directory)``.

        Returns:
            The process and its directory, or None once :meth:`stop` was called.
        """
        with self.lock:
            if self.stopped:
                return None
            cache = tempfile.mkdtemp(prefix="ik-ablate-")
            self.dirs.add(cache)
            try:
                proc = subprocess.Popen(
                    argv,
                    env=env_for(cache),
                    stdout=subprocess.PIPE,
                    stderr=subprocess.PIPE,
                    text=True,
                    start_new_session=True,  # see the module docstring
                )
            except BaseException:
                self.dirs.discard(cache)
                shutil.rmtree(cache, ignore_errors=True)
                raise
            self.procs[proc.pid] = proc
            return proc, cache

    def done(self, proc: subprocess.Popen[str], cache: str, keep_kernels: bool = False) -> bool:
        """Forget a finished process and remove its directory (with ``keep_kernels``, after moving its
        Triton binaries into the shared directory).

        Returns:
            True if :meth:`stop` killed it (its output is not a result).
        """
        with self.lock:
            self.procs.pop(proc.pid, None)
            killed = proc.pid in self.killed
        if keep_kernels and not killed:
            self.keep_kernels(cache)
        shutil.rmtree(cache, ignore_errors=True)
        with self.lock:
            self.dirs.discard(cache)
        return killed

    def stop(self) -> None:
        """Start nothing more and kill every live worker's process group."""
        with self.lock:
            self.stopped = True
            for pid, proc in self.procs.items():
                self.killed.add(pid)
                _kill_group(proc)

    def remove_dirs(self) -> None:
        """Remove the cache directories of workers whose thread did not get to it, and the
        ablation's own directory."""
        with self.lock:
            dirs, self.dirs = set(self.dirs), set()
            own, self.run_dir = self.run_dir, None
        for cache in dirs:
            shutil.rmtree(cache, ignore_errors=True)
        if own is not None:
            shutil.rmtree(own, ignore_errors=True)


def _reap(proc: subprocess.Popen[str]) -> tuple[str, str]:
    _kill_group(proc)
    try:
        return proc.communicate(timeout=30)
    except subprocess.TimeoutExpired:  # a descendant that left the group still holds the pipes
        proc.kill()
        proc.wait()
        return "", ""


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


def run_job(
    job: dict[str, Any],
    arm: Arm,
    gpu: int | None,
    timeout: float,
    workers: _Workers | None = None,
    origin: float | None = None,
    parallel: int = 1,
    compile_threads: int | None = None,
) -> dict[str, Any] | None:
    """Run one job in a fresh process, in its own session, with a private cache directory.

    Args:
        job: the job (see :meth:`Plan.jobs`), passed to the worker as JSON.
        arm: the job's arm.
        gpu: this process's GPU index for it, or None on CPU.
        timeout: seconds before the worker and everything it started are killed.
        workers: the registry that :func:`execute` stops on an interruption (None: a private one).
        origin: the ``time.perf_counter()`` that ``start_s`` and ``end_s`` count from (None: now).
        parallel: workers on this GPU at once; above 1 the worker measures under the GPU's lock and
            the GPU's utilisation is not read.
        compile_threads: Inductor compile threads for the worker, or None (Inductor's default).

    Returns:
        The record (a crash or timeout is an error record) with the load readings around it, or
        None if ``workers`` was stopped before or while it ran.

    Raises:
        InvalidKnobValue: ``gpu`` is not among this process's ``CUDA_VISIBLE_DEVICES``.
    """
    workers = workers if workers is not None else _Workers()
    device = physical_gpu(gpu, os.environ.get("CUDA_VISIBLE_DEVICES")) if gpu is not None else None
    shared = workers.kernels if int(job["repeat"]) > 0 else None
    if parallel > 1:
        job = {**job, "measure_lock": workers.measure_lock(gpu)}
    argv = [sys.executable, "-m", "inductor_knobs.ablation.worker", json.dumps(job)]
    watched = gpu if parallel == 1 else None  # with several at once the GPU is busy with our own workers
    before = _readings(watched, "before")
    start = time.perf_counter()
    origin = start if origin is None else origin
    started = workers.start(
        argv, lambda cache: worker_env(arm, gpu, cache, job.get("emulate"), kernels=shared, compile_threads=compile_threads)
    )
    if started is None:
        return None
    proc, cache = started
    timed_out = False
    try:
        try:
            stdout, stderr = proc.communicate(timeout=timeout)
        except subprocess.TimeoutExpired:
            timed_out = True
            stdout, stderr = _reap(proc)
    finally:
        if proc.poll() is None:  # an exception on the way: leave nothing running
            _reap(proc)
        killed = workers.done(proc, cache, keep_kernels=workers.kernels is not None and shared is None)
    end = time.perf_counter()
    if killed:
        return None
    lines = stdout.strip().splitlines()
    result = json.loads(lines[-1]) if lines and lines[-1].startswith("{") else None
    if timed_out:
        result = {"ok": False, "error": f"timed out after {timeout:.0f} s", "traceback": stderr[-3000:]}
    elif result is None:
        result = {"ok": False, "error": f"worker exited {proc.returncode} without a result", "traceback": stderr[-3000:]}
    return {
        **result,
        "arm": arm.name,
        "repeat": job["repeat"],
        "index": job["index"],
        "gpu": gpu,
        "cuda_visible_devices": device,
        "wall_seconds": end - start,
        "start_s": start - origin,
        "end_s": end - origin,
        "kernel_cache": "shared" if shared else "cold",
        **before,
        **_readings(watched, "after"),
    }


def call_job(
    job: dict[str, Any],
    arm: Arm,
    gpu: int | None,
    timeout: float,
    shard: int,
    workers: _Workers | None = None,
    origin: float | None = None,
    parallel: int = 1,
    compile_threads: int | None = None,
) -> dict[str, Any] | None:
    """:func:`run_job`, with an exception on the way (no space for the cache directory, a GPU that is
    not visible) turned into an error record, and ``shard`` added: the job function that every
    executor calls (:func:`execute` in its threads, :func:`run_detached` in a Slurm job).

    Args:
        shard: this shard's index (``Plan.shard[0]``), stored in the record.
        Others: as :func:`run_job`.

    Returns:
        The record, or None if ``workers`` was stopped before or while it ran.
    """
    try:
        record = run_job(job, arm, gpu, timeout, workers, origin, parallel, compile_threads)
    except Exception as err:  # noqa: BLE001 - a failed run, not a lost one
        tail = traceback.format_exc()[-3000:]
        record = {"ok": False, "error": f"{type(err).__name__}: {err}", "traceback": tail}
        record.update(arm=job["arm"]["name"], repeat=job["repeat"], index=job["index"], gpu=gpu)
    if record is not None:
        record["shard"] = shard
    return record


def run_detached(job: dict[str, Any], arm: Arm, gpu: int | None, timeout: float, shard: int, epoch: float) -> dict[str, Any]:
    """:func:`call_job` in a process of its own on another machine (one Slurm job, see :mod:`.slurm`).

    ``start_s`` and ``end_s`` of :func:`execute` count from its start in the same process; here they
    count from ``epoch`` instead, the submitting process's wall clock (``time.time()``) when it
    submitted, so that the records of jobs on several nodes share one time axis (as far as the
    nodes' clocks agree).

    Args:
        job, arm, gpu, timeout, shard: as :func:`call_job` (``gpu``: 0 for the job's first allocated
            GPU, which Slurm's ``CUDA_VISIBLE_DEVICES`` names; None on CPU).
        epoch: seconds since the Unix epoch that ``start_s`` and ``end_s`` count from.

    Returns:
        The record (a crash or timeout is an error record).
    """
    origin = time.perf_counter() - (time.time() - epoch)
    record = call_job(job, arm, gpu, timeout, shard, origin=origin)
    if record is None:  # pragma: no cover - a private registry is never stopped
        record = {"ok": False, "error": "the worker was stopped", "arm": arm.name, "repeat": job["repeat"]}
        record.update(index=job["index"], gpu=gpu, shard=shard)
    return record


def execute(
    plan: Plan,
    progress: bool = True,
    jobs: list[dict[str, Any]] | None = None,
    on_record: Callable[[dict[str, Any]], None] | None = None,
) -> list[dict[str, Any]]:
    """Run every job of ``plan`` here (the local executor); one thread per GPU (or one on CPU) takes
    jobs in order.

    Args:
        plan: what to run.
        progress: show a progress bar on stderr.
        jobs: the jobs to run (None: every job of ``plan``; a resumed ablation passes the missing ones).
        on_record: called with every record as it finishes (in a job thread; :meth:`.store.RunStore.save`).

    Returns:
        One record per job, by job index, each with ``shard`` (this shard's index).

    Raises:
        Interrupted: SIGINT or SIGTERM arrived (under :func:`signals_raise`; a ``KeyboardInterrupt``
            is treated as SIGINT).  Every worker's process group has been killed and the temporary
            directories removed; ``runs`` holds the records of the runs that had finished.
    """
    from tqdm import tqdm

    arms = {a.name: a for a in plan.arms}
    jobs = plan.jobs() if jobs is None else jobs
    pending: queue.Queue[dict[str, Any]] = queue.Queue()
    for job in jobs:
        pending.put(job)
    results: list[dict[str, Any]] = []
    lock = threading.Lock()
    workers = _Workers(share_kernels=plan.device == "cuda")
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
