"""ik.serving.warmup(per_bucket=...): a static graph per bucket, the per-bucket decision, and traffic that compiles nothing."""

from __future__ import annotations

import sys
import threading

import pytest
import torch

import inductor_knobs as ik
from inductor_knobs.core import torch_compat
from inductor_knobs.serving import per_bucket
from inductor_knobs.serving.warm_up_report import WarmupStep

BUCKETS = [4, 8, 16]


def _make(n):
    return torch.randn(n, 32)


def _step(shape, first_ms, last_ms, compiles=1):
    events = [ik.CompileEvent(f"0/{i}", False) for i in range(compiles)]
    return WarmupStep(0, [], first_ms / 1000, last_ms / 1000, compiles=events, shape=shape)


def test_auto_keeps_a_bucket_graph_only_where_it_measured_faster():
    own = [_step(128, 900.0, 0.051), _step(1024, 800.0, 0.057), _step(8192, 700.0, 0.146)]
    dynamic = [_step(128, 0, 0.038), _step(1024, 0, 0.068), _step(8192, 0, 0.242)]  # issue 48's H100 numbers
    rows = per_bucket.tune("auto", own, dynamic)
    assert [r.kept for r in rows] == [False, True, True]
    assert rows[2].gain == pytest.approx(0.242 / 0.146) and rows[0].compile_seconds == pytest.approx(0.899949)
    assert per_bucket.tune(True, own, dynamic)[0].kept  # True keeps every bucket's graph
    (row,) = per_bucket.tune("auto", [_step(1, 1.0, 1.0)], [_step(1, 1.0, 1.01)])  # 1% is noise, not a gain
    assert not row.kept
    text = ik.serving.warmup.__globals__["WarmupReport"]([], buckets=rows).table()
    assert "dynamic graph" in text and "1.66x  own graph" in text


def test_auto_decides_by_kernel_time_where_it_was_measured():
    """A launch-bound bucket: the warm calls' wall times are equal (host time), the kernels are not."""
    own = [_step(128, 900.0, 0.2), _step(8192, 900.0, 0.2)]
    dynamic = [_step(128, 0, 0.2), _step(8192, 0, 0.2)]
    assert [r.kept for r in per_bucket.tune("auto", own, dynamic)] == [False, False]
    rows = per_bucket.tune("auto", own, dynamic, [(0.0239, 0.0326), None])  # the 8192 bucket was not measured
    assert [r.kept for r in rows] == [True, False] and rows[0].per_bucket_ms == 0.0239 and rows[1].per_bucket_ms == 0.2


def test_kernel_time_needs_cuda_inputs():
    assert per_bucket.kernel_ms((torch.relu,), (torch.ones(2),), {}) is None  # CPU: the wall-time comparison stands


def test_kernel_time_is_taken_side_by_side_and_the_median_kept(monkeypatch):
    """The graphs take turns (the order reversed every other round), and each keeps the median of its rounds: a
    GPU state that moves one replay (the first, after an idle compile) moves no verdict."""
    import types

    class OnCuda(torch.Tensor):
        is_cuda = True  # type: ignore[assignment]

    x = torch.Tensor._make_subclass(OnCuda, torch.ones(2))
    calls: list[str] = []
    scripted = {"own": iter([9.0, 1.0, 1.1, 0.9, 1.0]), "dynamic": iter([2.0, 2.1, 1.9, 2.0, 8.0])}

    def do_bench_cudagraph(fn):
        name = fn()
        calls.append(name)
        stance = getattr(torch._dynamo.eval_frame, "_stance", None)  # set_stance: torch 2.6+
        assert stance is None or stance.stance == "fail_on_recompile"  # nothing may compile meanwhile
        return next(scripted[name])

    monkeypatch.setitem(sys.modules, "triton", types.ModuleType("triton"))
    monkeypatch.setitem(sys.modules, "triton.testing", types.SimpleNamespace(do_bench_cudagraph=do_bench_cudagraph))
    monkeypatch.setattr(type(torch_compat.installed()), "cudagraph_trees_in_use", lambda self: False)
    measured = per_bucket.kernel_ms((lambda t: "own", lambda t: "dynamic"), (x,), {}, rounds=5)
    assert measured == [1.0, 2.0]
    assert calls == ["own", "dynamic", "dynamic", "own", "own", "dynamic", "dynamic", "own", "own", "dynamic"]
    assert per_bucket.kernel_ms((), (x,), {}) is None

    # A round that fails (a call that cannot be captured, or would compile): no verdict, and the stance is put back.
    stance = getattr(torch._dynamo.eval_frame, "_stance", None)
    scripted = {"own": iter([1.0, 1.0]), "dynamic": iter([2.0])}
    calls.clear()
    assert per_bucket.kernel_ms((lambda t: "own", lambda t: "dynamic"), (x,), {}, rounds=3) is None
    assert calls == ["own", "dynamic", "dynamic"] and getattr(torch._dynamo.eval_frame, "_stance", None) == stance


@pytest.mark.skipif(not hasattr(torch._dynamo.eval_frame, "_stance"), reason="torch.compiler.set_stance is 2.6+")
def test_kernel_time_from_four_threads_at_once_leaves_the_stance_as_it_was(monkeypatch):
    """torch's stance is process-global: four threads timing at once take turns, each times under
    ``fail_on_recompile``, and the process's stance is the default afterwards (overlapping set/restore would leave
    ``fail_on_recompile`` set, or end one thread's refusal while it still times)."""
    import types

    class OnCuda(torch.Tensor):
        is_cuda = True  # type: ignore[assignment]

    x = torch.Tensor._make_subclass(OnCuda, torch.ones(2))
    seen: list[str] = []
    overlaps: list[int] = []
    running = [0]
    lock = threading.Lock()

    def do_bench_cudagraph(fn):
        with lock:
            running[0] += 1
            overlaps.append(running[0])
        seen.append(torch._dynamo.eval_frame._stance.stance)
        threading.Event().wait(0.002)  # a yield to the other threads (nothing asserted on time)
        with lock:
            running[0] -= 1
        return 1.0

    monkeypatch.setitem(sys.modules, "triton", types.ModuleType("triton"))
    monkeypatch.setitem(sys.modules, "triton.testing", types.SimpleNamespace(do_bench_cudagraph=do_bench_cudagraph))
    monkeypatch.setattr(type(torch_compat.installed()), "cudagraph_trees_in_use", lambda self: False)
    before = torch._dynamo.eval_frame._stance
    results: list[object] = []

    def one() -> None:
        results.append(per_bucket.kernel_ms((lambda t: 1, lambda t: 2), (x,), {}))

    threads = [threading.Thread(target=one) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    assert results == [[1.0, 1.0]] * 4
    assert set(seen) == {"fail_on_recompile"} and len(seen) == 4 * 6
    assert max(overlaps) == 1  # one timing at a time in the process
    assert torch._dynamo.eval_frame._stance == before


def test_kernel_time_is_not_taken_under_cuda_graph_trees(monkeypatch):
    """A compile with ``triton.cudagraphs`` records its own trees: they must not run under another capture."""
    import types

    fake_trees = types.SimpleNamespace(get_manager=lambda device, create_if_none_exists: object())
    monkeypatch.setitem(sys.modules, "torch._inductor.cudagraph_trees", fake_trees)
    monkeypatch.setattr(torch._C, "_is_key_in_tls", lambda key: True)
    monkeypatch.setattr(torch.cuda, "current_device", lambda: 0)
    assert torch_compat.installed().cudagraph_trees_in_use()
    fake_trees.get_manager = lambda device, create_if_none_exists: None
    assert not torch_compat.installed().cudagraph_trees_in_use()
    fake_trees.get_manager = lambda device, create_if_none_exists: 1 / 0  # unreadable: do not capture
    assert torch_compat.installed().cudagraph_trees_in_use()


def test_a_graph_per_bucket_and_traffic_compiles_nothing(fresh_inductor):
    lin = torch.nn.Linear(32, 16, bias=False)
    fn = torch.compile(lin)  # inductor, static shapes by default
    with ik.record_compiles() as warming:
        report = ik.serving.warmup(fn, shapes=BUCKETS, factory=_make, per_bucket=True, probes=None)
    assert len(warming.attestations) == len(BUCKETS)  # one Inductor graph per bucket
    assert [r.bucket for r in report.buckets] == BUCKETS
    assert [r.compiles for r in report.buckets] == [1, 1, 1]  # each bucket compiled its own graph
    assert all(e.recompile for s in report.steps[1:] for e in s.compiles)
    assert report.serving_fn is fn and all(r.kept and r.dynamic_ms is None for r in report.buckets)
    # the settings were put back
    assert torch._dynamo.config.automatic_dynamic_shapes is True
    assert torch._dynamo.config.cache_size_limit == 8
    with ik.serving.no_stalls(on="raise"), ik.serving.no_autotune(), ik.record_compiles() as seen:
        for n in BUCKETS:
            torch.testing.assert_close(fn(x := _make(n)), lin(x))
    assert seen.compiles == [] and seen.attestations == []


def test_auto_routes_each_bucket_and_other_sizes_to_the_dynamic_graph(fresh_inductor):
    import copy

    lin = torch.nn.Linear(32, 16, bias=False)
    # dynamic_fn from its own copy, as docs/serving.md says: on torch 2.4 one compiled from the same module object
    # recompiled at a size neither graph had seen.
    fn, dyn = torch.compile(lin), torch.compile(copy.deepcopy(lin), dynamic=True)
    report = ik.serving.warmup(fn, shapes=BUCKETS, factory=_make, per_bucket="auto", dynamic_fn=dyn, probes="auto")
    assert all(r.dynamic_ms is not None and r.gain is not None for r in report.buckets)
    router = report.serving_fn
    assert isinstance(router, per_bucket.BucketRouter)
    assert len(router.own) == sum(r.kept for r in report.buckets)
    assert report.probes and all(p.compiles == [] for p in report.probes)  # unwarmed sizes: dyn's one graph
    assert "own graph ms" in report.table() and report.to_dict()["buckets"][0]["bucket"] == 4
    with ik.serving.no_stalls(on="raise"), ik.record_compiles() as seen:
        for n in [*BUCKETS, 11]:
            torch.testing.assert_close(router(x := _make(n)), lin(x))
    assert seen.compiles == [] and seen.attestations == []


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"shapes": [8, 4]}, r"shapes=\[8, 4\] is invalid .*strictly increasing"),
        ({"shapes": [4, 4]}, r"shapes=\[4, 4\] is invalid"),
        ({"shapes": [0, 4]}, r"shapes=\[0, 4\] is invalid .*positive ints"),
        ({"per_bucket": "yes"}, r"per_bucket='yes' is invalid .*allowed False, True"),
        ({"per_bucket": "auto"}, r"per_bucket='auto' needs dynamic_fn"),
        ({"per_bucket": False, "dynamic_fn": abs}, r"dynamic_fn=\.\.\. needs per_bucket"),
        ({"probes": [6]}, r"probes=\[6\] with per_bucket=True needs dynamic_fn"),
        ({"calls_per_input": 1}, r"needs calls_per_input >= 2"),
    ],
)
def test_bad_input_is_refused_before_anything_is_called(kwargs, match):
    calls = []
    kwargs = {"shapes": BUCKETS, "per_bucket": True, **kwargs}
    with pytest.raises(ik.errors.InvalidKnobValue, match=match):
        ik.serving.warmup(calls.append, factory=_make, **kwargs)
    assert calls == []


def test_per_bucket_needs_shapes():
    with pytest.raises(ik.errors.InvalidKnobValue, match="per_bucket=True needs shapes"):
        ik.serving.warmup(abs, inputs=[torch.ones(2)], per_bucket=True)


def test_the_recompile_limit_key_is_the_installed_releases():
    import torch._dynamo.config as cfg

    key = ik.ext.torch_compat.installed().recompile_limit_key
    before = getattr(cfg, key)
    with per_bucket.graph_per_bucket(5):
        assert getattr(cfg, key) == before + 5 and cfg.cache_size_limit == before + 5
        assert cfg.automatic_dynamic_shapes is False
    assert getattr(cfg, key) == before and cfg.automatic_dynamic_shapes is True


def test_before_2_12_a_second_thread_is_refused_and_nothing_is_left_set(monkeypatch):
    """Dynamo's config is process-global before torch 2.12: two per-bucket warm-ups at once would leave the first
    one's values set for the process when they leave in the other order, so the second is refused, writing nothing."""
    import threading

    import torch._dynamo.config as cfg

    patches = torch_compat.installed()
    if patches.config_is_thread_local:
        monkeypatch.setattr(type(patches), "config_is_thread_local", False)  # model torch < 2.12
    key = patches.recompile_limit_key
    before = (getattr(cfg, key), cfg.automatic_dynamic_shapes)
    inside, leave, errors = threading.Event(), threading.Event(), []

    def other() -> None:
        try:
            with per_bucket.graph_per_bucket(3):
                inside.set()
                leave.wait(30)
        except BaseException as err:  # noqa: BLE001 - reported below
            errors.append(err)

    thread = threading.Thread(target=other)
    thread.start()
    try:
        assert inside.wait(30), errors
        with pytest.raises(ik.errors.ConcurrentKnobsError, match="Dynamo's config is process-global"):
            with per_bucket.graph_per_bucket(5):
                pytest.fail("a second owner entered")
    finally:
        leave.set()
        thread.join(30)
    assert not errors
    assert (getattr(cfg, key), cfg.automatic_dynamic_shapes) == before
    with per_bucket.graph_per_bucket(5):  # released: the next warm-up enters
        assert getattr(cfg, key) == before[0] + 5
    assert (getattr(cfg, key), cfg.automatic_dynamic_shapes) == before


def _per_bucket_state() -> tuple:
    """What the per-bucket block changes, as torch stores it (``unset`` included), and who holds Dynamo's config."""
    import torch._dynamo.config as cfg

    from inductor_knobs.core import changes

    patches = torch_compat.installed()
    key = patches.recompile_limit_key
    holders = [owner for owner, _ in changes._HOLDERS.get(per_bucket.DYNAMO_CONFIG, [])]
    return patches.read_override(cfg, key), patches.read_override(cfg, "automatic_dynamic_shapes"), holders


@pytest.mark.parametrize("process_global", [True, False], ids=["modelled torch < 2.12", "this torch"])
def test_the_block_puts_everything_back_when_its_body_raises_and_when_nested(monkeypatch, process_global):
    import torch._dynamo.config as cfg

    patches = torch_compat.installed()
    if process_global and patches.config_is_thread_local:
        monkeypatch.setattr(type(patches), "config_is_thread_local", False)
    key = patches.recompile_limit_key
    before, limit = _per_bucket_state(), getattr(cfg, key)
    with pytest.raises(ZeroDivisionError):
        with per_bucket.graph_per_bucket(3):
            raise ZeroDivisionError("the body fails")
    assert _per_bucket_state() == before
    with per_bucket.graph_per_bucket(3):  # the same thread nests: each adds its count, each puts back its own
        with per_bucket.graph_per_bucket(5):
            assert getattr(cfg, key) == limit + 8 and cfg.automatic_dynamic_shapes is False
        assert getattr(cfg, key) == limit + 3
    assert _per_bucket_state() == before


@pytest.mark.parametrize("process_global", [True, False], ids=["modelled torch < 2.12", "this torch"])
def test_an_interrupt_at_any_line_of_the_blocks_enter_or_exit_leaves_dynamo_exact(monkeypatch, process_global):
    """KeyboardInterrupt at every line event of the enter and of the exit (tests/interrupting.py), each in a fresh
    thread: once the exit has run again, Dynamo's config is as before and nobody holds it."""
    from interrupting import interrupt_every_line

    patches = torch_compat.installed()
    if process_global and patches.config_is_thread_local:
        monkeypatch.setattr(type(patches), "config_is_thread_local", False)
    summary = interrupt_every_line(lambda: per_bucket.graph_per_bucket(3), _per_bucket_state, "graph_per_bucket")
    assert "lines of enter" in summary


def test_from_2_12_two_threads_warm_per_bucket_at_once_each_with_its_own_limit():
    import threading

    import torch._dynamo.config as cfg

    patches = torch_compat.installed()
    if not patches.config_is_thread_local:
        pytest.skip(f"Dynamo's config is process-global on torch {torch.__version__} (per thread from 2.12)")
    key = patches.recompile_limit_key
    before = getattr(cfg, key)
    inside, leave, seen = threading.Event(), threading.Event(), []

    def other() -> None:
        with per_bucket.graph_per_bucket(3):
            inside.set()
            leave.wait(30)
            seen.append(getattr(cfg, key))

    thread = threading.Thread(target=other)
    thread.start()
    try:
        assert inside.wait(30)
        with per_bucket.graph_per_bucket(5):
            assert getattr(cfg, key) == before + 5
    finally:
        leave.set()
        thread.join(30)
    assert seen == [before + 3] and getattr(cfg, key) == before


def test_the_benchmark_runs_on_cpu_with_smoke(tmp_path):
    import json
    import subprocess
    import sys
    from pathlib import Path

    script = Path(__file__).parent.parent / "bench" / "per_bucket.py"
    done = subprocess.run([sys.executable, str(script), "--out", str(tmp_path), "--smoke"], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr[-2000:]
    result = json.loads((tmp_path / "per_bucket.json").read_text())
    assert [r["size"] for r in result["rows"]] == [4, 8, 16] and result["traffic_compiles"] == 0
    assert "| 16 |" in done.stdout and "(c) per-bucket ms" in done.stdout
