"""ik.serving.capture_cuda_graphs on CPU: argument checks, what a call replays or passes on, and the warm-up's host share."""

from __future__ import annotations

import threading

import pytest
import torch

import inductor_knobs as ik
from inductor_knobs.serving import graphs
from inductor_knobs.serving import warm_up as serving


class FakeGraph:
    """Stands in for a captured torch.cuda.CUDAGraph: a replay runs the captured function on the static inputs."""

    def __init__(self, fn, static, out):
        self.fn, self.static, self.out, self.replays = fn, static, out, 0

    def replay(self):
        self.replays += 1
        self.out.copy_(self.fn(*self.static))


def _captured(fn, *shapes, outputs="static"):
    captured = ik.serving.CapturedGraphs(fn, outputs)
    for n in shapes:
        static = (torch.zeros(1, n),)
        out = fn(*static).clone()
        captured._graphs[graphs._key(static, {})] = (FakeGraph(fn, static, out), static, {}, out)
    return captured


def test_a_call_at_a_captured_shape_copies_into_the_static_inputs_and_replays():
    captured = _captured(lambda x: x * 2, 4, 8)
    x = torch.arange(4.0).reshape(1, 4)
    out = captured(x)
    assert torch.equal(out, x * 2) and captured.replays == 1 and captured.misses == 0
    _, static, _, graph_out = captured._graphs[graphs._key((x,), {})]
    assert out is graph_out and torch.equal(static[0], x), "the graph's own output, its static input holds x"
    assert captured(torch.ones(1, 8)) is captured._graphs[graphs._key((torch.ones(1, 8),), {})][3]


def test_any_other_call_goes_to_the_callable_and_is_counted():
    captured = _captured(lambda x, scale=1: x * 2 * (scale if isinstance(scale, int) else len(scale)), 4)
    assert torch.equal(captured(torch.ones(1, 5)), torch.full((1, 5), 2.0))  # a shape not captured
    assert torch.equal(captured(torch.ones(1, 4, dtype=torch.float64)), torch.full((1, 4), 2.0, dtype=torch.float64))
    assert torch.equal(captured(torch.ones(1, 4), scale=3), torch.full((1, 4), 6.0))  # a value not baked in
    assert captured(torch.ones(1, 4), scale=[1]) is not None  # unhashable: cannot have been captured
    assert captured.misses == 4 and captured.replays == 0


def test_two_threads_never_replay_into_the_same_buffers_at_once():
    inside = []

    def fn(x):
        inside.append(threading.get_ident())
        assert len(inside) == 1, "two replays overlapped"
        result = x + 1
        inside.pop()
        return result

    captured = _captured(fn, 4, outputs="copy")
    threads = [threading.Thread(target=lambda: [captured(torch.ones(1, 4)) for _ in range(200)]) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert captured.replays == 800


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"fn": None}, r"fn/factory="),
        ({"factory": 3}, r"fn/factory="),
        ({"shapes": []}, r"shapes=\[\]"),
        ({"warmup_calls": 0}, r"warmup_calls=0"),
        ({"warmup_calls": True}, r"warmup_calls=True"),
    ],
)
def test_bad_arguments_name_the_value_and_what_is_allowed(kwargs, match):
    args = {"fn": lambda x: x, "shapes": [4], "factory": torch.ones, **kwargs}
    with pytest.raises(ik.errors.InvalidKnobValue, match=match) as caught:
        ik.serving.capture_cuda_graphs(args.pop("fn"), **args)
    assert f"torch {torch.__version__.split('+')[0]}" in str(caught.value)


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the machine without CUDA")
def test_without_cuda_capture_says_so():
    with pytest.raises(ik.serving.GraphCaptureFailed, match="needs a CUDA GPU"):
        ik.serving.capture_cuda_graphs(lambda x: x, shapes=[4], factory=torch.ones)


def test_a_failed_capture_names_the_shape_and_keeps_nothing(monkeypatch):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "graph_pool_handle", lambda: "pool")
    monkeypatch.setattr(torch.Tensor, "device", property(lambda self: torch.device("cuda", 0)))
    made = []

    def capture(self, torch_, args, kwargs, pool, warmup_calls):
        if args[0].shape[-1] == 4:
            raise RuntimeError("operation not permitted when stream is capturing")
        self._graphs[graphs._key(args, kwargs)] = ("graph", args, kwargs, None)
        made.append(self)

    monkeypatch.setattr(graphs.CapturedGraphs, "_capture", capture)
    with pytest.raises(ik.serving.GraphCaptureFailed, match=r"capturing shape 4 failed.*not permitted") as caught:
        ik.serving.capture_cuda_graphs(lambda x: x, shapes=[4, 8], factory=lambda n: torch.ones(1, n))
    assert made and made[0]._graphs == {}, "the larger shape was captured first, then dropped"
    assert isinstance(caught.value.__cause__, RuntimeError)


def test_each_capture_is_published_and_the_capture_shapes_are_kept(monkeypatch):
    """What ik.serving.save_serving_bundle records (capture_shapes, warmup_calls) and what a recorder hears per capture."""
    from inductor_knobs.core.recorder import Subscription

    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "graph_pool_handle", lambda: "pool")
    monkeypatch.setattr(torch.cuda, "synchronize", lambda: None)
    monkeypatch.setattr(torch.Tensor, "device", property(lambda self: torch.device("cuda", 0)))

    def capture(self, torch_, args, kwargs, pool, warmup_calls):
        self._graphs[graphs._key(args, kwargs)] = ("graph", args, kwargs, None)

    monkeypatch.setattr(graphs.CapturedGraphs, "_capture", capture)
    heard = []

    class Listener:
        def on_runtime(self, event):
            heard.append(event)

    with Subscription(Listener(), hooks=False):
        captured = ik.serving.capture_cuda_graphs(lambda x: x, shapes=[4, 8], factory=lambda n: torch.ones(1, n), warmup_calls=2)
    assert captured.capture_shapes == [4, 8] and captured.warmup_calls == 2
    recorded = [e.detail for e in heard if e.kind == "cudagraph_recording"]
    assert recorded == [
        f"ik.serving.capture_cuda_graphs: shape {n} (2 warm-up calls and one capture)" for n in (8, 4)
    ]  # largest first


def test_a_cpu_input_is_refused_before_any_capture(monkeypatch):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    with pytest.raises(ik.serving.GraphCaptureFailed, match="shape 4 hold a tensor on cpu"):
        ik.serving.capture_cuda_graphs(lambda x: x, shapes=[4], factory=lambda n: torch.ones(1, n))


def test_warmup_reports_the_host_share_and_recommends_graphs_only_for_a_host_bound_cuda_call(monkeypatch, fake_clock):
    def host_work(x):  # 2 ms on the host (on the fake clock: nothing else moves it, so no load can skew the share)
        fake_clock.spend(0.002)
        return x + 1

    report = ik.serving.warmup(host_work, shapes=[4, 8], factory=lambda n: torch.ones(1, n), probes=None)
    assert report.host_share == pytest.approx(1.0)  # nothing to wait for on the CPU: the call is all host work
    assert report.steady_state_ms == pytest.approx(2.0)
    assert all(s.last_call_host_seconds is not None for s in report.steps)
    assert not any("capture_cuda_graphs" in fix for fix in report.fixes), "CPU calls: no CUDA graph to capture"
    assert "host work" in report.table() and report.to_dict()["host_share"] == report.host_share
    monkeypatch.setattr(serving, "on_cuda", lambda signature: True)
    report = ik.serving.warmup(host_work, shapes=[4, 8], factory=lambda n: torch.ones(1, n), probes=None)
    (fix,) = [f for f in report.fixes if "capture_cuda_graphs" in f]
    assert f"{100 * report.host_share:.0f}% of a steady call is host work" in fix


def test_warmup_measures_what_the_profiler_adds_and_the_guard_names_it_in_a_profiled_stall():
    """A new-shape call runs under the guard's profiler: that cost is the guard's own, measured in warm-up."""
    report = ik.serving.warmup(lambda x: x + 1, shapes=[4, 8], factory=lambda n: torch.ones(1, n), probes=None)
    assert report.profiler_seconds is not None and report.profiler_seconds >= 0
    assert report.to_dict()["profiler_seconds"] == report.profiler_seconds
    assert not any(c.kind == "profiler" for s in report.steps for c in s.causes), "warm-up's own guard never names it"
    measured = ik.serving.WarmupReport(report.steps, profiler_seconds=0.030, shape_seconds=report.shape_seconds)
    guard = ik.serving.no_stalls(lambda: None, on="record", baseline_ms=10.0, warmup=measured)
    cuda_call = ((torch.int64, (1, 1679), "cuda"),)
    guard._judge(0.077, [], None, True, True, cuda_call, None, 0.076)  # profiled, a new shape
    (stall,) = guard.stalls
    assert {c.kind for c in stall.causes} == {"profiler", "unattributed"}, stall.describe()
    assert "30.00 ms more than a plain one" in stall.causes[-1].detail or "30.00 ms" in stall.describe()
    guard._judge(0.035, [], None, True, True, cuda_call, None, 0.034)
    assert guard.stalls[-1].attributed and guard.stalls[-1].primary == "profiler"
    guard._judge(0.035, [], None, True, False, cuda_call, None, 0.034)  # not profiled: not the profiler's
    assert guard.stalls[-1].primary == "unattributed"
