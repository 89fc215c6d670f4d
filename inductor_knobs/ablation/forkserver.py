"""Start-up paid once: a fork server that imports torch (and the workload's libraries) once per ablation,
and forks every run from it.

Each run of an ablation is still a process of its own (the unit of the statistics): a child of the
server, in its own session, with its arm's environment applied before anything reads it, its own
private directories, and nothing of another run (see :mod:`.zygote`, the server's side, for what a
child does first).  What the runs share is only what importing the preloaded modules left in memory
(``torch``, Dynamo and Inductor, the workload's libraries), each proven to carry nothing of a run
(:mod:`.preload`: the environment they read at import is every run's, checked at every fork).
:func:`preload_modules` derives the list from the workload.

**Why not** ``multiprocessing.get_context("forkserver")``.  It was the first choice; five things
make it unfit here:

- one server per interpreter, configured process-wide (``set_forkserver_preload`` sets the
  singleton's list; stopping it is the private ``_forkserver._stop()``), so an ablation cannot have
  a server of its own with its own preload list and environment, nor end it with the ablation
  (an interrupted ablation must leave nothing running), and it would take over the server of any
  other ``forkserver`` user in the process (the default start method on Linux since Python 3.14);
- the server starts with the parent's environment at that moment (``util.spawnv_passfds`` passes no
  environment), so removing ``INDUCTOR_KNOBS_*`` would mean changing the parent's own ``os.environ``;
- every child first re-imports the parent's ``__main__`` (the ``inductor-knobs`` script, pytest) as
  ``__mp_main__`` (``spawn.prepare``), before any code of ours can set the run's environment, unless
  the server imports it once itself;
- ``Process.start`` returns before the child has run any code of ours, so there is no point at which
  the child is known to lead its own session (``killpg`` on a timeout or SIGINT can miss it);
- ``Process.start`` polls every other live child (``process._cleanup``); from several threads, as the
  runner starts workers, two threads can read the same child's exit status from its sentinel and
  one gets ``EOF``, i.e. exit code 255 (``popen_forkserver.Popen.poll``).

This server is the same idea in a few lines more: one :class:`ForkServer` per ablation (a
``python -m inductor_knobs.ablation.zygote`` process in its own session, started with the runs'
shared environment), which answers a request with the pid of a child that already leads its
session, reports every child's exit status, and ends when :meth:`ForkServer.close` closes its stdin
(or its parent dies).  Linux only: the server's threads are counted in ``/proc``; elsewhere runs
start as new interpreters.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import threading
import time
import uuid
from typing import Any

#: Seconds a server may take to import its modules before the runs start as new interpreters instead.
READY_TIMEOUT_S = 600.0

#: Seconds a fork may take (a copy of the page tables of a process holding torch: milliseconds).
SPAWN_TIMEOUT_S = 60.0

#: Modules that Dynamo and Inductor import first and that read no setting of a run (sympy alone is
#: about 0.15-0.3 s of every compiled run's start-up).
COMPILER_DEPS = ("sympy", "torch.fx.experimental.symbolic_shapes")

#: Dynamo and Inductor, as far as :mod:`.preload` allows (not the startup hook's trigger,
#: ``torch._inductor.compile_fx``): ``torch._inductor.graph`` imports the lowering, the scheduler and the
#: C++ and Triton code generators (about 1 s of a compiled run's start-up on a CPU, 3 s with transformers
#: on an H200 host).
COMPILER = ("torch._dynamo", "torch._inductor.graph")

#: What of :data:`COMPILER` a server for CUDA runs may import: Dynamo.  ``torch._inductor.graph`` imports
#: ``torch._inductor.runtime.benchmarking``, whose import asks ``torch.cuda.is_available()`` (2.11
#: ``runtime/benchmarking.py:19``, ``use_experimental_benchmarker``); on a GPU host that started a CUDA driver
#: thread in the server (``cuda00001800007``, H100, torch 2.11, a one-off probe, 2026-11-26), so every run
#: would start as a new interpreter.  ``torch._dynamo`` started none there; BERT's modeling module did (15 threads
#: and jemalloc's), so it is not preloaded on CUDA either (:func:`preload_modules`).  The zygote still counts the
#: threads, and refuses a server that has more than one.
COMPILER_FOR_CUDA: tuple[str, ...] = ("torch._dynamo",)

#: ``hf:<name>`` -> its transformers modeling module.
HF_MODULES = {
    "bert-base": "transformers.models.bert.modeling_bert",
    "tinyllama-2layer": "transformers.models.llama.modeling_llama",
}

#: The exit status of a run whose server died before it could report it (as ``multiprocessing`` does).
UNKNOWN_EXIT = 255


def preload_modules(workload: str, device: str) -> list[str]:
    """What the server of an ablation of ``workload`` on ``device`` imports.

    Args:
        workload (str): ``--workload`` (built-in, ``hf:<name>``, ``timm:<name>`` or ``module:factory``;
            a user's module is never preloaded: it is the user's code, run in each run).
        device (str): ``cuda`` or ``cpu``.

    Returns:
        list[str]: ``torch``, :data:`COMPILER_DEPS`, ``triton`` on CUDA (Inductor's GPU code
        generator: it reads its settings, ``TRITON_CACHE_DIR`` among them, when used, not at
        import), :data:`COMPILER` (:data:`COMPILER_FOR_CUDA` on CUDA; the compiled arms need them), and
        ``transformers`` with the model's modeling module or ``timm``.
    """
    modules = ["torch", *COMPILER_DEPS]
    if device == "cuda":
        modules += ["triton", *COMPILER_FOR_CUDA]
    else:
        modules += COMPILER
    prefix, _, name = workload.partition(":")
    if prefix == "hf":
        # On CUDA not the modeling module: importing it started threads on a GPU host, see COMPILER_FOR_CUDA.
        modules += ["transformers"] if device == "cuda" else ["transformers", HF_MODULES.get(name, "transformers")]
    elif prefix == "timm":
        modules.append("timm")
    return modules


def supported() -> str | None:
    """Why runs cannot be forked here, or None.

    Returns:
        str | None: a reason (no ``fork``, no ``/proc`` to count threads in), or None.
    """
    if not hasattr(os, "fork"):
        return "this platform has no fork()"
    if not os.path.isdir("/proc/self/task"):
        return "no /proc/self/task to check the server's threads in (not Linux)"
    return None


class Forked:
    """A run forked by a :class:`ForkServer`: the subset of ``subprocess.Popen`` the runner uses.

    Attributes:
        pid (int): the child's pid, which is also its session and process group id.
        fork (int): which of the server's children with this pid it is (1 for the first; a pid is reused
            once the kernel's pids wrap, and an earlier child's exit status must not answer for it).
        returncode (int | None): its exit status once known (``-N``: killed by signal N).
    """

    def __init__(self, server: ForkServer, pid: int, fork: int = 1) -> None:
        self.server, self.pid, self.fork = server, pid, fork
        self.returncode: int | None = None
        self.start: dict[str, Any] = {}  # how it started, for the record (set by Workers.start)

    def wait(self, timeout: float | None = None) -> int | None:
        """Wait for the child to exit.

        Args:
            timeout (float | None): seconds (None: no limit).

        Returns:
            int | None: its exit status, or None if it still runs after ``timeout``.
        """
        if self.returncode is None:
            self.returncode = self.server.exit_status(self.pid, timeout, self.fork)
        return self.returncode

    def poll(self) -> int | None:
        """The exit status if the child has exited, else None (no wait)."""
        return self.wait(0)


class ForkServer:
    """One server process for one ablation (see the module docstring).

    Args:
        modules (list[str]): what it imports (:func:`preload_modules`).
        env (dict[str, str]): its environment, the one its runs share (:func:`.workers.base_env`).
        log (str): the file its stderr goes to.

    Attributes:
        id (str): a random id; every record of its runs carries it.
        facts (dict[str, Any] | None): what the server reported once ready (:func:`.zygote.facts`).
        start_seconds (float | None): seconds from its start to ready.
    """

    def __init__(self, modules: list[str], env: dict[str, str], log: str) -> None:
        self.modules, self.id, self.log, self.env = list(modules), uuid.uuid4().hex[:12], log, dict(env)
        self.facts: dict[str, Any] | None = None
        self.start_seconds: float | None = None
        self.lost = False
        self._lock = threading.Lock()  # one request at a time
        self._cond = threading.Condition()
        self._replies: dict[int, dict[str, Any]] = {}
        # (pid, fork) -> exit status, taken out when read; fork: how many children the server forked with that pid.
        self._exits: dict[tuple[int, int], int] = {}
        self._forks: dict[int, int] = {}
        self._abandoned: set[int] = set()  # requests spawn() gave up on: a child forked for one is killed
        self._next = 0
        self._start = time.perf_counter()
        with open(log, "w") as err:
            self.proc = subprocess.Popen(
                [sys.executable, "-m", "inductor_knobs.ablation.zygote", json.dumps(self.modules)],
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                stderr=err,
                env=env,
                start_new_session=True,  # a Ctrl-C in the terminal reaches only the ablation's parent
            )
        self._reader = threading.Thread(target=self._read, name="ik-forkserver", daemon=True)
        self._reader.start()

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            message = json.loads(line)
            with self._cond:
                if "ready" in message:
                    self.facts = message["ready"]
                    self.start_seconds = time.perf_counter() - self._start
                elif "exit" in message:
                    pid = int(message["exit"])
                    self._exits[(pid, self._forks.get(pid, 1))] = int(message["rc"])
                else:
                    if "pid" in message:  # the zygote answers a fork before it reports that child's exit
                        pid = int(message["pid"])
                        message["fork"] = self._forks[pid] = self._forks.get(pid, 0) + 1
                    rid = int(message["id"])
                    if rid in self._abandoned:  # nobody holds this child: it must not run the job a second time
                        self._abandoned.discard(rid)
                        if "pid" in message:
                            with contextlib.suppress(OSError):
                                os.killpg(int(message["pid"]), signal.SIGKILL)  # it leads its own session
                    else:
                        self._replies[rid] = message
                self._cond.notify_all()
        with self._cond:
            self.lost = True
            self._cond.notify_all()

    def wait_ready(self, timeout: float = READY_TIMEOUT_S) -> str | None:
        """Wait for the server's report and judge it.

        Args:
            timeout (float): seconds.

        Returns:
            str | None: None when runs may be forked from it, else why not (it died, took too long,
            kept a thread, loaded a forbidden module, touched CUDA, or read a run's own variable while
            importing); then it has been closed.
        """
        with self._cond:
            self._cond.wait_for(lambda: self.facts is not None or self.lost, timeout)
        why = self._unsafe()
        if why is not None:
            self.close()
        return why

    def _unsafe(self) -> str | None:
        facts = self.facts
        if facts is None:
            late = f"was not ready after {READY_TIMEOUT_S:.0f} s"
            return "the fork server " + ("exited before it was ready" if self.lost else late) + self._log_tail()
        first = self.modules[0] if self.modules else ""
        if not facts["preloaded"] or first in facts["stopped"]:  # torch half-imported: a run would import it again
            return f"the fork server could not import {first}: {facts['stopped'].get(first, 'nothing was preloaded')}"
        if facts.get("stopped_import_in_child"):
            return f"a probe child of the fork server failed: {facts['stopped_import_in_child']}"
        if facts["threads"] != 1 or facts["python_threads"] != 1:
            started = ", ".join(f"{name} +{n}" for name, n in facts.get("new_threads", {}).items()) or "none seen"
            return (
                f"the fork server kept {facts['threads']} threads ({facts['python_threads']} Python threads) after importing "
                f"{', '.join(facts['preloaded'])} (threads started by: {started}); fork() copies only one"
            )
        if facts["forbidden_loaded"]:
            return (
                f"the fork server imported {', '.join(facts['forbidden_loaded'][:3])}, on whose import a run "
                "activates its INDUCTOR_KNOBS_*"
            )
        if facts["cuda_initialized"]:
            return "importing the preloaded modules initialised CUDA, which a forked child could not use"
        if facts["env_kept"]:
            readers = facts["env_readers"]
            named = ", ".join(f"{k} (importing {', '.join(readers[k])})" for k in facts["env_kept"])
            return f"importing the preloaded modules read {named}, which differs from run to run"
        return None

    def differs(self, env: dict[str, str]) -> list[str]:
        """The variables that the server's imports read and whose value in ``env`` is not the server's.

        Args:
            env (dict[str, str]): a run's whole environment.

        Returns:
            list[str]: the variables (sorted); the reads of :data:`.preload.NOT_KEPT` are not counted.
        """
        facts = self.facts or {}
        not_kept = set(facts.get("env_readers", {})) - set(facts.get("env_kept", []))
        return [k for k in facts.get("env_read", []) if k not in not_kept and env.get(k) != self.env.get(k)]

    def _log_tail(self) -> str:
        try:
            with open(self.log, errors="replace") as src:
                lines = src.read().strip().splitlines()[-3:]
        except OSError:
            return ""
        return (": " + " | ".join(lines)) if lines else ""

    def spawn(self, module: str, args: list[str], env: dict[str, str], cwd: str, stdout: str, stderr: str) -> Forked:
        """Fork ``python -m module args`` with ``env``, its output going to the files ``stdout`` and ``stderr``.

        Args:
            module (str): the module run as ``__main__``.
            args (list[str]): its ``sys.argv[1:]``.
            env (dict[str, str]): its whole environment.
            cwd (str): its working directory.
            stdout (str): the file (created) its stdout goes to; stderr: likewise.
            stderr (str): see ``stdout``.

        Returns:
            Forked: the child, already leading its own session.

        Raises:
            OSError: the server is gone, did not answer, or could not fork; or ``env`` differs from the
                server's in a variable its imports read (:meth:`differs`).
        """
        differ = self.differs(env)
        if differ:
            raise OSError(f"the run's {', '.join(differ[:5])} differs from the fork server's, whose imports read it")
        with self._lock:
            self._next += 1
            rid = self._next
            request = {"id": rid, "module": module, "args": args, "env": env, "cwd": cwd, "stdout": stdout, "stderr": stderr}
            if self.lost or self.proc.stdin is None:
                raise OSError("the fork server has exited")
            self.proc.stdin.write((json.dumps(request) + "\n").encode())
            self.proc.stdin.flush()
            with self._cond:
                self._cond.wait_for(lambda: rid in self._replies or self.lost, SPAWN_TIMEOUT_S)
                reply = self._replies.pop(rid, None)
                if reply is None:
                    self._abandoned.add(rid)
        if reply is None:
            raise OSError("the fork server did not answer a fork request")
        if "error" in reply:
            raise OSError(f"the fork server could not fork: {reply['error']}")
        return Forked(self, int(reply["pid"]), int(reply.get("fork", 1)))

    def exit_status(self, pid: int, timeout: float | None, fork: int = 1) -> int | None:
        """The exit status of child ``pid``, waiting up to ``timeout`` seconds (None: no limit).

        Args:
            pid (int): the child.
            timeout (float | None): seconds.
            fork (int): which child with that pid (:attr:`Forked.fork`); its status is given out once.

        Returns:
            int | None: the status, :data:`UNKNOWN_EXIT` if the server died and the child is gone, or
            None if it still runs.
        """
        deadline = None if timeout is None else time.monotonic() + timeout
        key = (pid, fork)
        with self._cond:
            while key not in self._exits:
                if self.lost:  # nobody reaps it for us now: the child is gone once its pid is
                    if not _exists(pid):
                        return UNKNOWN_EXIT
                    wait = 0.1
                else:
                    wait = 3600.0
                left = None if deadline is None else deadline - time.monotonic()
                if left is not None and left <= 0:
                    return None
                self._cond.wait(wait if left is None else min(wait, left))
            return self._exits.pop(key)

    def describe(self) -> dict[str, Any]:
        """What every record of this server's runs says about it (``server`` in the record).

        Returns:
            dict[str, Any]: ``id``, ``start_seconds``, ``preloaded``, ``stopped`` (module -> why not
            preloaded), ``import_seconds`` (module -> seconds) and ``threads``.
        """
        facts = self.facts or {}
        return {
            "id": self.id,
            "start_seconds": self.start_seconds,
            "preloaded": facts.get("preloaded", []),
            "stopped": facts.get("stopped", {}),
            "import_seconds": facts.get("seconds", {}),
            "threads": facts.get("threads"),
        }

    def close(self) -> None:
        """End the server (its children, in their own sessions, are the caller's to end).

        A server still importing is killed with its process group (its probe child included) at once:
        it reads its stdin only once ready, and an ablation refused or interrupted meanwhile must not
        wait for its imports.
        """
        with self._cond:
            starting = self.facts is None and not self.lost
            self.lost = True
            self._cond.notify_all()
        if starting and self.proc.poll() is None:  # not reaped: its pid is still its process group's
            with contextlib.suppress(OSError):
                os.killpg(self.proc.pid, signal.SIGKILL)
        try:
            if self.proc.stdin is not None:
                self.proc.stdin.close()
        except OSError:
            pass
        try:
            self.proc.wait(5)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        self._reader.join(5)  # it reads to the end of the server's stdout, which its exit closed


def _exists(pid: int) -> bool:
    """Whether ``pid`` still runs (an exited child that nobody reaped, a zombie, does not)."""
    try:
        with open(f"/proc/{pid}/stat") as stat:
            return stat.read().rsplit(")", 1)[1].split()[0] != "Z"
    except (OSError, IndexError):
        return False
