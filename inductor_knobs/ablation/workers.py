"""The worker processes of an ablation: their environment, their directories, and how they are stopped.

Each job (arm × repeat) is one ``inductor_knobs.ablation.worker`` process with the arm's
``INDUCTOR_KNOBS_*`` variables, its own empty Inductor and Triton cache directories and, on GPUs,
``CUDA_VISIBLE_DEVICES`` set to one GPU (the parent's logical GPU ``i`` mapped through the parent's
own ``CUDA_VISIBLE_DEVICES``, :func:`physical_gpu`).

:meth:`Workers.start` is the one place a worker starts, for the local executor and inside every Slurm
job.  With ``preload`` (the local executor, more than one run), the workers are forked from the
ablation's fork server (:mod:`.forkserver`), started on the first :meth:`Workers.start` with the
environment the runs share (:func:`base_env`); otherwise, or when the server is not safe to fork from
(its reason is kept in :attr:`Workers.start_note` and every record), each is a new interpreter
(``python -m``).  Either way a worker's stdout and stderr go to files in its private directory.

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
every arm compiles with empty caches (``"kernel_cache": "cold"``: its compile time is the arm's price)
and publishes each binary it builds into the ablation's shared kernel directory; every later repeat
compiles with that directory as its ``TRITON_CACHE_DIR`` from its start (``"shared"``), and waits for
a binary another worker is building rather than build it again (:mod:`.kernel_share`, worker_env's
``TRITON_CACHE_MANAGER``).  Inductor's own cache (compiled graphs, autotune results) stays private to
every process.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
import threading
from typing import Any

from ..errors import InvalidKnobValue
from ..ext import EMULATE_SMS_VAR, ENV_PREFIX, environ_before_knobs, release_of, torch_compat
from . import kernel_share
from .forkserver import ForkServer, supported
from .processes import OUTPUT_FILES, Handle, Started, end_group, kill_group, read_output, reap
from .spec import Arm

__all__ = ["OUTPUT_FILES", "Handle", "Started", "Workers", "kill_group", "read_output", "reap", "worker_env"]

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


#: torch's switch for an NVML-based ``torch.cuda.is_available()`` that does not poison fork
#: (torch/cuda/__init__.py ``_nvml_based_avail``; see :func:`base_env`).
NVML_CHECK_VAR = "PYTORCH_NVML_BASED_CUDA_CHECK"
#: torch's switch of the compile-worker pool's warm-up (``_inductor/async_compile.py``): "1" (its default) warms it.
WARM_POOL_VAR = "TORCH_WARM_POOL"
#: Inductor's compile threads (``_inductor/config.py: decide_compile_threads``).
COMPILE_THREADS_VAR = "TORCHINDUCTOR_COMPILE_THREADS"


def inherited_compile_threads() -> str | None:
    """The :data:`COMPILE_THREADS_VAR` this process passes on to every worker (:func:`base_env` keeps it), stripped,
    or None where it has none."""
    value = environ_before_knobs().get(COMPILE_THREADS_VAR)
    return value.strip() if value is not None else None


def base_env(cache: str, compile_threads: int | None = None) -> dict[str, str]:
    """The environment every process of an ablation shares: this process's as it was before its live knobs
    blocks (:func:`~inductor_knobs.core.changes.environ_before_knobs`), without its
    ``INDUCTOR_KNOBS_*`` variables, with private caches and temporary directory under ``cache``.

    Args:
        cache (str): a private directory: Inductor's and Triton's caches, and the temporary files
            (``TMPDIR``, ``TEMP`` and ``TMP`` name ``<cache>/tmp``, which the caller makes).
        compile_threads (int | None): ``TORCHINDUCTOR_COMPILE_THREADS`` unless this process sets it, or None.

    Returns:
        dict[str, str]: a copy of ``os.environ`` with the changes (the fork server's environment,
        and the base of every worker's, :func:`worker_env`).
    """
    # As before any knobs block of this process: a knob that is an environment variable (cuDNN attention's
    # avoid-recompile) must not reach runs whose arms choose their own settings.
    env = {k: v for k, v in environ_before_knobs().items() if not k.startswith(ENV_PREFIX)}
    env.update({"TORCHINDUCTOR_CACHE_DIR": os.path.join(cache, "inductor"), kernel_share.DIR_VAR: os.path.join(cache, "triton")})
    # Everything the worker and what it starts (Inductor's compile workers, the C++ compiler's cc*.s
    # files) put in the temporary directory goes into the job's own, removed with it however the job ends.
    env.update(dict.fromkeys(TEMP_VARS, os.path.join(cache, TEMP_SUBDIR)))
    if compile_threads is not None:
        env.setdefault(COMPILE_THREADS_VAR, str(compile_threads))
    # Importing Dynamo and Inductor calls torch.cuda.is_available(), which by default asks the CUDA
    # runtime (cudaGetDeviceCount, so cuInit) and poisons fork: on a 4xH100 host (torch 2.11+cu130) every
    # child of a fork server that had preloaded them failed "Cannot re-initialize CUDA in forked
    # subprocess" (its probe child found it, and the runs started as new interpreters).  With this
    # variable torch asks NVML instead, which initialises no CUDA driver; every run gets the same value.
    env.setdefault(NVML_CHECK_VAR, "1")
    # Where importing Inductor starts its compile-worker pool (torch 2.4-2.8 with Triton: patches/hooks.py), the fork
    # server would keep that pool's threads and decline to fork; without the warm-up at import every run starts
    # its pool at its first compile instead, forked or not.
    patches = torch_compat.installed(strict=False)  # imports torch (this process has already)
    if patches.warms_compile_pool_at_import(release_of(sys.modules["torch"].__version__)):
        env.setdefault(WARM_POOL_VAR, "0")
    # A user workload (``mymodels:factory``) is named relative to the current directory, as the
    # parent resolved it (workloads.resolve); the worker must find the same module.
    cwd = os.getcwd()
    rest = [p for p in env.get("PYTHONPATH", "").split(os.pathsep) if p and p != cwd]
    env["PYTHONPATH"] = os.pathsep.join([cwd, *rest])
    return env


def worker_env(
    arm: Arm,
    gpu: int | None,
    cache: str,
    emulate: str | None,
    kernels: str | None = None,
    cold: bool = True,
    compile_threads: int | None = None,
) -> dict[str, str]:
    """The environment of one worker process: :func:`base_env` with the arm's variables and its GPU.

    Args:
        arm (Arm): its ``INDUCTOR_KNOBS_*`` variables replace every one of this process's.
        gpu (int | None): this process's GPU index, mapped with :func:`physical_gpu` (None: CPU, unchanged).
        cache (str): the job's private directory (see :func:`base_env`).
        emulate (str | None): ``INDUCTOR_KNOBS_EMULATE_SMS`` for the worker, or None.
        kernels (str | None): the ablation's shared Triton kernel directory, or None (nothing shared).
        cold (bool): the job compiles with empty caches and publishes into ``kernels``; else it reads ``kernels``
            (:func:`.kernel_share.worker_vars`).
        compile_threads (int | None): ``TORCHINDUCTOR_COMPILE_THREADS`` unless this process sets it,
            or None.

    Returns:
        dict[str, str]: a copy of ``os.environ`` with the changes.

    Raises:
        InvalidKnobValue: ``gpu`` is not among this process's ``CUDA_VISIBLE_DEVICES``.
    """
    env = base_env(cache, compile_threads)
    if kernels is not None:
        env.update(kernel_share.worker_vars(kernels, cold))
    env.update(knob_env(arm, emulate))
    if gpu is not None:
        env["CUDA_VISIBLE_DEVICES"] = physical_gpu(gpu, os.environ.get("CUDA_VISIBLE_DEVICES"))
    return env


class Workers:
    """The live worker processes and cache directories of one ablation, its fork server, and its stop switch.

    One lock orders :meth:`start` and :meth:`stop`: a worker either starts before ``stop`` (and is
    killed by it) or sees the switch and does not start, so no worker outlives an interruption.

    Args:
        share_kernels (bool): share the workers' Triton binaries (see the module docstring).
        preload (list[str] | None): fork the workers from a server that imported these modules
            (:func:`.forkserver.preload_modules`); None: start each as a new interpreter.
        compile_threads (int | None): the workers' ``TORCHINDUCTOR_COMPILE_THREADS`` (the server gets
            the same, see :func:`base_env`), or None.

    Attributes:
        start_note (str | None): why the workers are not forked although ``preload`` asked for it.
    """

    def __init__(self, share_kernels: bool = False, preload: list[str] | None = None, compile_threads: int | None = None) -> None:
        self.lock = threading.Lock()
        self.stopped = False
        self.procs: dict[int, Handle] = {}
        self.killed: set[int] = set()
        self.dirs: set[str] = set()
        # The ablation's own directory (made when first needed): the shared Triton kernels and the
        # fork server's private directory.
        self.run_dir: str | None = None
        self.kernels = os.path.join(self._own_dir(), "kernels") if share_kernels else None
        if self.kernels:
            os.makedirs(self.kernels)
        self.preload, self.compile_threads = preload, compile_threads
        self.server: ForkServer | None = None
        self.start_note: str | None = None
        self._server_lock = threading.Lock()
        self._starting: ForkServer | None = None

    def _own_dir(self) -> str:
        with self.lock:
            if self.run_dir is None:
                self.run_dir = tempfile.mkdtemp(prefix="ik-ablate-run-")
            return self.run_dir

    def gpu_lock_path(self, gpu: int) -> str:
        """The lock file the workers on this process's GPU ``gpu`` take turns at autotune benchmarks with
        (:mod:`.autotune_lock`), in the ablation's own directory.

        Args:
            gpu (int): this process's GPU index.

        Returns:
            str: the path (the worker creates the file).
        """
        return os.path.join(self._own_dir(), f"gpu-{int(gpu)}.lock")

    def start_server(self) -> None:
        """Start the ablation's fork server and return at once: it imports while the caller goes on
        (:func:`.runner.early_workers`); :meth:`fork_server` waits for it.  Nothing when there is one
        already, or none is wanted."""
        with self._server_lock:
            self._launch()

    def _launch(self) -> None:
        """Start the server unless one runs or starts, or none is wanted (the caller holds ``_server_lock``)."""
        if self.preload is None or self.server is not None or self.start_note is not None or self._starting is not None:
            return
        why = supported()
        if why is not None:
            self.start_note = why
            return
        directory = os.path.join(self._own_dir(), "server")
        os.makedirs(os.path.join(directory, TEMP_SUBDIR), exist_ok=True)
        env = base_env(directory, compile_threads=self.compile_threads)
        with self.lock:
            if self.stopped:
                return
            try:
                # Under the lock: stop() either finds it and closes it, or came first and it never starts.
                self._starting = ForkServer(self.preload, env, os.path.join(directory, "server.log"))
            except OSError as err:  # no process could be started: the runs will say the same
                self.start_note = f"the fork server did not start: {err}"

    def fork_server(self) -> ForkServer | None:
        """The ablation's fork server, started on the first call unless :meth:`start_server` started it,
        waited for and judged; None when the workers start as new interpreters (no ``preload``,
        stopped, or the server unfit: :attr:`start_note`).

        Returns:
            ForkServer | None: the server.
        """
        with self._server_lock:
            if self.stopped:
                return self.server
            self._launch()
            with self.lock:
                server = self._starting  # stop() closes it while it imports
            if server is None:
                return self.server
            why = server.wait_ready()
            with self.lock:
                self._starting = None
                stopped = self.stopped
            if why is None and not stopped:
                self.server = server
            else:
                self.start_note = why or "the ablation was stopped while its fork server started"
                server.close()
            return self.server

    def start(self, module: str, args: list[str], env_for: Any) -> tuple[Handle, str] | None:
        """Make a job directory and start ``python -m module args`` in a new session with ``env_for(directory)``.

        Forked from the fork server when there is one (:meth:`fork_server`), else a new interpreter;
        its stdout and stderr go to :data:`OUTPUT_FILES` in the directory (:func:`read_output`).  The
        handle's ``start`` attribute says which (``{"start": "forkserver", "server": ...}`` or
        ``{"start": "subprocess", "start_note": ...}``), for the record.

        Args:
            module (str): the module to run as ``__main__``.
            args (list[str]): its arguments.
            env_for (Callable[[str], dict[str, str]]): the worker's environment, given its directory.

        Returns:
            tuple[Started | Forked, str] | None: the process and its directory, or None once
            :meth:`stop` was called.
        """
        server = self.fork_server()
        with self.lock:
            if self.stopped:
                return None
            cache = tempfile.mkdtemp(prefix="ik-ablate-")
            self.dirs.add(cache)
            try:
                os.mkdir(os.path.join(cache, TEMP_SUBDIR))
                env = env_for(cache)
                out, err = (os.path.join(cache, name) for name in OUTPUT_FILES)
                proc: Handle = None
                if server is not None:
                    try:
                        proc = server.spawn(module, args, env, os.getcwd(), out, err)
                        proc.start = {"start": "forkserver", "server": server.describe()}
                    except OSError as error:  # the server died: this and every later run start plainly
                        self.start_note = f"the fork server failed: {error}"
                        self.server = None
                        server.close()
                if proc is None:
                    with open(out, "wb") as stdout, open(err, "wb") as stderr:
                        popen = subprocess.Popen(
                            [sys.executable, "-m", module, *args],
                            env=env,
                            stdin=subprocess.DEVNULL,
                            stdout=stdout,
                            stderr=stderr,
                            start_new_session=True,  # see the module docstring
                        )
                    proc = Started(popen)
                    proc.start = {"start": "subprocess"}
                    if self.start_note:
                        proc.start["start_note"] = self.start_note
            except BaseException:
                self.dirs.discard(cache)
                shutil.rmtree(cache, ignore_errors=True)
                raise
            self.procs[proc.pid] = proc
            return proc, cache

    def done(self, proc: Handle, cache: str) -> bool:
        """Forget a finished process, kill what is left of its process group (:func:`.processes.end_group`:
        Inductor's compile workers outlive a worker that exits while they compile, and would write into the
        directory after it is gone), and remove its directory.

        Args:
            proc (Started | Forked): the finished worker.
            cache (str): its directory.

        Returns:
            bool: True if :meth:`stop` killed it (its output is not a result).
        """
        with self.lock:
            self.procs.pop(proc.pid, None)
            killed = proc.pid in self.killed
        end_group(proc)  # its compile workers may still write into the directory
        shutil.rmtree(cache, ignore_errors=True)
        with self.lock:
            self.dirs.discard(cache)
        return killed

    def stop(self) -> None:
        """Start nothing more and kill every live worker's process group (and a fork server still starting)."""
        with self.lock:
            self.stopped = True
            for pid, proc in self.procs.items():
                self.killed.add(pid)
                kill_group(proc)
            starting = self._starting
        if starting is not None:
            starting.close()

    def remove_dirs(self) -> None:
        """End the fork server (or the one still starting), and remove the cache directories of workers
        whose thread did not get to it and the ablation's own directory."""
        with self.lock:
            starting = self._starting
        if starting is not None:  # started early and never waited for (a refused or interrupted command)
            starting.close()
        with self._server_lock:
            server, self.server = self.server, None
        if server is not None:
            server.close()
        with self.lock:
            dirs, self.dirs = set(self.dirs), set()
            own, self.run_dir = self.run_dir, None
        for cache in dirs:
            shutil.rmtree(cache, ignore_errors=True)
        if own is not None:
            shutil.rmtree(own, ignore_errors=True)
