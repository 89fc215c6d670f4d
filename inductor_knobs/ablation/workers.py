"""The worker processes of an ablation: their environment, their directories, and how they are stopped.

Each job (arm × repeat) is one ``inductor_knobs.ablation.worker`` process with the arm's
``INDUCTOR_KNOBS_*`` variables, its own empty Inductor and Triton cache directories and, on GPUs,
``CUDA_VISIBLE_DEVICES`` set to one GPU (the parent's logical GPU ``i`` mapped through the parent's
own ``CUDA_VISIBLE_DEVICES``, :func:`physical_gpu`).

Every worker runs in its own session (process group), so that a timeout or an interruption can kill
it together with anything it started (Inductor's compile workers), and so that a Ctrl-C in the
terminal reaches only the parent, which then stops the workers itself (:meth:`Workers.stop`).

Every job has a private directory (``ik-ablate-*`` in the parent's temporary directory): its Inductor
and Triton caches and its temporary directory (``TMPDIR``, ``TEMP`` and ``TMP`` name ``<dir>/tmp``, so
the C++ compiler's ``cc*.s`` files and anything else the worker or its children leave go there).  The
directory is removed when the job ends, however it ends: finished, crashed, killed at its timeout, or
killed on SIGINT/SIGTERM (:meth:`Workers.done`, :meth:`Workers.remove_dirs`), so an interrupted
ablation leaves nothing in ``$TMPDIR``.

**What is shared: Triton kernel binaries, nothing that decides** (CUDA only).  Triton's cache holds
compiled binaries keyed by the kernel's source, compile options and target; reusing one replays no
choice (every process still traces, lowers, autotunes and picks its own kernels).  So repeat 0 of
every arm compiles with empty caches (``"kernel_cache": "cold"``), and when it exits its Triton
binaries move into the ablation's shared kernel directory (:meth:`Workers.keep_kernels`), which every
later repeat uses as its ``TRITON_CACHE_DIR`` (``"shared"``).  Inductor's own cache (compiled graphs,
autotune results) stays private to every process.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import subprocess
import tempfile
import threading
from typing import Any

from ..core.knobs import EMULATE_SMS_VAR, ENV_PREFIX
from ..errors import InvalidKnobValue
from .spec import Arm

#: The variables that name the temporary directory (POSIX, Python's :mod:`tempfile`, compilers).
TEMP_VARS = ("TMPDIR", "TEMP", "TMP")

#: The job directory's subdirectory that is the worker's temporary directory.
TEMP_SUBDIR = "tmp"


def physical_gpu(index: int, visible: str | None) -> str:
    """The ``CUDA_VISIBLE_DEVICES`` value that gives a worker this process's GPU ``index``.

    torch numbers the GPUs it sees 0..n-1 in the order of ``CUDA_VISIBLE_DEVICES``; a worker given
    ``CUDA_VISIBLE_DEVICES=<index>`` would see the machine's GPU ``index`` instead, which may belong
    to another job.  So logical GPU ``i`` maps to the ``i``-th entry of the parent's variable.

    Args:
        index (int): the GPU's index in this process (as ``--gpus`` and ``torch.cuda`` number it).
        visible (str | None): this process's ``CUDA_VISIBLE_DEVICES`` (None: unset, every GPU is
            visible and the index is the machine's).  Entries are ordinals or UUIDs (``GPU-...``,
            ``MIG-...``); like CUDA, the list ends at the first empty or negative entry.

    Returns:
        str: the entry, verbatim (stripped of spaces).

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


def knob_env(arm: Arm, emulate: str | None) -> dict[str, str]:
    """The ``INDUCTOR_KNOBS_*`` variables of one worker: ``ON_MISMATCH=warn`` unless the arm sets it, the
    arm's knobs, and the SM emulation.

    Args:
        arm (Arm): the job's arm.
        emulate (str | None): ``INDUCTOR_KNOBS_EMULATE_SMS`` for the worker, or None.

    Returns:
        dict[str, str]: the variables (every other ``INDUCTOR_KNOBS_*`` of this process is left out).
    """
    env = {ENV_PREFIX + "ON_MISMATCH": "warn", **arm.env()}
    if emulate:
        env[EMULATE_SMS_VAR] = str(emulate)
    return env


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
        arm (Arm): its ``INDUCTOR_KNOBS_*`` variables replace every one of this process's.
        gpu (int | None): this process's GPU index, mapped with :func:`physical_gpu` (None: CPU, unchanged).
        cache (str): the job's private directory: Inductor's and Triton's caches, and its temporary
            files (``TMPDIR``, ``TEMP`` and ``TMP`` name ``<cache>/tmp``, which :meth:`Workers.start` makes).
        emulate (str | None): ``INDUCTOR_KNOBS_EMULATE_SMS`` for the worker, or None.
        kernels (str | None): the ablation's shared Triton kernel directory for this job, or None (private).
        compile_threads (int | None): ``TORCHINDUCTOR_COMPILE_THREADS`` unless this process sets it,
            or None.

    Returns:
        dict[str, str]: a copy of ``os.environ`` with the changes.

    Raises:
        InvalidKnobValue: ``gpu`` is not among this process's ``CUDA_VISIBLE_DEVICES``.
    """
    env = {k: v for k, v in os.environ.items() if not k.startswith(ENV_PREFIX)}
    env.update(knob_env(arm, emulate))
    env.update(
        {"TORCHINDUCTOR_CACHE_DIR": os.path.join(cache, "inductor"), "TRITON_CACHE_DIR": kernels or os.path.join(cache, "triton")}
    )
    # Everything the worker and what it starts (Inductor's compile workers, the C++ compiler's cc*.s
    # files) put in the temporary directory goes into the job's own, removed with it however the job ends.
    env.update(dict.fromkeys(TEMP_VARS, os.path.join(cache, TEMP_SUBDIR)))
    if compile_threads is not None:
        env.setdefault("TORCHINDUCTOR_COMPILE_THREADS", str(compile_threads))
    # A user workload (``mymodels:factory``) is named relative to the current directory, as the
    # parent resolved it (workloads.resolve); the worker must find the same module.
    cwd = os.getcwd()
    rest = [p for p in env.get("PYTHONPATH", "").split(os.pathsep) if p and p != cwd]
    env["PYTHONPATH"] = os.pathsep.join([cwd, *rest])
    if gpu is not None:
        env["CUDA_VISIBLE_DEVICES"] = physical_gpu(gpu, os.environ.get("CUDA_VISIBLE_DEVICES"))
    return env


def kill_group(proc: subprocess.Popen[str]) -> None:
    """SIGKILL the process group that ``proc`` leads (it was started with ``start_new_session``).

    This also ends what it started, such as Inductor's compile workers, which would otherwise hold
    its pipes open.

    Args:
        proc (subprocess.Popen[str]): a worker.
    """
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass  # the whole group has exited already


def reap(proc: subprocess.Popen[str]) -> tuple[str, str]:
    """Kill ``proc``'s process group and collect its output.

    Args:
        proc (subprocess.Popen[str]): a worker.

    Returns:
        tuple[str, str]: its stdout and stderr (empty when a descendant that left the group still
        held the pipes after 30 s).
    """
    kill_group(proc)
    try:
        return proc.communicate(timeout=30)
    except subprocess.TimeoutExpired:  # a descendant that left the group still holds the pipes
        proc.kill()
        proc.wait()
        return "", ""


class Workers:
    """The live worker processes and cache directories of one ablation, and its stop switch.

    One lock orders :meth:`start` and :meth:`stop`: a worker either starts before ``stop`` (and is
    killed by it) or sees the switch and does not start, so no worker outlives an interruption.

    Args:
        share_kernels (bool): keep the Triton binaries of cold workers for later repeats (see the
            module docstring).
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
        """The lock file that the workers on ``gpu`` take for their measurement.

        Args:
            gpu (int | None): the GPU index.

        Returns:
            str: a path in the ablation's own directory.
        """
        return os.path.join(self._own_dir(), f"gpu{gpu}.lock")

    def keep_kernels(self, cache: str) -> None:
        """Move the Triton binaries a finished cold worker built in ``cache`` into the shared directory.

        Each entry is one kernel's directory; ``os.rename`` moves it whole (same file system) or not at
        all, so a reader never sees part of one.  An entry that is there already stays as it is.

        Args:
            cache (str): the worker's private directory.
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

        Args:
            argv (list[str]): the command.
            env_for (Callable[[str], dict[str, str]]): the worker's environment, given its directory.

        Returns:
            tuple[subprocess.Popen[str], str] | None: the process and its directory, or None once
            :meth:`stop` was called.
        """
        with self.lock:
            if self.stopped:
                return None
            cache = tempfile.mkdtemp(prefix="ik-ablate-")
            self.dirs.add(cache)
            try:
                os.mkdir(os.path.join(cache, TEMP_SUBDIR))
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

        Args:
            proc (subprocess.Popen[str]): the finished worker.
            cache (str): its directory.
            keep_kernels (bool): keep its Triton binaries for later repeats.

        Returns:
            bool: True if :meth:`stop` killed it (its output is not a result).
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
                kill_group(proc)

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
