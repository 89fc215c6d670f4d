"""ik.serving.no_stalls as a threaded server runs it for days (issue 30): any thread, bounded memory, honest causes.

No test reads a real clock: the guard's clocks are the ``fake_clock`` fixture's, moved by the served
function itself.
"""

from __future__ import annotations

import threading
import tracemalloc
import warnings
from concurrent.futures import ThreadPoolExecutor

import pytest
import torch

import inductor_knobs as ik
from inductor_knobs.core import events
from inductor_knobs.core.events import RuntimeEvent
from inductor_knobs.errors import InvalidKnobValue
from inductor_knobs.serving import stalls

CPU_CALL = ((torch.float32, torch.Size([1, 4]), torch.device("cpu")),)


def _warm(guard, fn_input, calls=10):
    for _ in range(calls):
        guard(fn_input)


def test_a_compile_on_a_worker_thread_is_named_not_unattributed(fake_clock):
    """Before: the hooks lived in the entering thread's ContextVar, so a 1.3 s recompile on a worker thread
    was 'thread_off_cpu' or unattributed."""
    slow = threading.Event()

    def served(x):
        if slow.is_set():  # what Dynamo's hook publishes on the thread that compiles
            started = fake_clock.now()
            fake_clock.spend(1.3)
            events.publish("runtime", RuntimeEvent("dynamo_compile", 1.3, "a recompile on the worker", started))
        fake_clock.spend(0.001)
        return x

    guard = ik.serving.no_stalls(served, on="record", synchronize=False)
    with guard:  # entered on the main thread
        _warm(guard, torch.ones(1, 4))
        slow.set()
        with ThreadPoolExecutor(1) as pool:
            pool.submit(guard, torch.ones(1, 4)).result()
    assert guard.stall_count == 1
    assert guard.stalls[0].primary == "dynamo_compile" and guard.stalls[0].attributed


def test_calls_from_many_threads_are_each_counted_and_judged(fake_clock):
    def served(x):  # takes no time on the fake clock (one counter for every thread: a spend would land in all calls)
        return x * 2

    guard = ik.serving.no_stalls(served, on="record", synchronize=False)
    with guard, ThreadPoolExecutor(8) as pool:
        results = list(pool.map(lambda i: guard(torch.full((1, 4), float(i))), range(800)))
    assert all(torch.equal(r, torch.full((1, 4), 2.0 * i)) for i, r in enumerate(results))
    assert guard.calls == 800 and guard.report().calls == 800
    assert guard.stall_count == 0


def test_guards_called_per_call_from_several_threads_do_not_collide(fake_clock):
    """Outside ``with guard`` each call holds the hooks for itself; two threads at once must not refuse each other."""
    barrier = threading.Barrier(4)

    def served(x):
        barrier.wait(timeout=30)
        return x

    guard = ik.serving.no_stalls(served, on="record", synchronize=False)
    with ThreadPoolExecutor(4) as pool:
        list(pool.map(lambda _: guard(torch.ones(1, 4)), range(4)))
    assert guard.calls == 4
    assert not events.listeners()


def test_memory_per_call_is_zero(fake_clock):
    """Before: every call's seconds were appended to guard.seconds (+6.4 MB per 200k calls)."""

    def served(x):
        fake_clock.spend(0.001)
        return x

    guard = ik.serving.no_stalls(served, on="record", synchronize=False, history=100)
    x = torch.ones(1, 4)
    with guard:
        _warm(guard, x, 1000)
        tracemalloc.start()
        try:
            for _ in range(50_000):
                guard(x)
            first, _ = tracemalloc.get_traced_memory()
            for _ in range(200_000):
                guard(x)
            second, _ = tracemalloc.get_traced_memory()
        finally:
            tracemalloc.stop()
    assert guard.calls == 251_000 and len(guard.seconds) == 100
    assert second - first <= 16 * 1024, f"{second - first} bytes more after 200,000 more calls"


def test_per_shape_memory_is_capped_and_small(fake_clock):
    def served(x):
        fake_clock.spend(0.001)
        return x

    guard = ik.serving.no_stalls(served, on="record", synchronize=False, profile="off", max_shapes=300)
    with guard:
        tracemalloc.start()
        try:
            before, _ = tracemalloc.get_traced_memory()
            for n in range(1, 301):  # 300 distinct shapes, each called enough to have a median and a limit
                x = torch.ones(1, n)
                for _ in range(6):
                    guard(x)
            grown, _ = tracemalloc.get_traced_memory()
        finally:
            tracemalloc.stop()
        for n in range(301, 401):  # past the cap: the least recently judged shapes are forgotten
            guard(torch.ones(1, n))
    per_shape = (grown - before) / 300
    assert per_shape <= 1024, f"{per_shape:.0f} bytes per shape"
    assert len(guard.seen_shapes()) == 300
    assert stalls.input_signature((torch.ones(1, 400),), {}) in guard.seen_shapes()
    assert stalls.input_signature((torch.ones(1, 1),), {}) not in guard.seen_shapes()


@pytest.mark.parametrize(
    ("name", "value", "allowed"),
    [("max_shapes", 0, "an int >= 1"), ("max_shapes", -5, "an int >= 1"), ("history", 0, "an int >= 1 or None")],
)
def test_a_cap_below_one_is_refused(name, value, allowed):
    with pytest.raises(InvalidKnobValue, match=rf"no_stalls\({name}={value}\) is invalid on torch .*: allowed {allowed}"):
        ik.serving.no_stalls(lambda: None, **{name: value})


def test_history_keeps_the_recent_calls_and_the_report_counts_all(fake_clock):
    guard = ik.serving.no_stalls(lambda: fake_clock.spend(0.002), on="record", synchronize=False, history=10)
    for _ in range(50):
        guard()
    report = guard.report()
    assert len(guard.seconds) == 10 and report.calls == 50
    assert report.percentile_ms(50) == pytest.approx(2.0, rel=0.01)  # within the histogram's 1%
    full = ik.serving.no_stalls(lambda: fake_clock.spend(0.002), on="record", synchronize=False, history=None)
    for _ in range(50):
        full()
    assert len(full.seconds) == 50


def test_causes_never_add_up_to_more_than_the_call():
    """Before: off-CPU time inside a compile hook was counted again as thread_off_cpu."""
    guard = ik.serving.no_stalls(lambda: None, on="record", baseline_ms=1.0)
    for _ in range(10):
        guard._off_cpu.add(0.0)
    hook = RuntimeEvent("dynamo_compile", 0.9, "a compile waiting on its workers", started=1.0)
    stall = guard._judge(1.0, [hook], None, False, False, CPU_CALL, off_cpu=0.8)
    assert stall is not None
    assert sum(c.seconds for c in stall.causes) <= stall.seconds + 1e-12, stall.describe()


def test_warnings_are_one_line_a_stall_with_a_summary(fake_clock):
    """Before: four-line warnings, 139 in 200 calls on a busy machine, and '(usually -0.00 ms)'."""
    guard = ik.serving.no_stalls(lambda: None, on="warn", baseline_ms=1.0)
    event = RuntimeEvent("runtime_benchmark", 0.2, "triton_red_fused_0", started=1.0)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        for _ in range(stalls.SUMMARY_EVERY):
            guard.latencies.add(0.25)
            guard._react(guard._judge(0.25, [event], None, False, False, CPU_CALL))
    messages = [str(w.message) for w in caught if issubclass(w.category, ik.serving.StallWarning)]
    assert all("\n" not in m for m in messages)
    assert len(messages) == stalls.SUMMARY_EVERY + 1
    assert messages[-1].startswith(f"{stalls.SUMMARY_EVERY} stalls in") and "runtime_benchmark" in messages[-1]
    assert not any("-0.00" in m for m in messages)


def test_no_autotune_speaks_the_same_vocabulary():
    assert ik.serving.no_autotune(on="record").on == "record"
    with pytest.warns(DeprecationWarning, match="on='record'"):
        assert ik.serving.no_autotune(on="log").on == "record"


def test_a_slow_call_that_overlapped_other_threads_calls_is_named_so():
    """Before (H100, 4 threads): such calls were named gpu_slower, host_slower or unattributed."""
    guard = ik.serving.no_stalls(lambda: None, on="record", baseline_ms=1.0)
    stall = guard._judge(0.005, [], None, False, False, CPU_CALL, off_cpu=None, host_seconds=0.001, overlapped=True)
    assert stall is not None and stall.primary == "concurrent_calls" and stall.attributed
    alone = guard._judge(0.005, [], None, False, False, CPU_CALL, off_cpu=None, host_seconds=0.001, overlapped=False)
    assert alone is not None and alone.primary == "gpu_slower"
