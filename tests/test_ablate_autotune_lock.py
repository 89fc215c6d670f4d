"""One autotune benchmark at a time per GPU (inductor_knobs/ablation/autotune_lock.py).

Checked where it matters: inside torch's own benchmark functions (the lock is held when their bodies
run, seen through a second open file description, as another worker would see it), across processes,
and torch's functions put back by identity afterwards.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import subprocess
import sys
import threading
from collections.abc import Callable

import pytest
import torch

from inductor_knobs.ablation import autotune_lock, explain
from inductor_knobs.core import torch_compat

select_algorithm = pytest.importorskip("torch._inductor.select_algorithm")
triton_heuristics = pytest.importorskip("torch._inductor.runtime.triton_heuristics")

#: The benchmarkers' ``benchmark_gpu`` turns (``autotune_timing_hooks``) are 2.8+; before, the turns are
#: ``CachingAutotuner.bench`` alone (and 2.4 has no ``torch._inductor.runtime.benchmarking``).
needs_timing_hooks = pytest.mark.skipif(
    not torch_compat.installed().autotune_timing_hooks,
    reason=f"torch {torch.__version__} times through CachingAutotuner.bench; the benchmark_gpu turns are 2.8+",
)


def _held_by_someone(path: str) -> bool:
    """Whether another open file description holds the lock (as another worker process would find it)."""
    fd = os.open(path, os.O_RDWR)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        return True
    else:
        fcntl.flock(fd, fcntl.LOCK_UN)
        return False
    finally:
        os.close(fd)


class _Seen(Exception):
    pass


def _choices_that_see(path: str, count: int) -> tuple[list[object], object, list[bool]]:
    """``count`` GEMM candidates whose ``benchmark`` reports whether the lock is held as it runs (appended to
    the returned list), and the autotune arguments torch's ``benchmark_choice`` unpacks for them."""
    seen: list[bool] = []

    class Choice:
        def benchmark(self, *inputs: object, out: torch.Tensor) -> float:
            seen.append(_held_by_someone(path))
            return 1.0

    class Tensors:
        def unpack(self) -> tuple[list[torch.Tensor], torch.Tensor]:
            return [torch.zeros(2)], torch.zeros(2)

    class Args:
        expected = None

        def get_benchmark_tensors(self, extern: bool) -> Tensors:
            return Tensors()

    return [Choice() for _ in range(count)], Args(), seen


def _benchmark_choice_body_sees(path: str) -> bool:
    """Call torch's real ``AlgorithmSelectorCache.benchmark_choice``; its body calls ``choice.benchmark``."""
    (choice,), args, seen = _choices_that_see(path, 1)
    select_algorithm.AlgorithmSelectorCache.benchmark_choice(choice, args)
    return seen[0]


def _benchmark_choices_bodies_see(path: str) -> list[bool]:
    """Call torch's real ``AlgorithmSelectorCache.benchmark_choices`` on three candidates of one shape."""
    choices, args, seen = _choices_that_see(path, 3)
    select_algorithm.AlgorithmSelectorCache.benchmark_choices(choices, args)
    return seen


def _bench_body_sees(path: str) -> bool:
    """Call torch's real ``CachingAutotuner.bench`` on a bare instance; its body asks for the device
    interface, which reports whether the lock is held then."""
    tuner = object.__new__(triton_heuristics.CachingAutotuner)
    tuner.custom_kernel = False
    tuner.inductor_meta = {}

    def device_interface() -> None:
        raise _Seen(_held_by_someone(path))

    tuner.get_device_interface = device_interface  # type: ignore[method-assign]

    class Launcher:
        n_spills = 0  # 2.10 compares it with the spill threshold unguarded (runtime/triton_heuristics.py:870)

    with pytest.raises(_Seen) as seen:
        tuner.bench(Launcher())
    return bool(seen.value.args[0])


def _benchmark_gpu_sees(path: str) -> tuple[list[bool], list[bool]]:
    """Call torch's real ``TritonBenchmarker.benchmark_gpu`` (every GPU timing of Inductor from 2.8, the GEMM
    choices and the epilogue-fusion benchmarks included); its body calls Triton's ``do_bench``, here one that
    reports whether the lock is held and calls the timed callable, which reports it too.

    Returns:
        whether the lock was held at each call of the timed callable, and inside ``do_bench``.
    """
    from torch._inductor.runtime import benchmarking

    timer = benchmarking.TritonBenchmarker()
    calls: list[bool] = []
    bodies: list[bool] = []

    def timed() -> None:
        calls.append(_held_by_someone(path))

    def do_bench(fn: Callable[[], None], return_mode: str = "median") -> float:
        bodies.append(_held_by_someone(path))
        fn()
        return 1.0

    timer.__dict__["triton_do_bench"] = do_bench  # the cached_property's slot: no Triton needed
    timer.benchmark_gpu(timed)
    return calls, bodies


def _originals() -> dict[str, object]:
    found = {"bench": triton_heuristics.CachingAutotuner.__dict__["bench"]}
    try:
        from torch._inductor.runtime import benchmarking
    except ImportError:  # 2.4: no benchmarkers, CachingAutotuner.bench is the only timer
        return found
    for name, cls in (
        ("triton_benchmark_gpu", "TritonBenchmarker"),
        ("inductor_benchmark_gpu", "InductorBenchmarker"),
        ("profiler_benchmark_gpu", "TorchProfilerBenchmarker"),
    ):
        if "benchmark_gpu" in getattr(benchmarking, cls, object).__dict__:
            found[name] = getattr(benchmarking, cls).__dict__["benchmark_gpu"]
    return found


@needs_timing_hooks
def test_every_gpu_timing_is_a_turn_and_its_first_call_runs_before_it(tmp_path, monkeypatch):
    """From 2.8 the turns are the benchmarkers' ``benchmark_gpu`` and nothing around them: a GEMM template's first
    call (which compiles its Triton kernel lazily) runs before the lock is taken, the timing holds it, and a
    GEMM shape's ``benchmark_choices`` (seconds of such compiles on a GPU) holds nothing."""
    patches = torch_compat.installed()
    assert "torch._inductor.runtime.benchmarking:InductorBenchmarker.benchmark_gpu" in patches.autotune_timing_hooks
    assert not any("select_algorithm" in hook for hook in patches.autotune_benchmark_hooks + patches.autotune_timing_hooks)
    monkeypatch.setattr(torch.cuda, "synchronize", lambda *a, **k: None)  # the wait for the GPU after the first call
    path = str(tmp_path / "gpu-0.lock")
    before = _originals()
    with autotune_lock.benchmarks_in_turn(path, clock=lambda: 1980.0) as lock:
        assert lock is not None
        assert not _held_by_someone(path)  # only while a benchmark runs
        calls, bodies = _benchmark_gpu_sees(path)
        assert calls == [False, True] and bodies == [True]  # first call outside the turn, then timed inside it
        assert _benchmark_choices_bodies_see(path) == [False, False, False]
        assert _benchmark_choice_body_sees(path) is False
        assert not _held_by_someone(path)
        assert lock.turns == 1 and lock.clocks == [1980.0] and lock.longest_hold_what.endswith("benchmark_gpu")
        with lock.held():  # a timing nested in this thread's own turn makes no extra first call
            calls, bodies = _benchmark_gpu_sees(path)
        assert calls == [True] and bodies == [True]
        during = _originals()
        # Each of torch's timers is wrapped; from 2.8 CachingAutotuner.bench times through benchmark_gpu, unwrapped.
        assert all(during[name] is not before[name] for name in before if name != "bench")
        assert during["bench"] is before["bench"]
    after = _originals()
    assert all(after[name] is before[name] for name in before)  # torch's own objects again, by identity
    assert _benchmark_gpu_sees(path) == ([False], [False])
    assert not _bench_body_sees(path)


@needs_timing_hooks
def test_a_first_call_that_fails_is_left_to_torchs_own_handling(tmp_path, monkeypatch):
    """A candidate whose first call raises (an invalid launch configuration) is still timed by torch, which meets
    the same error there and handles it (``inf``: the candidate is skipped)."""
    from torch._inductor.runtime import benchmarking

    monkeypatch.setattr(torch.cuda, "synchronize", lambda *a, **k: None)
    timer = benchmarking.TritonBenchmarker()
    seen: list[str] = []

    def timed() -> None:
        seen.append("call")
        raise RuntimeError("invalid configuration argument")

    def do_bench(fn: Callable[[], None], return_mode: str = "median") -> float:
        seen.append("timing")
        fn()
        return 1.0

    timer.__dict__["triton_do_bench"] = do_bench
    path = str(tmp_path / "gpu-0.lock")
    with autotune_lock.benchmarks_in_turn(path) as lock:
        assert lock is not None
        try:
            result = timer.benchmark_gpu(timed)
        except RuntimeError:  # 2.11 TritonBenchmarker lets it rise (to benchmark_choice, which skips the choice)
            result = None
    assert result in (float("inf"), None)  # torch's own handling (2.13: inf, the candidate is skipped)
    assert seen == ["call", "timing", "call"]
    assert lock.turns == 0  # torch's second try (which would compile again) ran outside the turn


@needs_timing_hooks
def test_a_thread_timing_while_another_thread_holds_the_turn_waits_for_it(tmp_path, monkeypatch):
    """``GpuLock.mine`` is per thread: a second thread's timing makes its first call at once, without waiting for
    the turn another thread of the worker holds, and its timing then waits for that turn."""
    from torch._inductor.runtime import benchmarking

    monkeypatch.setattr(torch.cuda, "synchronize", lambda *a, **k: None)
    path = str(tmp_path / "gpu-0.lock")
    calls: list[bool] = []
    bodies: list[bool] = []
    first_called = threading.Event()

    def timed() -> None:
        calls.append(_held_by_someone(path))
        first_called.set()

    def do_bench(fn: Callable[[], None], return_mode: str = "median") -> float:
        bodies.append(_held_by_someone(path))
        fn()
        return 1.0

    timer = benchmarking.TritonBenchmarker()
    timer.__dict__["triton_do_bench"] = do_bench
    with autotune_lock.benchmarks_in_turn(path) as lock:
        assert lock is not None
        other = threading.Thread(target=timer.benchmark_gpu, args=(timed,))
        with lock.held():
            assert lock.mine()
            other.start()
            assert first_called.wait(60)  # its first call ran while this thread held the turn
            assert calls == [True] and bodies == []  # and its timing waits for the turn
        other.join(60)
        assert not other.is_alive() and not lock.mine()
    assert calls == [True, True] and bodies == [True]


def test_no_path_changes_nothing(tmp_path):
    before = _originals()
    with autotune_lock.benchmarks_in_turn(None) as lock:
        assert lock is None
        assert all(_originals()[name] is before[name] for name in before)


def test_nested_benchmarks_take_the_lock_once(tmp_path):
    lock = autotune_lock.GpuLock(str(tmp_path / "l"))
    try:
        with lock.held(), lock.held():
            assert _held_by_someone(lock.path)
        assert not _held_by_someone(lock.path) and lock.turns == 1
    finally:
        lock.close()


def test_a_symlinked_lock_file_is_refused_and_nothing_is_installed(tmp_path):
    target = tmp_path / "elsewhere"
    target.write_text("another user's file")
    link = tmp_path / "gpu-0.lock"
    link.symlink_to(target)
    before = _originals()
    with pytest.raises(OSError), autotune_lock.benchmarks_in_turn(str(link)):
        pass
    assert all(_originals()[name] is before[name] for name in before)
    assert autotune_lock.AUTOTUNE_TURNS.users == 0


#: Another worker: takes the lock, says so, and holds it until its stdin closes.
_HOLDER = """
import sys
from inductor_knobs.ablation.autotune_lock import GpuLock
lock = GpuLock(sys.argv[1])
with lock.held():
    print("held", flush=True)
    sys.stdin.read()
"""


def _other_worker(path: str) -> subprocess.Popen[str]:
    proc = subprocess.Popen([sys.executable, "-c", _HOLDER, path], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    assert proc.stdout is not None and proc.stdout.readline().strip() == "held"
    return proc


def test_a_worker_waits_while_another_process_benchmarks_and_a_dead_one_holds_nothing(tmp_path):
    path = str(tmp_path / "gpu-0.lock")
    other = _other_worker(path)
    try:
        assert _held_by_someone(path)  # the other worker's benchmark: this one would wait
        assert other.stdin is not None
        other.stdin.close()
        assert other.wait(60) == 0
        assert not _held_by_someone(path)
    finally:
        other.kill()
        other.wait()
    # A worker killed while it benchmarks leaves no lock behind (the kernel drops it with the process).
    killed = _other_worker(path)
    killed.kill()
    killed.wait()
    assert not _held_by_someone(path)


def test_the_report_says_the_workers_took_turns():
    runs = [
        {
            "ok": True,
            "index": i,
            "quiet": {"barrier": True, "parallel": 4, "cap": 6, "lanes": 1},
            "autotune_lock_turns": 10,
            "autotune_lock_wait_seconds": 1.5,
        }
        for i in range(2)
    ]
    text = explain.quiet_note({"runs": runs})
    assert "autotuned one benchmark at a time (20 turns in 2 runs, 3.0 s waited in all" in text


def test_a_compiling_worker_takes_turns_through_the_jobs_lock_and_records_them(tmp_path, monkeypatch):
    """The worker's side, in this process: a compiled arm's compile runs under the job's ``gpu_lock`` (the
    record counts the turns: one per GEMM choice benchmarked, which on a CPU build depends on the CPU and
    the release) and torch's functions are its own afterwards."""
    from inductor_knobs import cli
    from inductor_knobs.ablation import build, options, worker

    monkeypatch.syspath_prepend(os.path.dirname(__file__))
    parser = cli.argparse.ArgumentParser()
    options.add_parser(parser.add_subparsers(dest="command"))
    argv = ["ablate", "--device", "cpu", "--workload", "ablation_workload:tiny", "--smoke"]
    argv += ["--arm", "ma:mode=max-autotune-no-cudagraphs"]
    plan = build.build_plan(parser.parse_args(argv))
    job = {**plan.jobs()[0], "gpu_lock": str(tmp_path / "gpu-0.lock")}
    before = _originals()
    record = worker.run(job)
    assert record["ok"], record
    # A CPU's benchmarks go through benchmark_cpu, no GPU timing: no turns (torch 2.11 on the GPU host's CPU
    # autotunes addmm; torch 2.13 on this project's CPU machine autotunes nothing).
    assert record["autotune_lock_turns"] == 0 and record["autotune_lock_held_seconds"] == 0, record
    if record["autotune_observed"]:  # torch 2.4 reports no autotuning (no add_feedback_saver): no counts
        assert record["autotune_choices"] >= record["autotune_benchmarked_ops"], record
    assert all(_originals()[name] is before[name] for name in before)


@needs_timing_hooks
def test_queued_timing_spins_before_each_start_event_and_only_in_the_block(tmp_path, monkeypatch):
    """With ``queue_us`` the start event of every pair Inductor's benchmarker makes first queues a GPU spin of that
    length (in 2 GHz cycles), then records; end events, elapsed times and everything outside the block are torch's."""
    from torch._inductor.runtime import benchmarking

    from inductor_knobs.ablation import queued_timing

    original = benchmarking.InductorBenchmarker.__dict__["get_event_pairs"]
    spins: list[int] = []
    monkeypatch.setattr(torch.cuda, "_sleep", spins.append)

    class Event:
        def __init__(self) -> None:
            self.recorded = 0

        def record(self, stream: object = None) -> None:
            self.recorded += 1

        def elapsed_time(self, end: object) -> float:
            return 0.25

    def pairs(self: object, iters: int, *rest: object) -> list[tuple[Event, Event]]:
        return [(Event(), Event()) for _ in range(iters)]

    monkeypatch.setattr(benchmarking.InductorBenchmarker, "get_event_pairs", pairs)
    timer = benchmarking.InductorBenchmarker.__new__(benchmarking.InductorBenchmarker)
    with autotune_lock.benchmarks_in_turn(None, queue_us=60.0) as lock:
        assert lock is None  # no turns without a lock file, only the queued timing
        made = timer.get_event_pairs(3)
        for start, end in made:
            start.record()
            end.record()
        assert spins == [60 * queued_timing.CYCLES_PER_US] * 3
        assert [start.recorded for start, _ in made] == [1, 1, 1] and all(end.recorded == 1 for _, end in made)
        assert made[0][0].elapsed_time(made[0][1]) == 0.25
        side: list[object] = []
        monkeypatch.setattr(torch.cuda, "stream", lambda s: side.append(s) or contextlib.nullcontext())
        made[1][0].record("a stream")  # an event recorded on a given stream gets its spin there
        assert side == ["a stream"] and len(spins) == 4
        assert benchmarking.InductorBenchmarker.__dict__["get_event_pairs"] is not pairs
    assert benchmarking.InductorBenchmarker.__dict__["get_event_pairs"] is pairs  # torch's (here: the stand-in) again
    plain = timer.get_event_pairs(2)
    plain[0][0].record()
    assert len(spins) == 4 and not isinstance(plain[0][0], queued_timing.QueuedStart)
    assert original is not None


def test_an_interrupt_while_a_turn_begins_releases_the_lock(tmp_path):
    """A KeyboardInterrupt in the turn's own accounting (here: the clock read) still releases the flock."""

    def clock() -> float:
        raise KeyboardInterrupt

    lock = autotune_lock.GpuLock(str(tmp_path / "gpu-0.lock"), clock)
    try:
        with pytest.raises(KeyboardInterrupt), lock.held():
            pass
        assert not _held_by_someone(lock.path) and not lock.mine()
    finally:
        lock.close()


@needs_timing_hooks
def test_no_first_call_where_torch_refuses_the_timing(tmp_path):
    """In Inductor's deterministic mode torch refuses unvetted timings; the candidate is then not called first either."""
    from torch._inductor import config
    from torch._inductor.runtime import benchmarking

    if "deterministic" not in config.get_config_copy():
        pytest.skip(f"torch {torch.__version__} has no config.deterministic")
    calls: list[str] = []
    timer = benchmarking.TritonBenchmarker()
    timer.__dict__["triton_do_bench"] = lambda fn, return_mode="median": 1.0
    # torch's own config.patch (a monkeypatch of the ConfigModule left the key hidden for later tests).
    with config.patch(deterministic=True), autotune_lock.benchmarks_in_turn(str(tmp_path / "gpu-0.lock")):
        with pytest.raises(RuntimeError, match="deterministic"):
            timer.benchmark_gpu(lambda: calls.append("call"))
    assert calls == []
    assert config.deterministic is False  # the key is readable again, as every later compile reads it


@needs_timing_hooks
def test_inductors_default_gpu_benchmarker_is_the_one_wrapped_with_the_first_call():
    """On a GPU torch 2.8-2.15 time through ``InductorBenchmarker`` (``use_experimental_benchmarker``): its
    ``benchmark_gpu`` gets the first call and the turn, and its event pairs the queued start."""
    from torch._inductor.runtime import benchmarking

    with autotune_lock.benchmarks_in_turn(None, queue_us=60.0):
        assert benchmarking.InductorBenchmarker.__dict__["benchmark_gpu"]._self_wrapper is autotune_lock._first_call_then_turn
        assert benchmarking.InductorBenchmarker.__dict__["get_event_pairs"]._self_wrapper is autotune_lock._queued_events


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
def test_on_a_gpu_a_queued_timing_times_the_kernel_and_not_a_slow_host():
    """On a GPU, torch's real ``InductorBenchmarker``: a small kernel whose launch follows 50 us of host work (a slow
    host thread, as a worker beside others compiling is) times as the kernel alone under the queued timing, the same
    as from a fast host; torch's own timing of it waited for the host."""
    import time

    from torch._inductor.runtime.benchmarking import InductorBenchmarker

    from inductor_knobs.ablation import queued_timing

    x = torch.zeros(1 << 16, device="cuda")

    def fast() -> None:
        x.add_(1.0)

    def slow() -> None:
        until = time.perf_counter_ns() + 50_000  # host work before the launch, shorter than the 60 us spin
        while time.perf_counter_ns() < until:
            pass
        x.add_(1.0)

    # Without torch's 100 L2 flushes before the timed loop: queued faster than a fast host runs them, they keep the GPU
    # busy through the first iterations, which then time the kernel alone and win torch's minimum; a host slowed
    # by others compiling beside it launches the flushes no faster than the GPU runs them (bench/probe_autotune_spread.py).
    timer, no_backlog = InductorBenchmarker(), {"memory_warmup_iters": 0}
    torch_slow = timer.benchmark_gpu(slow, **no_backlog)
    with autotune_lock.benchmarks_in_turn(None, queue_us=queued_timing.QUEUE_US):
        queued_fast, queued_slow = timer.benchmark_gpu(fast, **no_backlog), timer.benchmark_gpu(slow, **no_backlog)
    # ms; an add of 64K floats takes a few microseconds on any recent GPU
    assert queued_slow <= 1.5 * queued_fast + 0.002, (queued_fast, queued_slow, torch_slow)
    assert torch_slow >= queued_slow + 0.015, (queued_fast, queued_slow, torch_slow)
