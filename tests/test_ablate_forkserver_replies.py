"""Defects found in review, each with the smallest reproduction (no GPU, no real fork server where none is needed)."""

from __future__ import annotations

import io
import json
import threading

from inductor_knobs.ablation import forkserver


def _server_fed(lines: list[dict]) -> forkserver.ForkServer:
    """A ForkServer whose zygote 'wrote' ``lines`` (the real reader thread's code, on a fake stdout)."""
    server = forkserver.ForkServer.__new__(forkserver.ForkServer)
    server.facts, server.lost = None, False
    server._lock, server._cond = threading.Lock(), threading.Condition()
    server._replies, server._exits, server._forks, server._abandoned, server._next = {}, {}, {}, set(), 0
    server._start, server.env = 0.0, {}

    class _Proc:
        stdin = io.BytesIO()
        stdout = io.BytesIO(b"".join((json.dumps(m) + "\n").encode() for m in lines))

    server.proc = _Proc()  # type: ignore[assignment]
    server._read()
    server.lost = False  # the stream ended only because the fake has no more lines
    return server


def test_a_reused_pid_does_not_get_the_exit_status_of_the_earlier_run():
    # Run 1 is pid 4242 and exits 0; later (pid wrap-around: every run starts Inductor compile workers
    # and ptxas processes) run 2 is forked with the same pid and is still running.  Its wait must not
    # return run 1's status: the job thread would take a live run for finished (no result, its
    # directory removed under it) and never kill it.
    server = _server_fed([{"id": 1, "pid": 4242}, {"exit": 4242, "rc": 0}, {"id": 2, "pid": 4242}])
    first = server.spawn("m", [], {}, "/", "/dev/null", "/dev/null")
    assert first.wait(0) == 0
    second = server.spawn("m", [], {}, "/", "/dev/null", "/dev/null")
    assert second.pid == first.pid
    assert second.wait(0) is None
    assert second.poll() is None


def test_a_fork_answered_after_the_spawn_timed_out_is_killed_not_left_running(monkeypatch):
    # spawn() gave up on a fork request (SPAWN_TIMEOUT_S) and the run starts as a new interpreter; the
    # zygote still forks the child later.  Nobody holds that child: it must be killed, not left to run a
    # second copy of the job beside the real one (on the same GPU, with the same barrier token).
    import os
    import signal
    import subprocess

    import pytest

    monkeypatch.setattr(forkserver, "SPAWN_TIMEOUT_S", 0.01)
    server = _server_fed([])
    with pytest.raises(OSError, match="did not answer"):
        server.spawn("m", [], {}, "/", "/dev/null", "/dev/null")
    late = subprocess.Popen(["sleep", "600"], start_new_session=True)  # stands for the late child
    try:
        server.proc.stdout = io.BytesIO((json.dumps({"id": 1, "pid": late.pid}) + "\n").encode())
        server._read()
        assert late.wait(120) == -signal.SIGKILL  # a hang guard: it returns once the kill has landed
    finally:
        if late.poll() is None:
            os.killpg(late.pid, signal.SIGKILL)
            late.wait()
