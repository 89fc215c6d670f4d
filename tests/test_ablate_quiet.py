"""Latency measured in quiet: the phase barrier of ablation/quiet.py, checked on the records' clocks
of a real ablation, with a worker that dies while others wait, and with SIGINT while workers wait."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from inductor_knobs import cli
from inductor_knobs.ablation import build, explain, options, quiet, runner

TESTS = Path(__file__).parent


@pytest.fixture(autouse=True)
def _workload_importable(monkeypatch):
    monkeypatch.syspath_prepend(str(TESTS))
    monkeypatch.setenv("PYTHONPATH", str(TESTS))


def plan_for(*argv: str):
    parser = cli.argparse.ArgumentParser()
    options.add_parser(parser.add_subparsers(dest="command"))
    return build.build_plan(parser.parse_args(["ablate", *argv]))


def test_no_measurement_overlaps_another_workers_compile():
    """A real ablation with two workers compiling at once (CPU): every run's measurement window (from its
    turn to the end of its profiling) lies outside every other run's start-to-ready window, and outside
    every other measurement; the clocks are the records' (one host's monotonic clock)."""
    plan = plan_for(
        "--device", "cpu", "--workload", "gemm_mlp", "--arm", "default", "--arm", "eager", "--smoke", "--repeats", "2",
        "--parallel", "2",
    )  # fmt: skip
    runs = runner.execute(plan, progress=False)
    assert len(runs) == 4 and all(r["ok"] for r in runs), [r.get("error") for r in runs]
    busy = {r["index"]: (r["started_at"], r["phase_spans"]["compile"][1]) for r in runs}
    measuring = {r["index"]: (r["phase_spans"]["wait"][1], r["phase_spans"]["extras"][1]) for r in runs}
    for index, (begin, end) in measuring.items():
        assert begin <= end
        for other in runs:
            if other["index"] == index:
                continue
            a, b = busy[other["index"]]
            assert not (a < end and begin < b), f"run {index} measured while run {other['index']} compiled"
            c, d = measuring[other["index"]]
            assert not (c < end and begin < d), f"runs {index} and {other['index']} measured at once"
    # Two compiled at once: a worker that had compiled waited for the other, and its wait is recorded.
    assert max(r["phase_seconds"]["wait"] for r in runs) > 0
    starts = sorted(a for a, _ in busy.values())
    assert starts[1] < min(b for _, b in busy.values())  # the first two started before either was ready
    for r in runs:
        assert r["quiet"] == {"barrier": True, "parallel": 2, "cap": r["quiet"]["cap"], "lanes": 1}
        assert r["measure_cpus"] == sorted(os.sched_getaffinity(0)) or r.get("pin_error")
        assert r["start"] == "forkserver" and r["start_facts"]["hook_module_in_server"] is False
    assert explain.quiet_overlaps(runs) == 0
    text = explain.quiet_note({"runs": runs, "parallel": 2})
    assert "while no worker of this ablation compiled" in text and "no measurement overlapped" in text


class _Fake:
    """A worker's side of the barrier, in a thread: ready, wait for go, measure (until told), measured."""

    def __init__(self, barrier: dict) -> None:
        self.barrier, self.went, self.release = barrier, threading.Event(), threading.Event()
        self.error: BaseException | None = None
        self.sock: socket.socket | None = None
        self.connected = threading.Event()
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()

    def _run(self) -> None:
        try:
            sock, _ = quiet.wait_turn(self.barrier)
            self.went.set()
            self.release.wait(60)
            quiet.done_measuring(sock)
        except BaseException as err:  # noqa: BLE001 - the test reads it
            self.error = err


def test_a_worker_that_dies_while_others_wait_does_not_block_the_barrier():
    """Three workers on one lane (two compile at once, three live): one dies while compiling, one dies while
    waiting for its turn; the last still gets its turn, and after it admission opens again."""
    barrier = quiet.Quiet([None], parallel=2, cap=3, jobs={None: 4})
    try:
        a, b = barrier.admit(None), barrier.admit(None)
        assert a and b
        first = _Fake(a)  # ready, waits: b still compiles
        assert not first.went.wait(0.3)
        dying = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)  # b says ready, then dies before its turn
        dying.connect(b["address"])
        dying.sendall(f"ready {b['token']}\n".encode())
        c = barrier.admit(None)  # b's compile slot was released: a third worker may start
        assert c
        dying.close()
        barrier.finished(b)
        assert not first.went.wait(0.3)  # c still compiles
        barrier.finished(c)  # c dies while compiling: nothing compiles now, and the lane is not full
        assert not first.went.wait(0.3)  # one job is still to come: it may start, so no one measures yet
        d = barrier.admit(None)
        last = _Fake(d)
        assert first.went.wait(30)  # every live worker is ready: the first measures
        assert not last.went.wait(0.3)  # one at a time
        first.release.set()
        assert last.went.wait(30)
        last.release.set()
        for fake in (first, last):
            fake.thread.join(30)
            assert fake.error is None
        barrier.finished(a)
        barrier.finished(d)
        assert barrier.admit(None) is None  # every job was admitted: nothing more
    finally:
        barrier.close()


def test_lanes_measure_one_at_a_time_and_closing_wakes_every_waiter():
    """Two GPU lanes, one worker each: once both are ready (nothing compiles, both lanes full), the one
    ready first measures and the other waits until it says ``measured``: one measurement at a time on the
    whole host; closing the barrier wakes a thread waiting to start."""
    barrier = quiet.Quiet([0, 1], parallel=1, cap=1, jobs={0: 5, 1: 5})
    result: list = []
    try:
        zero = _Fake(barrier.admit(0))
        one_barrier = barrier.admit(1)
        while not barrier.ready[0]:  # a hang guard is the test's own timeout; this orders the two "ready"s
            threading.Event().wait(0.01)
        one = _Fake(one_barrier)
        blocked = threading.Thread(target=lambda: result.append(barrier.admit(0)), daemon=True)  # lane 0 is full
        blocked.start()
        assert zero.went.wait(30)
        assert not one.went.wait(0.5)  # lane 1 waits for lane 0's measurement (a wait, not a timing)
        zero.release.set()
        assert one.went.wait(30)
        assert blocked.is_alive()
    finally:
        barrier.close()
    blocked.join(30)
    assert result == [None]
    for fake in (zero, one):
        fake.release.set()
        fake.thread.join(30)


def test_lanes_get_their_own_cpus_and_the_cap_follows_parallel():
    cpus = sorted(os.sched_getaffinity(0))
    assert quiet.lane_cpus(1) == [cpus]
    two = quiet.lane_cpus(2)
    assert (len(two) == 2 and all(two) and not set(two[0]) & set(two[1])) or len(cpus) < 2
    assert quiet.live_cap(1, 10) == 1
    assert 2 <= quiet.live_cap(2, 10) <= 4
    assert quiet.live_cap(4, 18) in (4, 5, 6)  # balanced batches, memory permitting
    assert explain.cpu_ranges([0, 1, 2, 3, 8, 10, 11]) == "0-3,8,10-11"


def test_the_main_jobs_18_runs_go_in_three_balanced_batches(monkeypatch):
    monkeypatch.setattr(quiet, "_available_gib", lambda: 120.0)  # a 128 GiB GPU host: 2 x parallel live
    assert quiet.live_cap(4, 18) == 6
    monkeypatch.setattr(quiet, "_available_gib", lambda: 18.0)  # 4 workers' worth of memory
    assert quiet.live_cap(4, 18) == 4


def test_the_gpus_memory_bounds_the_live_workers(monkeypatch):
    """Nine at once (the main job's default on 16 CPUs): one batch of 18 on an 80 GiB GPU, two of 9 on a 24 GiB card
    (18 CUDA contexts and models would not fit), never fewer than compile at once."""
    monkeypatch.setattr(quiet, "_available_gib", lambda: 120.0)
    assert quiet.live_cap(9, 18, gpu_gib=79.1) == 18
    assert quiet.live_cap(9, 18, gpu_gib=23.6) == 9
    assert quiet.live_cap(9, 18, gpu_gib=4.0) == 9
    assert quiet.live_cap(9, 18) == 18  # CPU: host memory only


def _alive(pid: int) -> bool:
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


def _has_socket(pid: int) -> bool:
    try:
        return any(os.readlink(f"/proc/{pid}/fd/{fd}").startswith("socket:") for fd in os.listdir(f"/proc/{pid}/fd"))
    except OSError:
        return False


def test_sigint_while_workers_wait_for_their_turn_leaves_nothing(tmp_path):
    """--parallel 2: the first worker has compiled and waits at the barrier while the second sleeps in its
    build; SIGINT then ends the ablation: status 130, both workers and the fork server gone, TMPDIR empty."""
    pids, tmp, out = tmp_path / "pids", tmp_path / "tmp", tmp_path / "out"
    pids.mkdir()
    tmp.mkdir()
    argv = [sys.executable, "-m", "inductor_knobs", "ablate", "--device", "cpu", "--workload", "ablation_workload:slow_second"]
    argv += ["--smoke", "--arm", "eager", "--arm", "default", "--parallel", "2", "--out", str(out)]
    env = {k: v for k, v in os.environ.items() if not k.startswith("INDUCTOR_KNOBS_")}
    env.update(TMPDIR=str(tmp), IK_TEST_PID_DIR=str(pids), IK_TEST_SLEEP="120")
    proc = subprocess.Popen(
        argv, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),
    )  # fmt: skip
    seen: list[int] = []
    try:
        deadline = time.monotonic() + 300  # a hang guard, not a measurement
        waiting = None
        while waiting is None:
            assert proc.poll() is None, proc.communicate()
            assert time.monotonic() < deadline, "no worker reached the barrier"
            seen = [int(p.stem) for p in pids.glob("*.pid")]
            ran = [int(p.stem) for p in pids.glob("*.ran")]
            if len(seen) == 2:
                waiting = next((pid for pid in ran if _has_socket(pid)), None)  # connected: it said ready
            time.sleep(0.1)
        server = [p for p in _children(proc.pid) if p not in seen]
        proc.send_signal(signal.SIGINT)
        _, stderr = proc.communicate(timeout=120)
        deadline = time.monotonic() + 120  # a hang guard, not a measurement: ends once they are gone
        while any(_alive(p) for p in seen + server) and time.monotonic() < deadline:
            time.sleep(0.1)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()
        for pid in seen:
            if _alive(pid):
                os.kill(pid, signal.SIGKILL)
    assert proc.returncode == 130, stderr
    assert "Traceback" not in stderr
    assert not [p for p in seen + server if _alive(p)]
    assert not list(tmp.iterdir())
    results = json.loads((out / "results.json").read_text())
    assert results["partial"] is True and results["runs"] == []


def _children(pid: int) -> list[int]:
    out = []
    for name in os.listdir("/proc"):
        if name.isdigit():
            try:
                stat = Path(f"/proc/{name}/stat").read_text().rsplit(")", 1)[1].split()
            except OSError:
                continue
            if int(stat[1]) == pid:
                out.append(int(name))
    return out


def _record(index: int, started: float, ready: float, go: float, done: float, **extra) -> dict:
    spans = {"import": [started, started], "compile": [started, ready], "wait": [ready, go], "extras": [go, done]}
    record = {"ok": True, "index": index, "started_at": started, "phase_spans": spans, "measure_cpus": [0, 1, 2, 3]}
    record["quiet"] = {"barrier": True, "parallel": 2, "cap": 4, "lanes": 1}
    return {**record, **extra}


def test_the_report_says_how_the_quiet_was_ensured_and_checks_it():
    quiet_runs = [_record(0, 0.0, 5.0, 8.0, 9.0), _record(1, 1.0, 7.0, 9.0, 10.0)]
    text = explain.quiet_note({"runs": quiet_runs})
    assert "up to 2 compiled at once" in text and "pinned to CPUs 0-3" in text and "no measurement overlapped" in text
    loud = [_record(0, 0.0, 5.0, 5.5, 9.0), _record(1, 1.0, 7.0, 9.0, 10.0)]  # run 0 measured while run 1 compiled
    assert explain.quiet_overlaps(loud) == 1 and "**the records' clocks show 1 measurement(s)" in explain.quiet_note(
        {"runs": loud}
    )
    slurm = explain.quiet_note({"executor": "slurm", "runs": quiet_runs})
    assert "its own Slurm job: there is no barrier across jobs" in slurm
    server = {
        "id": "s1",
        "start_seconds": 2.5,
        "preloaded": ["sympy", "torch"],
        "stopped": {"m": "imports torch._dynamo (from x)"},
    }
    started = explain.start_note(
        {"runs": [{"start": "forkserver", "server": server}] * 2 + [{"start": "subprocess", "start_note": "why"}]}
    )
    assert started.startswith("2 of 3 runs were forked from a fork server that imported torch, sympy once (2.5 s")
    assert (
        "not preloaded: m (imports torch._dynamo (from x))" in started
        and "1 of 3 runs started as new interpreters (why)" in started
    )


def test_worker_counts_follow_the_cpus_this_process_may_run_on(monkeypatch):
    """Under ``taskset -c 0-7`` on a 64-CPU host the main job sizes its workers for 8 CPUs, not 64."""
    import os

    from inductor_knobs.ablation import main_job, quiet

    monkeypatch.setattr(os, "cpu_count", lambda: 64)
    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: set(range(8)), raising=False)
    assert quiet.usable_cpus() == 8
    monkeypatch.setattr(quiet, "_available_gib", lambda: 120.0)
    assert main_job.main_job_parallel("cuda", [0]) == 8  # 8 CPUs, one worker each
    assert main_job.main_job_parallel("cuda", [0, 1]) == 4  # two GPUs' workers share the 8 CPUs
    assert [len(cpus) for cpus in quiet.lane_cpus(2)] == [4, 4]
    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: set(range(64)), raising=False)
    assert main_job.main_job_parallel("cuda", [0]) == 16  # capped
    assert main_job.main_job_parallel("cuda", [0], gpu_gib=24.0) == 12  # an L4's 24 GiB at 2 GiB a worker
    assert main_job.main_job_parallel("cuda", [0], gpu_gib=24.0, runs=18) == 9  # 12 live at most: two batches of 9
    monkeypatch.setattr(quiet, "_available_gib", lambda: 60.0)
    assert main_job.main_job_parallel("cuda", [0], runs=18) == 9  # 15 live at most: 9 + 9, not 15 + 3
    assert main_job.main_job_parallel("cuda", [0], runs=12) == 12  # one batch
    monkeypatch.setattr(quiet, "_available_gib", lambda: 30.0)
    assert main_job.main_job_parallel("cuda", [0]) == 7  # 30 GiB of host memory at 4 GiB a worker
    assert main_job.main_job_parallel("cuda", [0], runs=18) == 6  # 7 live at most: three batches of 6
    monkeypatch.setattr(quiet, "_available_gib", lambda: None)  # no /proc/meminfo
    assert main_job.main_job_parallel("cuda", [0], gpu_gib=1.0, runs=18) == 1  # a tiny GPU
    monkeypatch.setattr(quiet, "_available_gib", lambda: 120.0)
    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: set(range(16)), raising=False)
    assert main_job.main_job_parallel("cuda", [0], gpu_gib=139.8) == 16  # a 16-CPU H200 node
    assert quiet.live_cap(16, 18) == 18  # the main job's 18 runs in one batch


# -- who may talk to the barrier, and how much ---------------------------------------------------


def _closed_by_the_barrier(sock: socket.socket) -> bool:
    """Whether the barrier closed ``sock`` (within 30 s)."""
    sock.settimeout(30)
    try:
        return sock.recv(1) == b""
    except ConnectionResetError:
        return True


def test_a_line_over_the_bound_closes_its_connection_and_is_never_buffered_whole(monkeypatch, caplog):
    most = []

    class Recording(quiet.LineBuffer):
        def feed(self, data):
            most.append(len(self.pending) + len(data))
            return super().feed(data)

    monkeypatch.setattr(quiet, "LineBuffer", Recording)
    barrier = quiet.Quiet([None], parallel=1, cap=1, jobs={None: 1}, max_line=64)
    try:
        job = barrier.admit(None)
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        sock.connect(job["address"])
        sender = threading.Thread(target=lambda: _send_quietly(sock, b"x" * 2**20), daemon=True)
        sender.start()
        assert _closed_by_the_barrier(sock)
        sender.join(30)
        sock.close()
        assert most and max(most) <= 65  # never more than one byte past the bound
        assert "closed a connection: a line longer than 64 bytes without a newline (allowed 64 bytes)" in caplog.text
        ok = _Fake(job)  # the barrier still serves: a worker of this uid gets its turn
        assert ok.went.wait(30)
        ok.release.set()
        ok.thread.join(30)
        assert ok.error is None
    finally:
        barrier.close()


def _send_quietly(sock: socket.socket, data: bytes) -> None:
    try:
        sock.sendall(data)
    except OSError:  # the barrier closed the connection: expected
        pass


def test_a_peer_of_another_uid_is_refused(caplog):
    barrier = quiet.Quiet([None], parallel=1, cap=1, jobs={None: 1}, uid_of=lambda sock: 65534)
    try:
        job = barrier.admit(None)
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        sock.connect(job["address"])
        _send_quietly(sock, f"ready {job['token']}\n".encode())
        assert _closed_by_the_barrier(sock)
        sock.close()
        assert job["token"] in barrier.compiling  # its "ready" was never read
        assert f"its peer runs as uid 65534, the ablation as uid {os.geteuid()}" in caplog.text
    finally:
        barrier.close()


def test_peer_uid_reads_the_kernels_credentials():
    left, right = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
    with left, right:
        assert quiet.peer_uid(left) == os.geteuid()


@pytest.mark.skipif(os.geteuid() != 0, reason="switching to uid 65534 needs root")
def test_a_process_running_as_nobody_is_refused():
    barrier = quiet.Quiet([None], parallel=1, cap=1, jobs={None: 1})
    try:
        job = barrier.admit(None)
        child = os.fork()
        if child == 0:  # pragma: no cover - the child: exit 0 when the barrier closed its connection unread
            code = 1
            try:
                os.setgid(65534)
                os.setuid(65534)
                sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
                sock.connect(job["address"])
                _send_quietly(sock, f"ready {job['token']}\n".encode())
                code = 0 if _closed_by_the_barrier(sock) else 1
            finally:
                os._exit(code)
        _, status = os.waitpid(child, 0)
        assert os.waitstatus_to_exitcode(status) == 0
        assert job["token"] in barrier.compiling
    finally:
        barrier.close()


def test_a_hold_keeps_the_measurement_back_but_not_the_compiles():
    """Work beside the workers (the command's doctor report) holds the measurement phase: admission goes on, the
    ready worker waits until the hold is released (once; a second release does nothing)."""
    barrier = quiet.Quiet([None], parallel=2, cap=2, jobs={None: 2})
    try:
        release = barrier.hold()
        a = barrier.admit(None)
        b = barrier.admit(None)  # admission is not held
        assert a and b
        first = _Fake(a)
        barrier.finished(b)  # b is done without measuring: only the hold is left
        assert not first.went.wait(0.3)
        release()
        assert first.went.wait(30)
        release()
        first.release.set()
        first.thread.join(30)
        assert first.error is None
        barrier.finished(a)
    finally:
        barrier.close()


def test_work_before_measuring_runs_beside_the_compiles_and_ends_before_any_measurement():
    """runner.execute(before_measuring=...): it starts with the runs, every measurement starts after it returned,
    and execute returns only after it has."""
    plan = plan_for(
        "--device", "cpu", "--workload", "gemm_mlp", "--arm", "default", "--arm", "eager", "--smoke", "--repeats", "1",
        "--parallel", "2",
    )  # fmt: skip
    spans: list[float] = []

    def beside() -> None:
        spans.append(time.monotonic())
        time.sleep(3.0)  # longer than the eager run takes to be ready to measure
        spans.append(time.monotonic())

    runs = runner.execute(plan, progress=False, before_measuring=beside)
    assert len(runs) == 2 and all(r["ok"] for r in runs), [r.get("error") for r in runs]
    assert len(spans) == 2
    assert min(r["started_at"] for r in runs) < spans[1]  # the runs did not wait for it
    assert all(r["phase_spans"]["wait"][1] >= spans[1] for r in runs)  # no turn to measure before it returned
