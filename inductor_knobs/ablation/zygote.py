"""The fork server's own process (the zygote): ``python -m inductor_knobs.ablation.zygote PRELOAD_JSON``.

Started by :class:`.forkserver.ForkServer` with the environment that every run of the ablation shares
(no ``INDUCTOR_KNOBS_*``), it imports the modules it is given once, reports what it holds, and then
forks one child per request; each child becomes ``python -m MODULE ARGS...`` with the run's own
environment.  Standard library only at module level: this module decides what else is imported.

**What the zygote imports** (:mod:`.preload`): the modules it is given, in order (Dynamo and Inductor
among them), never the package's startup-hook trigger ``torch._inductor.compile_fx`` (a run's
``INDUCTOR_KNOBS_*`` activate on its import, in the run), and every ``os.environ`` read on the way is
recorded with the module that read it, for the parent to compare with every run's environment.

**Threads, and what was stopped.**  ``fork()`` copies only the calling thread.  numpy's OpenBLAS
starts a thread pool at import and stops it itself before every fork (its ``pthread_atfork``
handler); so after the imports the zygote forks once (:func:`_probe`), and then counts its own
threads (``/proc/self/task``): a thread that is still there survives forks, and the parent falls
back to starting every run as a new interpreter.  That first child imports the modules the guard
stopped, as every run will: a module stopped half-way leaves in the zygote what it did before the
forbidden import, and if a run could not import it again the parent refuses the zygote too; it also
proves that what the imports built from the cache directory follows a run's own
(:func:`.preload.not_kept_proof`).  Of what
Dynamo and Inductor register at import, Inductor's ``register_at_fork`` handler
(``torch/_inductor/async_compile.py``: it empties the compile-worker pool set in the child) runs in
every fork, and their ``atexit`` handlers are a fresh interpreter's too (the worker ends with
``os._exit`` after killing its session either way).

**A child** (:func:`_become`): ``os.setsid()`` first (its own session and process group, so that a
``killpg`` reaches it and Inductor's compile workers; the zygote answers the parent with the pid
only after that), then stdin from ``/dev/null``, stdout and stderr to the files the request names,
the run's environment (``os.environ`` cleared and refilled, which also sets the C environment),
``tempfile.tempdir`` reset (it caches ``TMPDIR``), the working directory, numpy's global random
state reseeded (a fresh process seeds it from the OS; Python's ``random`` reseeds itself after a
fork), the package's startup hook run as the ``.pth`` line would run it at interpreter start, and
``runpy.run_module(MODULE, run_name="__main__")``.  It never returns into the zygote's loop: it ends
with ``os._exit``.  What a child shares with its siblings is the zygote's Python hash seed
(``PYTHONHASHSEED``, fixed at interpreter start), so string hashes, and with them the iteration order
of string sets, are the same in every run.

**Protocol** (one JSON object per line): the zygote writes ``{"ready": facts}`` once, then reads
requests ``{"id", "module", "args", "env", "cwd", "stdout", "stderr"}`` on its stdin and answers
``{"id", "pid"}`` (or ``{"id", "error"}``); when a child exits it writes ``{"exit": pid, "rc": code}``
(``-N`` for signal N, as ``subprocess`` does).  At the end of its stdin it exits; its children live on
in their own sessions until the parent ends them.
"""

from __future__ import annotations

import importlib
import json
import os
import select
import signal
import sys
import time
import traceback
from typing import Any

from .preload import forbidden, not_kept_proof, preload, thread_count

#: What the child knows about where it came from; :mod:`.worker` adds it to its record.
CHILD_FACTS: dict[str, Any] = {}


def facts(modules: list[str]) -> dict[str, Any]:
    """Preload ``modules``, fork once, and describe the zygote as every child will find it.

    Args:
        modules (list[str]): what to import.

    Returns:
        dict[str, Any]: :func:`preload`'s keys plus ``threads`` (this process's threads after a fork,
        None without ``/proc``), ``python_threads``, ``forbidden_loaded``, ``cuda_initialized``
        (``torch.cuda.is_initialized()``), ``cuda_driver_loaded`` (``libcuda.so`` mapped: something
        called into CUDA), ``stopped_import_in_child`` (None, or why a child could not import the
        stopped modules), ``pid`` and ``total_seconds``.
    """
    import threading

    start = time.perf_counter()
    out = preload(modules)
    try:
        with open("/proc/self/maps") as maps:
            driver = any("/libcuda.so" in line for line in maps)
    except OSError:
        driver = None
    # A CUDA build of torch or triton maps libcuda.so at import without initialising it (seen with torch
    # 2.11+cu130 and triton 3.6 on an H200 host); forking is unsafe only once cuInit ran here, which the
    # probe child finds out by initialising CUDA itself.
    out["stopped_import_in_child"] = _probe(sorted(out["stopped"]), use_cuda=driver is not False)
    torch = sys.modules.get("torch")
    out.update(
        threads=thread_count(),
        python_threads=threading.active_count(),
        forbidden_loaded=sorted(m for m in sys.modules if forbidden(m)),
        cuda_initialized=bool(torch is not None and torch.cuda.is_initialized()),
        cuda_driver_loaded=driver,
        pid=os.getpid(),
        total_seconds=round(time.perf_counter() - start, 3),
    )
    return out


def _cuda_in_child() -> str:
    """In a forked child: initialise CUDA and run one kernel where a GPU is visible; "" if that worked
    (or no GPU is visible), else the error."""
    try:
        torch = importlib.import_module("torch")
        if torch.cuda.device_count() > 0:
            torch.ones(1, device="cuda").add_(1)
            torch.cuda.synchronize()
    except BaseException as err:  # noqa: BLE001 - reported to the zygote, which refuses itself
        return f"CUDA in a forked child: {type(err).__name__}: {err}"[:2000]
    return ""


def _probe(stopped: list[str], use_cuda: bool = False) -> str | None:
    """Fork once (libraries stop their own thread pools before a fork, see the module docstring); the
    child imports the modules the guard stopped, as every run will, and reports whether it could; with
    ``use_cuda`` it then initialises CUDA and runs a kernel, as every run on a GPU will.

    A module stopped half-way leaves what it did before the forbidden import (a registration, say)
    in the zygote, and a run that imports it again would meet it twice: such a zygote is refused.
    A zygote in which something initialised the CUDA driver (``cuInit``) gives children that cannot
    use CUDA ("initialization error"): refused too.

    Returns:
        str | None: None, or the child's error.
    """
    import warnings

    read, write = os.pipe()
    with warnings.catch_warnings():
        # Python >= 3.12 warns when it forks a process with more than one OS thread; this fork is the one
        # that lets OpenBLAS-like pools stop themselves, and the threads are counted after it.
        warnings.filterwarnings("ignore", message=".*multi-threaded.*", category=DeprecationWarning)
        pid = os.fork()
    if pid == 0:
        os.close(read)
        error = ""
        try:
            import importlib

            for name in stopped:
                importlib.import_module(name)
        except BaseException as err:  # noqa: BLE001 - reported to the zygote, which refuses itself
            error = f"importing {name} after the server's imports: {type(err).__name__}: {err}"[:2000]
        if not error:
            error = not_kept_proof()
        if use_cuda and not error:
            error = _cuda_in_child()
        os.write(write, error.encode() or b"-")
        os._exit(0)
    os.close(write)
    answer = b""
    while True:
        chunk = os.read(read, 4096)
        if not chunk:
            break
        answer += chunk
    os.close(read)
    os.waitpid(pid, 0)
    text = answer.decode(errors="replace")
    return None if text == "-" else (text or "the probe child died")


def _write(fd: int, message: dict[str, Any]) -> None:
    data = (json.dumps(message) + "\n").encode()
    while data:
        data = data[os.write(fd, data) :]


def _become(request: dict[str, Any], own_fds: list[int]) -> int:
    """Turn this freshly forked child into ``python -m MODULE ARGS`` (see the module docstring).

    Returns:
        int: the exit status (the caller passes it to ``os._exit``).
    """
    signal.set_wakeup_fd(-1)
    signal.signal(signal.SIGCHLD, signal.SIG_DFL)
    for fd in own_fds:
        os.close(fd)
    null = os.open(os.devnull, os.O_RDONLY)
    os.dup2(null, 0)
    os.close(null)
    for fd, key in ((1, "stdout"), (2, "stderr")):
        out = os.open(request[key], os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        os.dup2(out, fd)
        os.close(out)
    torch = sys.modules.get("torch")
    CHILD_FACTS.update(
        start="forkserver",
        server_pid=os.getppid(),
        server_threads=_threads_of(os.getppid()),
        cuda_initialized_at_start=bool(torch is not None and torch.cuda.is_initialized()),
        hook_module_in_server=any(forbidden(m) for m in sys.modules),
        compiler_modules_in_server=sum(m.startswith(("torch._dynamo", "torch._inductor")) for m in sys.modules),
    )
    os.environ.clear()
    os.environ.update(request["env"])
    import tempfile

    tempfile.tempdir = None  # gettempdir() caches the zygote's TMPDIR
    os.chdir(request["cwd"])
    numpy_random = sys.modules.get("numpy.random")
    if numpy_random is not None:
        numpy_random.seed()  # type: ignore[attr-defined]
    _startup_hook()
    import runpy

    sys.argv = [request["module"], *request["args"]]
    try:
        runpy.run_module(request["module"], run_name="__main__", alter_sys=True)
        code = 0
    except SystemExit as stop:
        code = stop.code if isinstance(stop.code, int) else (0 if stop.code is None else 1)
        if not isinstance(stop.code, int) and stop.code is not None:
            print(stop.code, file=sys.stderr)
    except BaseException:  # noqa: BLE001 - as an interpreter would: the traceback, status 1
        traceback.print_exc()
        code = 1
    return code


def _threads_of(pid: int) -> int | None:
    try:
        return len(os.listdir(f"/proc/{pid}/task"))
    except OSError:
        return None


def _startup_hook() -> None:
    """What ``inductor_knobs_startup.pth`` does at interpreter start, with the run's environment."""
    wanted = os.environ.get("INDUCTOR_KNOBS_DISABLE", "").strip().lower() not in ("1", "true", "yes", "on") and any(
        k.startswith("INDUCTOR_KNOBS_") and k != "INDUCTOR_KNOBS_DISABLE" and v.strip() for k, v in os.environ.items()
    )
    if wanted:
        from ..ext import run_startup_hook

        run_startup_hook()


def _fork(request: dict[str, Any], own_fds: list[int]) -> int:
    """Fork a child for ``request``; return its pid once it leads its own session."""
    sys.stdout.flush()
    sys.stderr.flush()
    ready_r, ready_w = os.pipe()
    pid = os.fork()
    if pid == 0:
        code = 1
        try:
            os.close(ready_r)
            os.setsid()
            os.close(ready_w)  # the zygote reads EOF: the child now leads its session
            code = _become(request, own_fds)
        except BaseException:  # noqa: BLE001 - never return into the zygote's loop
            traceback.print_exc()
        finally:
            for stream in (sys.stdout, sys.stderr):
                try:
                    stream.flush()
                except Exception:  # noqa: BLE001 - a closed stream: nothing to flush
                    pass
            os._exit(code)
    os.close(ready_w)
    os.read(ready_r, 1)  # EOF after the child's setsid (or its death)
    os.close(ready_r)
    return pid


def _reap(reply: int) -> None:
    while True:
        try:
            pid, status = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return
        if pid == 0:
            return
        _write(reply, {"exit": pid, "rc": os.waitstatus_to_exitcode(status)})


def main() -> None:
    """Preload ``argv[1]`` (a JSON list of module names), report, and serve fork requests until stdin ends."""
    # Run as ``python -m``, this module is ``__main__``; a child's worker finds :data:`CHILD_FACTS`
    # under the module's own name.
    sys.modules.setdefault("inductor_knobs.ablation.zygote", sys.modules[__name__])
    # The protocol owns the original stdin and stdout; anything a library prints goes to stderr.
    requests, reply = os.dup(0), os.dup(1)
    null = os.open(os.devnull, os.O_RDONLY)
    os.dup2(null, 0)
    os.close(null)
    os.dup2(2, 1)
    _write(reply, {"ready": facts(json.loads(sys.argv[1]))})
    wake_r, wake_w = os.pipe()
    os.set_blocking(wake_w, False)
    signal.set_wakeup_fd(wake_w)
    signal.signal(signal.SIGCHLD, lambda *_: None)  # wakes select() through the wakeup fd
    own = [requests, reply, wake_r, wake_w]
    buffer = b""
    while True:
        readable, _, _ = select.select([requests, wake_r], [], [])
        if wake_r in readable:
            os.read(wake_r, 4096)
            _reap(reply)
        if requests not in readable:
            continue
        chunk = os.read(requests, 65536)
        if not chunk:
            break
        buffer += chunk
        while b"\n" in buffer:
            line, buffer = buffer.split(b"\n", 1)
            request = json.loads(line)
            try:
                _write(reply, {"id": request["id"], "pid": _fork(request, own)})
            except OSError as err:
                _write(reply, {"id": request["id"], "error": f"{type(err).__name__}: {err}"})
        _reap(reply)
    os._exit(0)


if __name__ == "__main__":
    main()
