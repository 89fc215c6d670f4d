"""ik.serving.no_stalls on CPU: every cause it names, from torch's own hooks (real, or fakes at the hooked path)."""

from __future__ import annotations

import gc
import types
import warnings

import pytest
import torch
import torch._dynamo

import inductor_knobs as ik
from inductor_knobs.core import observers, torch_compat
from inductor_knobs.core.events import RuntimeEvent
from inductor_knobs.serving import attribution, first_call_costs, sampled_profiler, signature, stalls


class FakeAutotuner:
    """Stands in for Inductor's CachingAutotuner / CUDAGraphTreeManager at the paths the hooks wrap."""

    fn = types.SimpleNamespace(__name__="triton_poi_fused_add_0")
    clock = None  # the test's FakeClock (the fake_hooks fixture sets it)

    # Each pays a first-call cost of 1 ms on the fake clock, above the 0.1 ms under which a hook's
    # event is not delivered.
    def benchmark_all_configs(self, *args):
        self.clock.spend(0.001)
        return {"config": 0.1}

    def coordinate_descent_tuning(self, *args):
        self.clock.spend(0.001)
        return "best"

    def precompile(self, *args):
        # a real compile, as Triton's listener counts it (Triton 3.4+, torch 2.8+): without it, it is a triton_load
        first_call_costs._THREAD.triton_compiled += 1
        self.clock.spend(0.001)

    def record_function(self, *args):
        self.clock.spend(0.001)
        return "graph"

    def eligibility_check(self, *args):  # what torch < 2.9 calls on every launch of a template kernel
        return "launcher"


HOOKS = {
    "runtime_benchmark": "benchmark_all_configs",
    "coordinate_descent": "coordinate_descent_tuning",
    "triton_compile": "precompile",
    "cudagraph_recording": "record_function",
}


@pytest.fixture
def fake_hooks(monkeypatch, fake_clock):
    """Point the patch module's runtime hooks at FakeAutotuner (installed when the first observer enters)."""
    monkeypatch.setattr(FakeAutotuner, "clock", fake_clock)
    patches = type(torch_compat.installed())
    hooks = tuple((kind, f"{__name__}:FakeAutotuner.{method}") for kind, method in HOOKS.items())
    monkeypatch.setattr(patches, "runtime_cost_hooks", hooks)
    assert not observers.hooks_installed()
    yield
    assert not observers.hooks_installed()


@pytest.mark.parametrize("kind", sorted(HOOKS))
def test_each_runtime_hook_is_a_named_cause(fake_hooks, kind):
    fake = FakeAutotuner()
    original = FakeAutotuner.__dict__[HOOKS[kind]]
    guard = ik.serving.no_stalls(lambda: getattr(fake, HOOKS[kind])(), on="record", min_calls=10**6)
    guard()
    # No threshold is known yet, so a call is a stall when a hook names a cost: deterministic, no clock.
    (stall,) = guard.stalls
    assert [c.kind for c in stall.causes] == [kind] and stall.causes[0].seconds == pytest.approx(0.001)
    assert stall.attributed and stall.causes[0].started is not None
    if kind != "cudagraph_recording":
        assert stall.causes[0].detail == "triton_poi_fused_add_0"
    # The hook is gone after the call: the class holds its own function again, by identity.
    assert FakeAutotuner.__dict__[HOOKS[kind]] is original


def test_a_missing_hook_warns_and_doctor_lists_it(monkeypatch, capsys):
    patches = type(torch_compat.installed())
    monkeypatch.setattr(patches, "runtime_cost_hooks", (("runtime_benchmark", f"{__name__}:FakeAutotuner.gone"),))
    with pytest.warns(ik.errors.DriftWarning, match="FakeAutotuner.gone does not exist"):
        ik.serving.no_stalls(lambda: None, on="record")()
    assert first_call_costs.runtime_hook_status() == [("runtime_benchmark", f"{__name__}.FakeAutotuner.gone", False)]
    from inductor_knobs import cli

    gone = {"cause": "runtime_benchmark", "hook": f"{__name__}.FakeAutotuner.gone", "available": False}
    assert gone in first_call_costs.doctor_section()["hooks"]
    assert cli.main(["doctor"]) == cli.OK  # the CLI's doctor report includes the serving section
    (line,) = [line for line in capsys.readouterr().out.splitlines() if "FakeAutotuner.gone" in line]
    assert line.split()[:2] == ["runtime_benchmark", f"{__name__}.FakeAutotuner.gone:"] and "MISSING on this torch" in line


def _names_recompile_reasons() -> bool:
    """torch 2.4 has no side-effect-free guard-failure reader (patches/hooks.py: recompile_reasons_of)."""
    from packaging.version import Version

    return Version(torch_compat.release_of(torch.__version__)) >= Version("2.5")


def test_a_recompile_is_a_stall_named_with_dynamos_reason(fresh_inductor, monkeypatch):
    # Before min_calls a call is a stall only by its hook events: a young collection preempted on a busy
    # machine (over 1 ms of wall time) would make one of the warm calls a stall.  gc is not what this tests.
    monkeypatch.setattr(first_call_costs, "MIN_GC_SECONDS", float("inf"))
    # Dynamo's compile and its guard failure are what is named: the eager backend spares a C++ build per compile.
    compiled = torch.compile(lambda x: (x @ x.T).relu(), backend="eager")
    guard = ik.serving.no_stalls(compiled, on="record", profile="off")
    with guard:
        for n in (8, 8, 8, 8, 8, 8, 16):
            guard(torch.randn(n, 4))
    first, recompile = guard.stalls
    assert first.index == 0 and first.primary == "dynamo_compile" and first.new_shape
    assert recompile.index == 6 and recompile.primary == "dynamo_compile"
    if _names_recompile_reasons():
        assert "expected 8, actual 16" in recompile.causes[0].detail
    assert recompile.inputs == ["torch.float32[16, 4]"]
    assert recompile.baseline_seconds is not None  # the median of the five calls at the seen shape


def test_the_profiler_stops_when_dynamo_starts_compiling(fresh_inductor, monkeypatch):
    """A profiled call that compiles must not record the compile (millions of events): it stops at the compile's start."""
    stopped_while_compiling = []
    real_stop = stalls.no_stalls._stop_profiler

    def spy(self):
        if getattr(self._running, "profiler", None) is not None:
            stopped_while_compiling.append(bool(observers._THREAD.compiling))
        return real_stop(self)

    monkeypatch.setattr(stalls.no_stalls, "_stop_profiler", spy)
    guard = ik.serving.no_stalls(torch.compile(lambda x: x.sin() + 1, backend="eager"), on="record", profile="all")
    guard(torch.randn(5))
    assert stopped_while_compiling == [True]
    assert not torch.autograd._profiler_enabled()
    assert guard.stalls[0].profiled and guard.stalls[0].primary == "dynamo_compile"


def _profile(*ops):
    events = [types.SimpleNamespace(name=n, self_cpu_time_total=us, input_shapes=shapes) for n, us, shapes in ops]
    return types.SimpleNamespace(events=lambda: events)


CUDA_CALL = ((torch.int64, (1, 901), "cuda"),)


def test_profiled_per_shape_ops_are_named_on_cuda_calls():
    guard = ik.serving.no_stalls(lambda: None, on="record", baseline_ms=1.0)
    profile = _profile(
        ("aten::_cudnn_attention_forward", 44_000, [[1, 8, 901, 128]]),
        ("aten::mm", 5_000, [[901, 1024], [1024, 1024]]),
        ("aten::add", 50, []),
    )
    guard._judge(0.060, [], profile, True, True, CUDA_CALL)
    (stall,) = guard.stalls
    assert [c.kind for c in stall.causes] == ["cudnn_sdpa_plan", "cublas_first_call"]
    assert stall.attributed and stall.inputs == ["torch.int64[1, 901]"]
    assert "[[1, 8, 901, 128]]" in stall.causes[0].detail
    assert ik.serving.no_stalls is stalls.no_stalls


def test_profiled_ops_of_a_cpu_call_are_not_first_call_costs():
    """On the CPU an op's self time is its computation: nothing is attributed to it, the time stays unattributed."""
    guard = ik.serving.no_stalls(lambda: None, on="record", baseline_ms=1.0)
    guard._judge(0.060, [], _profile(("aten::mm", 55_000, [])), True, True, ((torch.float32, (4, 4), "cpu"),))
    assert [c.kind for c in guard.stalls[0].causes] == ["unattributed"]


def test_unattributed_time_is_reported_and_a_seen_shape_is_still_not_profiled():
    guard = ik.serving.no_stalls(lambda: None, on="record", baseline_ms=1.0)
    guard._judge(0.050, [], None, False, False, CUDA_CALL)
    (stall,) = guard.stalls
    assert not stall.attributed and stall.primary == "unattributed"
    assert stall.causes[0].seconds == pytest.approx(0.049)
    # Profiling the next call at a seen shape would make that call slow in turn (H100): never.
    assert not guard._wants_profile(new=False) and guard._wants_profile(new=True)
    assert guard.report().to_dict()["unattributed"] == 1


def test_nested_hook_events_are_counted_once():
    outer = RuntimeEvent("dynamo_compile", 0.040, "", started=100.0)
    inner = RuntimeEvent("triton_compile", 0.030, "", started=100.005)
    assert attribution._covered([outer, inner]) == pytest.approx(0.040)
    guard = ik.serving.no_stalls(lambda: None, on="record", baseline_ms=1.0)
    guard._judge(0.045, [inner, outer], None, True, False, CUDA_CALL)
    assert guard.stalls[0].attributed  # 40 of the 44 ms over the baseline


def test_after_eight_fast_new_shapes_new_shapes_are_not_profiled():
    guard = ik.serving.no_stalls(lambda: None, on="record", baseline_ms=10.0)
    for _ in range(sampled_profiler.QUIET_AFTER):
        assert guard._wants_profile(new=True)
        guard._judge(0.005, [], None, True, True, CUDA_CALL)
    assert not guard._wants_profile(new=True)
    guard._judge(0.5, [], None, True, False, CUDA_CALL)  # an unexplained stall: profile again
    assert guard._wants_profile(new=True)


def test_reactions():
    event = RuntimeEvent("runtime_benchmark", 0.2, "triton_red_fused_0", started=1.0)
    raising = ik.serving.no_stalls(lambda: None, baseline_ms=1.0)
    with pytest.raises(ik.serving.StallDuringServing, match="runtime_benchmark") as caught:
        raising._react(raising._judge(0.25, [event], None, True, False, CUDA_CALL))
    assert caught.value.stall.primary == "runtime_benchmark"
    warning = ik.serving.no_stalls(lambda: None, on="warn", baseline_ms=1.0)
    with pytest.warns(ik.serving.StallWarning, match=r"took 250.00 ms \(steady 1.00 ms\): runtime_benchmark 200.00 ms$"):
        warning._react(warning._judge(0.25, [event], None, True, False, CUDA_CALL))  # one line a stall
    quiet = ik.serving.no_stalls(lambda: None, on="record", baseline_ms=1.0)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        quiet._react(quiet._judge(0.25, [event], None, True, False, CUDA_CALL))
    assert len(quiet.stalls) == 1


def test_a_fast_call_and_timer_noise_are_not_stalls():
    guard = ik.serving.no_stalls(lambda: None, on="record", baseline_ms=0.05)
    guard._judge(0.0005, [], None, False, False, CUDA_CALL)  # 10x a 50 us baseline, but only 0.45 ms over it
    assert guard.stalls == []


def test_the_report(fake_clock):
    guard = ik.serving.no_stalls(lambda x: fake_clock.spend(0.001) or x, on="record", synchronize=False)
    for _ in range(3):
        guard(torch.ones(2))
    report = guard.report()
    assert report.seconds == [pytest.approx(0.001)] * 3 and report.stalls == []
    assert report.percentile_ms(50) == pytest.approx(1.0) and "3 calls: p50 1.00 ms" in report.table()
    assert report.to_dict()["calls"] == 3


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"on": "log"}, r"no_stalls\(on='log'\) is invalid on torch .*: allowed raise, warn, record"),
        ({"threshold_ms": -1}, r"threshold_ms=-1\) is invalid on torch .*: allowed a number > 0"),
        ({"threshold_ms": True}, r"threshold_ms=True"),
        ({"factor": 1}, r"factor=1\) is invalid"),
        ({"baseline_ms": 0}, r"baseline_ms=0\)"),
        ({"min_calls": 0}, r"min_calls=0\) is invalid .*an int >= 1"),
        ({"min_excess_ms": -0.5}, r"min_excess_ms=-0.5\)"),
        ({"profile": "sometimes"}, r"profile='sometimes'\) is invalid .*new-shapes, all, off"),
        ({"synchronize": 1}, r"synchronize=1\)"),
        ({"fn": 3}, r"fn=3\) is invalid .*a callable"),
    ],
)
def test_bad_arguments(kwargs, match):
    with pytest.raises(ik.errors.InvalidKnobValue, match=match):
        ik.serving.no_stalls(**kwargs)
    assert not observers.hooks_installed()


def test_a_guard_without_a_callable_says_how_to_use_it():
    guard = ik.serving.no_stalls(on="record")
    with pytest.raises(ik.KnobsError, match="wrap"):
        guard(1)
    assert guard.wrap(lambda x: x + 1)(1) == 2 and len(guard.seconds) == 1


def test_the_guard_is_timed_by_hooks_that_cost_nothing_when_idle(fake_hooks):
    """Outside a guard the hooked methods are torch's own objects; inside, a wrapper passes calls through."""
    original = FakeAutotuner.__dict__["precompile"]
    with ik.serving.no_stalls(on="record") as guard:
        assert FakeAutotuner.__dict__["precompile"] is not original
        assert FakeAutotuner().precompile() is None  # no guarded call running: passes through
        assert guard.stalls == []
    assert FakeAutotuner.__dict__["precompile"] is original


def test_time_of_a_call_includes_what_it_waits_for(fake_clock):
    guard = ik.serving.no_stalls(lambda: fake_clock.spend(0.002), on="record", synchronize=False)
    guard()
    assert guard.seconds == [pytest.approx(0.002)]


def test_an_instant_hook_call_is_not_a_cause(monkeypatch, fake_clock):
    """torch < 2.9 calls coordinate_descent_tuning on every template launch; those calls name nothing.

    On the fake clock the hooked call takes no time at all (a real one preempted on a busy machine could
    pass 0.1 ms); the served call around it takes 1 ms.
    """
    patches = type(torch_compat.installed())
    monkeypatch.setattr(patches, "runtime_cost_hooks", (("coordinate_descent", f"{__name__}:FakeAutotuner.eligibility_check"),))
    fake = FakeAutotuner()
    guard = ik.serving.no_stalls(lambda: fake_clock.spend(0.001) or fake.eligibility_check(), on="record", min_calls=10**6)
    guard()
    assert guard.stalls == [] and guard.last_causes == []


def test_the_descent_hook_is_the_descent_itself_on_this_torch():
    """From 2.9 the public method is a per-launch eligibility check; the hook must sit on the inner one."""
    release = torch_compat.release_of(torch.__version__)
    paths = dict(torch_compat.installed().runtime_hooks(release))
    inner = ":CachingAutotuner._coordinate_descent_tuning" in paths["coordinate_descent"]
    from packaging.version import Version

    assert inner == (Version(release) >= Version("2.9"))
    assert all(available for _, _, available in first_call_costs.runtime_hook_status()), first_call_costs.runtime_hook_status()
    assert dict(torch_compat.installed().runtime_hooks("2.8"))["coordinate_descent"].endswith(".coordinate_descent_tuning")


def _collect_a_full_heap():
    """A full collection over 200,000 tracked objects: well over the 1 ms under which gc is not named."""
    keep = [[i] for i in range(200_000)]
    gc.collect()
    return len(keep)


def test_a_garbage_collection_inside_a_call_is_named_python_gc():
    guard = ik.serving.no_stalls(_collect_a_full_heap, on="record", min_calls=10**6, profile="off")
    guard()
    (stall,) = guard.stalls
    # gc.collect() is one; allocating the objects may trigger automatic ones too
    assert {c.kind for c in stall.causes} == {"python_gc"}
    assert any("generation 2 collection" in c.detail for c in stall.causes)
    assert _gc_callback_count() == 0  # the callback left gc.callbacks with the call


def _gc_callback_count():
    return sum(getattr(cb, "__name__", "") == "_gc_callback" for cb in gc.callbacks)


def test_warmup_report_seeds_the_guard_with_warmed_shapes_and_their_times(monkeypatch):
    fn = torch.compile(lambda x: x * 2, backend="eager", dynamic=True)
    report = ik.serving.warmup(fn, shapes=[8, 16], factory=torch.ones, probes=None)
    profiled = []
    real_start = stalls.no_stalls._start_profiler
    monkeypatch.setattr(stalls.no_stalls, "_start_profiler", lambda self: profiled.append(1) or real_start(self))
    guard = ik.serving.no_stalls(fn, on="record", warmup=report)
    assert set(report.shape_seconds) == set(report.signatures) and len(report.signatures) == 2
    (sig8,) = [s for s in report.signatures if s[0][1] == (8,)]
    assert guard._baseline(sig8) == report.shape_seconds[sig8]  # each warmed shape its own steady state
    guard(torch.ones(8))
    guard(torch.ones(16))
    assert profiled == []  # warmed shapes are not new: no profiler
    guard(torch.ones(24))
    assert profiled == [1]  # a shape warm-up never met is profiled


def test_warmup_argument_must_be_a_warmup_report():
    with pytest.raises(ik.errors.InvalidKnobValue, match=r"no_stalls\(warmup=3\) is invalid on torch .*ik\.serving\.warmup"):
        ik.serving.no_stalls(lambda: None, warmup=3)


def test_a_collection_during_warmup_adds_the_gc_freeze_fix():
    calls = []

    def fn(x):
        if not calls:
            _collect_a_full_heap()
        calls.append(1)
        return x

    report = ik.serving.warmup(fn, shapes=[8], factory=torch.ones, probes=None)
    assert any("gc.freeze()" in fix for fix in report.fixes)
    assert any(c.kind == "python_gc" for c in report.steps[0].causes)


def test_a_thread_kept_off_the_cpu_is_named_thread_off_cpu(fake_clock):
    """Another thread holding the GIL (or the OS) keeps the serving thread off the CPU: its wall time passes, its CPU time not.

    The fake clock plays that call: 30 ms of wall time, 25 of them off the CPU; the steady call takes 0.1 ms on the CPU.
    """

    def served(blocked):
        fake_clock.spend(0.030, off_cpu=0.025) if blocked else fake_clock.spend(0.0001)

    def stall_off_the_cpu():
        guard(True)
        return {c.kind: c.seconds for c in guard.stalls[-1].causes}

    guard = ik.serving.no_stalls(served, on="record", baseline_ms=0.05, min_excess_ms=0.0, profile="off")
    for _ in range(10):
        guard(False)
    assert guard.stalls == []
    # At a warm shape the thread clock is off until a stall needs it: the first one is only host time.
    reads = fake_clock.thread_reads
    assert stall_off_the_cpu().keys() == {"host_slower"}, guard.stalls[-1].describe()
    assert fake_clock.thread_reads == reads
    for _ in range(10):
        guard(False)
    kinds = stall_off_the_cpu()
    assert kinds.keys() == {"thread_off_cpu", "host_slower"}, guard.stalls[-1].describe()
    assert kinds["thread_off_cpu"] == pytest.approx(0.025)  # the usual off-CPU time of a steady call is 0
    assert kinds["host_slower"] == pytest.approx(0.030 - 0.00005 - 0.025)  # the rest beyond the steady call


def test_a_long_input_is_not_a_stall_when_its_shape_is_just_slower():
    """BERT at 2048 tokens takes 20x its 128-token time: per-shape medians, not one baseline."""
    guard = ik.serving.no_stalls(lambda: None, on="record", min_calls=4)
    short, long = (torch.int64, (1, 128), "cuda"), (torch.int64, (1, 2048), "cuda")
    for _ in range(3):
        guard._judge(0.002, [], None, False, False, (short,))
        guard._judge(0.040, [], None, False, False, (long,))
    guard._judge(0.041, [], None, False, False, (long,))  # its own median is 40 ms
    guard._judge(0.045, [], None, True, False, ((torch.int64, (1, 1500), "cuda"),))  # new: vs the slowest shape
    assert guard.stalls == []
    guard._judge(0.010, [], None, False, False, (short,))  # 5x the 128-token median
    assert [s.inputs for s in guard.stalls] == [["torch.int64[1, 128]"]]


def test_a_warm_shape_is_judged_only_when_slow_and_its_median_still_moves(monkeypatch, fake_clock):
    """The fast path: calls below a warm shape's limit are recorded, not judged; a slow one is a stall."""
    delay = {"s": 0.002}

    def served(x):
        fake_clock.spend(delay["s"])
        return x

    guard = ik.serving.no_stalls(served, on="record", min_excess_ms=0.0, profile="off")
    x = torch.ones(2, 3)
    judged = []
    real_judge = guard._judge
    monkeypatch.setattr(guard, "_judge", lambda *a, **k: (judged.append(a[0]), real_judge(*a, **k)))
    with guard:
        for _ in range(guard.min_calls + 1):
            guard(x)
        assert any(s.limit is not None for s in guard._shapes.values()), "a warm shape with a steady state has a limit"
        before = len(judged)
        for _ in range(2 * stalls.SAMPLE_EVERY):
            guard(x)
        assert len(judged) == before, "fast calls at a warm shape are not judged one by one"
        assert len(guard.seconds) == guard.min_calls + 1 + 2 * stalls.SAMPLE_EVERY
        assert len(guard._shapes[stalls.input_signature((x,), {})].median) > guard.min_calls, "sampled into the median"
        delay["s"] = 0.05  # 25x the steady state, at the same shape
        guard(x)
    assert len(judged) == before + 1 and len(guard.stalls) == 1
    assert guard.stalls[0].baseline_seconds == pytest.approx(0.002) and guard.stalls[0].seconds == pytest.approx(0.05)


def test_signature_keys_tensors_by_dtype_shape_and_device_and_others_by_type():
    x = torch.ones(2, 3, dtype=torch.float16)
    key = signature.input_signature((x, 7), {"mask": x})
    part = (torch.float16, (2, 3), torch.device("cpu"))
    assert key == (part, int, ("mask", part))
    assert signature.input_signature((x,), {}) == signature.input_signature((torch.zeros(2, 3, dtype=torch.float16),), {})
    assert signature.input_signature((x,), {}) != signature.input_signature((x.float(),), {})
    assert signature.describe_inputs(signature.input_signature((x,), {"mask": x})) == [
        "torch.float16[2, 3]",
        "mask=torch.float16[2, 3]",
    ]
    assert not signature.on_cuda(key)
    assert stalls._cuda_synchronize() is None or torch.cuda.is_initialized()


def test_a_stall_at_a_warm_shape_is_split_into_host_part_and_wait_for_the_gpu():
    """The clock when the callable returns (its launches done) splits a warm-shape stall: host or GPU."""
    guard = ik.serving.no_stalls(lambda: None, on="record", baseline_ms=1.0)
    # Host bursts seen on H100 hosts: the call returned 0.3 ms before it ended, 29 ms late.
    guard._judge(0.030, [], None, False, False, CUDA_CALL, None, 0.0297)
    (host,) = guard.stalls[-1].causes
    assert host.kind == "host_slower" and host.seconds == pytest.approx(0.0287)
    assert "returned after 29.70 ms" in host.detail and "not read on this call" in host.detail
    assert guard._clock_warm, "the next stall can tell time off the CPU from a slower CPU"
    # The launches returned at once and the GPU took 20 ms: at least 19 beyond the steady call.
    guard._judge(0.021, [], None, False, False, CUDA_CALL, 0.0, 0.0005)
    (gpu,) = guard.stalls[-1].causes
    assert gpu.kind == "gpu_slower" and gpu.seconds == pytest.approx(0.0195)
    assert "waited 20.50 ms for the GPU" in gpu.detail
    # Another cause already names the host time: host_slower gets only what is left.
    gc_pause = RuntimeEvent("python_gc", 0.020, "generation 2", None)
    guard._judge(0.030, [gc_pause], None, False, False, CUDA_CALL, 0.0, 0.0297)
    kinds = {c.kind: c.seconds for c in guard.stalls[-1].causes}
    assert set(kinds) == {"python_gc", "host_slower"} and kinds["host_slower"] == pytest.approx(0.0087)
    assert all(s.attributed for s in guard.stalls)


def test_a_new_shape_is_not_split_so_an_unnamed_first_call_cost_stays_unattributed():
    """At a shape never seen, extra host time may be a first-call cost no hook names: it is not 'the host ran slower'."""
    guard = ik.serving.no_stalls(lambda: None, on="record", baseline_ms=1.0)
    guard._judge(0.030, [], None, True, False, CUDA_CALL, None, 0.0297)
    assert [c.kind for c in guard.stalls[-1].causes] == ["unattributed"]


def test_the_guard_reads_the_host_part_of_a_real_call(fake_clock):
    """``_timed`` passes the time until the callable returned: with nothing to wait for, all of the call."""
    delay = {"s": 0.0}
    guard = ik.serving.no_stalls(lambda: fake_clock.spend(delay["s"]), on="record", baseline_ms=0.5, profile="off")
    guard()
    guard()
    delay["s"] = 0.03
    guard()
    (stall,) = guard.stalls
    assert stall.index == 2 and stall.primary == "host_slower" and stall.attributed, stall.describe()
    assert "returned after 30.00 ms" in stall.causes[0].detail and guard.last_host_seconds == pytest.approx(0.03)


def test_warm_calls_read_the_thread_clock_only_after_a_stall_needs_it(fake_clock):
    """A system call per request saved: warm-shape calls skip time.thread_time until a stall needs it."""
    assert stalls._thread_clock == fake_clock.thread  # the guard's thread clock (time.thread_time outside tests)
    slow = [False]
    guard = ik.serving.no_stalls(
        lambda: fake_clock.spend(0.02 if slow[0] else 0.0001), on="record", baseline_ms=0.05, profile="off"
    )
    guard()  # not warm yet: judged, both readings
    first = fake_clock.thread_reads
    for _ in range(40):
        guard()
    assert first == 2 and fake_clock.thread_reads == first  # warm and fast: no reading at all
    slow[0] = True
    guard()
    slow[0] = False
    assert [c.kind for c in guard.stalls[-1].causes] == ["host_slower"]
    before = fake_clock.thread_reads
    for _ in range(40):
        guard()
    assert fake_clock.thread_reads - before >= 40  # from now on every call reads it at its start
    assert len(guard.stalls) == 1


def test_a_call_that_raised_does_not_count_as_running_alongside_later_calls(fake_clock):
    """A served call that raises ends there: a later stall is judged by its own causes, not ``concurrent_calls``."""
    calls = {"n": 0}

    def served(x):
        calls["n"] += 1
        if calls["n"] == 1:
            raise ValueError("a bad request")
        fake_clock.spend(0.05 if calls["n"] == 12 else 0.001)
        return x

    guard = ik.serving.no_stalls(served, on="record", synchronize=False, profile="off")
    with guard:
        with pytest.raises(ValueError, match="a bad request"):
            guard(1)
        for _ in range(11):
            guard(1)
    slow = [stall for stall in guard.stalls if stall.seconds > 0.04]
    assert slow, guard.stalls
    assert all(cause.kind != "concurrent_calls" for cause in slow[0].causes), slow[0].causes
