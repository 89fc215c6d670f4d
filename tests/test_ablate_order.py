"""Which job a freed compile slot starts (ablation/order.py): longest compile first on a lane measured in one phase,
plan order on a lane measured in batches; the compile spans it reads come from the barrier's injected clock."""

from __future__ import annotations

import heapq
import math
import socket
import threading
from types import SimpleNamespace

import torch

from inductor_knobs.ablation import quiet, runner, spec
from inductor_knobs.ablation.order import Backlog
from inductor_knobs.ablation.plan import Plan
from inductor_knobs.ablation.workers import Workers

ARMS = ("gated@T4", "force_gemm_autotune@T4", "gated@L4", "force_gemm_autotune@L4", "gated", "force_gemm_autotune")


def plan_jobs(repeats: int = 3, arms: tuple[str, ...] = ARMS) -> list[dict]:
    """Jobs as Plan.jobs makes them: repeat-major, arms interleaved."""
    return [{"index": r * len(arms) + a, "repeat": r, "arm": {"name": arm}} for r in range(repeats) for a, arm in enumerate(arms)]


class Spans:
    """A fake barrier's compile spans: token -> (admitted, ready or None), on a clock the test moves."""

    def __init__(self) -> None:
        self.now = 0.0
        self.spans: dict[str, tuple[float, float | None]] = {}

    def admit(self, token: str) -> None:
        self.spans[token] = (self.now, None)

    def ready(self, token: str) -> None:
        self.spans[token] = (self.spans[token][0], self.now)

    def __call__(self, token: str) -> tuple[float, bool] | None:
        if token not in self.spans:
            return None
        admitted, ready = self.spans[token]
        return ((ready if ready is not None else self.now) - admitted, ready is not None)


def test_a_lane_measured_in_batches_keeps_plan_order():
    spans = Spans()
    backlog = Backlog([(0, j) for j in plan_jobs()], {0: False}, spans)
    taken = []
    for n in range(18):
        spans.admit(f"t{n}")
        spans.now += 1.0
        taken.append(backlog.take(0, f"t{n}")["index"])
    assert taken == list(range(18))
    assert backlog.take(0, "late") is None and backlog.counts() == {0: 0}


def test_longest_first_starts_every_arm_then_the_longest_known_then_lower_bounds():
    spans = Spans()
    backlog = Backlog([(0, j) for j in plan_jobs()], {0: True}, spans)
    first = []
    for n in range(9):  # nothing is known: every arm once (plan order), then ties in plan order
        spans.admit(f"t{n}")
        first.append(backlog.take(0, f"t{n}")["index"])
        spans.now += 1e-6  # admitted together: microseconds apart say nothing of an arm (compared in whole seconds)
    assert first == [0, 1, 2, 3, 4, 5, 6, 7, 8]
    spans.now = 20.0
    spans.ready("t0")  # gated@T4 repeat 0 held its slot 20 s; every other arm still compiles (at least 20 s)
    spans.now = 20.5
    spans.ready("t6")  # and its repeat 1
    spans.admit("t9")
    job = backlog.take(0, "t9")
    # 20 s known against at least 20 s still compiling: a tie in whole seconds, the compiling arm first, plan order.
    assert job["arm"]["name"] != "gated@T4" and job["index"] == 9
    spans.now = 50.0
    for token in ("t1", "t7"):  # force@T4 held 50 s
        spans.ready(token)
    spans.ready("t2")  # gated@L4: 50 s as well, but later in plan order
    spans.admit("t10")
    assert backlog.take(0, "t10")["index"] == 10  # gated (still compiling, 50 s so far): ties, plan order first
    spans.now = 60.0
    for token in ("t3", "t4", "t5", "t8", "t9", "t10"):  # the rest ready at 60 s
        spans.ready(token)
    order = []
    for n in range(11, 18):
        spans.admit(f"t{n}")
        order.append(backlog.take(0, f"t{n}")["index"])
    # Known longest per arm: 60 s for force, gated@L4 (repeat 1), force@L4 and gated (repeat 0), in plan order;
    # then force@T4 (50 s); gated@T4 (20 s) last.
    assert order == [11, 14, 15, 16, 17, 13, 12]


def test_lanes_are_independent():
    spans = Spans()
    jobs = plan_jobs(repeats=2, arms=("a", "b"))
    backlog = Backlog([(j["repeat"], j) for j in jobs], {0: True, 1: False}, spans)
    assert backlog.counts() == {0: 2, 1: 2}
    assert backlog.take(1, "x")["index"] == 2
    assert backlog.take(0, "y")["index"] == 0
    assert backlog.counts() == {0: 1, 1: 1}
    assert backlog.take(2, "z") is None  # a lane with no jobs


def makespan(durations: dict[str, float], slots: int, longest_first: bool) -> float:
    """When the last of the main job's 18 compiles ends, with ``slots`` compiling at once and each arm's slot
    time fixed (no contention model: this checks the rule, the GPU runs measure the gain)."""
    spans = Spans()
    backlog = Backlog([(0, j) for j in plan_jobs()], {0: longest_first}, spans)
    running: list[tuple[float, str]] = []
    token = 0
    end = 0.0
    while True:
        while len(running) < slots:
            spans.admit(str(token))
            job = backlog.take(0, str(token))
            if job is None:
                break
            heapq.heappush(running, (spans.now + durations[job["arm"]["name"]], str(token)))
            token += 1
        if not running:
            return end
        end, done = heapq.heappop(running)
        spans.now = end
        spans.ready(done)


def test_longest_first_ends_the_main_jobs_compiles_sooner():
    # Slot times as on one H200 with nine compiling at once (bench/published/2026-11-28-aot-build-aa-replicates,
    # main2b: admission to ready, rounded): the emulated gated arms are short, the others long.
    durations = dict(zip(ARMS, (23.0, 60.0, 23.0, 60.0, 55.0, 54.0), strict=True))
    fifo, lpt = makespan(durations, 9, False), makespan(durations, 9, True)
    assert lpt < fifo
    assert math.isclose(makespan(durations, 18, True), makespan(durations, 18, False))  # all at once: no order


def test_the_barrier_times_each_admission_to_ready_on_its_clock():
    now = [100.0]
    barrier = quiet.Quiet([None], 2, 2, {None: 2}, clock=lambda: now[0])
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        first, second = barrier.admit(None), barrier.admit(None)
        assert first is not None and second is not None
        assert barrier.compile_span("not a token") is None
        now[0] = 107.5
        assert barrier.compile_span(first["token"]) == (7.5, False)  # still compiling: to now
        sock.connect(barrier.address)
        sock.sendall(f"ready {first['token']}\n".encode())
        for _ in range(3000):  # the barrier's socket thread reads it (bounded, not timed)
            if barrier.compile_span(first["token"]) == (7.5, True):
                break
            threading.Event().wait(0.01)
        now[0] = 130.0
        assert barrier.compile_span(first["token"]) == (7.5, True)  # ready: the span stays
        barrier.finished(second)  # died without ``ready``: its time says nothing of its arm's compile
        now[0] = 200.0
        assert barrier.compile_span(second["token"]) is None
    finally:
        sock.close()
        barrier.close()


def _fake_cuda(monkeypatch):
    monkeypatch.setattr(torch.cuda, "get_device_properties", lambda g: SimpleNamespace(total_memory=80 * 2**30))


def test_only_a_lane_measured_in_one_phase_goes_longest_first(monkeypatch):
    """The runner's rule: 2 GPUs, 3 repeats of 3 arms, 2 compiling at once per GPU: GPU 0 runs 6 jobs with a cap of
    3 live workers (two phases: plan order), GPU 1 runs 3 (one phase: longest first)."""
    _fake_cuda(monkeypatch)
    seen = {}

    class Recording(runner.Backlog):
        def __init__(self, jobs, longest_first, compile_span):
            seen.update(longest_first)
            super().__init__(jobs, longest_first, compile_span)

    def call_job(job, arm, gpu, timeout, shard, workers, origin, parallel, threads, barrier):
        sock, _ = quiet.wait_turn(barrier)
        quiet.done_measuring(sock)
        return {"ok": True, "arm": arm.name, "repeat": job["repeat"], "index": job["index"], "gpu": gpu, "shard": shard}

    monkeypatch.setattr(runner, "Backlog", Recording)
    monkeypatch.setattr(runner, "call_job", call_job)
    monkeypatch.setattr(quiet, "_available_gib", lambda: 64.0)
    arms = [spec.parse_arm(a) for a in ("eager", "default", "c:max_autotune=1")]
    plan = Plan(workload="gemm_mlp", arms=arms, repeats=3, device="cuda", gpus=[0, 1], parallel=2)
    runs = runner.execute(plan, progress=False, workers=Workers(compile_threads=5))
    assert len(runs) == 9
    assert seen == {0: False, 1: True}
    assert {r["compile_threads"] for r in runs} == {5}  # every record says what its worker compiled with


def test_a_phase_measures_in_plan_order_whatever_order_the_workers_became_ready(monkeypatch):
    """Six workers compile at once on one lane and say ``ready`` in reverse plan order; they measure in plan order
    (the barrier's ranks), so the compile order (longest first) never decides which arm measures first."""
    _fake_cuda(monkeypatch)
    measured: list[int] = []
    lock = threading.Lock()

    def call_job(job, arm, gpu, timeout, shard, workers, origin, parallel, threads, barrier):
        threading.Event().wait(0.1 * (6 - int(job["index"])))  # the last job is ready first (order only, not asserted)
        sock, _ = quiet.wait_turn(barrier)
        with lock:
            measured.append(int(job["index"]))
        quiet.done_measuring(sock)
        return {"ok": True, "arm": arm.name, "repeat": job["repeat"], "index": job["index"], "gpu": gpu, "shard": shard}

    monkeypatch.setattr(runner, "call_job", call_job)
    monkeypatch.setattr(quiet, "_available_gib", lambda: 64.0)
    arms = [spec.parse_arm(a) for a in ("eager", "default")]
    plan = Plan(workload="gemm_mlp", arms=arms, repeats=3, device="cuda", gpus=[0], parallel=6)
    runs = runner.execute(plan, progress=False, workers=Workers())
    assert len(runs) == 6
    assert measured == [0, 1, 2, 3, 4, 5]
