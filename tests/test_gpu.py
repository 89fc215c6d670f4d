"""On a real NVIDIA GPU: the gate decides whether Triton GEMM templates are autotuned."""

from __future__ import annotations

import pytest
import torch
import torch._inductor.utils as inductor_utils

import inductor_knobs as ik

pytestmark = pytest.mark.gpu
requires_cuda = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")


def _autotune_choices(knobs: ik.KnobsContext) -> list[str]:
    """Compile a bf16 mm under ``knobs`` and return the kinds of the choices autotuning timed."""
    from torch._inductor import select_algorithm

    kinds: list[str] = []

    def saver(timings, name, input_nodes, choices, *rest):
        kinds.extend(type(c).__name__ for c in choices)

    select_algorithm.add_feedback_saver(saver)
    try:
        torch._dynamo.reset()
        a = torch.randn(1024, 2048, device="cuda", dtype=torch.bfloat16)
        b = torch.randn(2048, 1536, device="cuda", dtype=torch.bfloat16)
        with knobs:
            out = torch.compile(lambda x, y: x @ y)(a, b)
        torch.testing.assert_close(out, a @ b, rtol=2e-2, atol=2e-1)
    finally:
        select_algorithm._ALGORITHM_SELECTOR_CACHE.feedback_saver_fns.remove(saver)
        torch._dynamo.reset()
    return kinds


@requires_cuda
def test_gate_decides_triton_templates_on_a_real_gpu():
    sms = torch.cuda.get_device_properties(0).multi_processor_count
    original = inductor_utils.is_big_gpu
    common = {"max_autotune_gemm": True, "gemm_backends": "ATEN,TRITON", "config": {"autotune_local_cache": False}}
    closed = _autotune_choices(ik.knobs(min_sms=min(sms + 1, 1024), **common))
    opened = _autotune_choices(ik.knobs(min_sms=min(40, sms), **common))
    triton_closed = sum("Triton" in k for k in closed)
    triton_open = sum("Triton" in k for k in opened)
    print(f"\n{torch.cuda.get_device_name(0)} ({sms} SMs), torch {torch.__version__}: "
          f"min_sms={sms + 1}: {len(closed)} timed choices, {triton_closed} Triton; "
          f"min_sms=40: {len(opened)} timed choices, {triton_open} Triton")  # fmt: skip
    assert triton_closed == 0
    assert triton_open > 0
    assert inductor_utils.is_big_gpu is original
    assert original(0) is (sms >= 68)  # torch's own gate again


# -- the reference case of mm-autotune-per-shape.txt: serving without autotune stalls ---------

REFERENCE_LENS = (560, 1024, 2048)


def _reference_model():
    torch.manual_seed(0)
    return torch.nn.Linear(3420, 1280, bias=False, dtype=torch.bfloat16, device="cuda")


def _hidden_states(seq_len):
    x = torch.randn(seq_len, 3420, device="cuda", dtype=torch.bfloat16)
    torch._dynamo.mark_dynamic(x, 0)
    return x


@requires_cuda
def test_reference_case_warmup_then_200_random_lengths_autotune_nothing(fresh_inductor):
    import random

    model = ik.compile(_reference_model(), mode="max-autotune")
    report = ik.serving.warmup(model, shapes=REFERENCE_LENS, factory=_hidden_states)
    print("\n" + report.table())
    assert any(not r.from_cache for r in report.records)
    with ik.serving.no_autotune() as guard:  # raises on the first autotune or recompilation
        for n in random.Random(0).choices(range(512, 2049), k=200):
            model(_hidden_states(n))
    assert guard.violations == []


@requires_cuda
def test_reference_case_without_warmup_the_guard_names_why(fresh_inductor):
    model = ik.compile(_reference_model(), mode="max-autotune")
    for n in REFERENCE_LENS[:2]:
        model(_hidden_states(n))
    with ik.serving.no_autotune(on="log") as guard, ik.record_autotune() as rec:
        model(_hidden_states(2048))
    print("\n" + "\n".join(e.describe() if isinstance(e, ik.CompileEvent) else e.signature for e in guard.violations))
    print(rec.table(top=3))
    assert guard.violations, "seq_len 2048 after 560/1024 autotuned nothing"
    # The default reaction raises before Dynamo recompiles, naming the guard and the input.
    again = ik.compile(_reference_model(), mode="max-autotune")
    for n in REFERENCE_LENS[:2]:
        again(_hidden_states(n))
    with (
        pytest.raises(ik.serving.AutotuneDuringServing, match=r"recompile.*<= 1280.*2048, 3420") as caught,
        ik.serving.no_autotune(),
    ):
        again(_hidden_states(2048))
    print(caught.value)


requires_green_streams = pytest.mark.skipif(
    not (torch.cuda.is_available() and hasattr(getattr(torch.cuda, "GreenContext", None), "Stream")),
    reason="needs a CUDA GPU and torch >= 2.11 (GreenContext.Stream)",
)


def _median_ms(fn) -> float:
    from triton.testing import do_bench

    return do_bench(fn, warmup=5, rep=40, return_mode="median")


@requires_green_streams
def test_emulation_confines_eager_and_compiled_gemms_and_reverts(fresh_inductor):
    """A compute-bound GEMM is several times slower on 16 SMs, eager and compiled alike; exit restores all."""
    physical = torch.cuda.get_device_properties(0).multi_processor_count
    getter = torch.cuda.get_device_properties
    a = torch.randn(4096, 4096, device="cuda", dtype=torch.bfloat16)
    b = torch.randn(4096, 4096, device="cuda", dtype=torch.bfloat16)
    full_eager = _median_ms(lambda: a @ b)
    with ik.emulate_gpu(sms=16) as emu:
        assert emu.physical_sms == physical
        assert torch.cuda.get_device_properties(0).multi_processor_count == 16
        assert inductor_utils.is_big_gpu(0) is False  # torch's own 68-SM threshold
        with ik.force_gemm_autotune(min_sms=16, backends="TRITON"):
            compiled = torch.compile(lambda x, y: x @ y, mode="max-autotune-no-cudagraphs")
            compiled(a, b)
        small_eager = _median_ms(lambda: a @ b)
        small_compiled = _median_ms(lambda: compiled(a, b))
    full_compiled = _median_ms(lambda: compiled(a, b))
    # 16 of 132 SMs: ideal 8x; a confined kernel is well over 3x slower, an escaped one is not.
    assert small_eager > 3 * full_eager
    assert small_compiled > 3 * full_compiled
    assert torch.cuda.get_device_properties is getter
    assert torch.cuda.get_device_properties(0).multi_processor_count == physical
    assert torch.cuda.current_stream() == torch.cuda.default_stream()
    assert inductor_utils.is_big_gpu(0) is (physical >= 68)


@requires_cuda
def test_an_emulated_gpu_benchmarks_a_gemm_once_as_a_real_small_gpu_would(fresh_inductor):
    """Three GEMMs of one shape under an emulated T4 with the gate lifted: the second is answered by Inductor's
    autotune cache (torch's counter of benchmark runs) as often as on the whole GPU; before, emulation turned that
    cache off and every GEMM of a model was benchmarked again."""
    from torch._dynamo.utils import counters

    a = torch.randn(1024, 768, device="cuda", dtype=torch.bfloat16)
    w1, w2, w3 = (torch.randn(768, 768, device="cuda", dtype=torch.bfloat16) for _ in range(3))

    def three_gemms(x):
        return x @ w1 @ w2 @ w3

    runs = {}
    for label, emulation in (("whole", None), ("T4", "T4")):
        torch._dynamo.reset()
        counters.clear()
        with ik.emulate_gpu(emulation) if emulation else ik.knobs(), ik.force_gemm_autotune(min_sms=1, backends="ATEN,TRITON"):
            torch.compile(three_gemms, mode="max-autotune-no-cudagraphs")(a)
        runs[label] = counters["inductor"]["select_algorithm_autotune"]
    assert runs["T4"] == runs["whole"] < 3, runs


try:
    import triton
    import triton.language as tl
except ImportError:  # a CPU-only torch without Triton: the GPU tests skip
    triton = None

if triton is not None:

    @triton.jit
    def _smid_kernel(out_ptr, ITERS: tl.constexpr):
        """Each program writes the id of the SM it ran on (``%smid``)."""
        pid = tl.program_id(0)
        smid = tl.inline_asm_elementwise("mov.u32 $0, %smid;", "=r,r", [pid], dtype=tl.int32, is_pure=False, pack=1)
        acc = pid
        for _ in range(ITERS):  # keep each program busy so the work spreads over every SM it may use
            acc = acc * 1664525 + 1013904223
        tl.store(out_ptr + pid, smid + (acc & 0))


def _smids(x: torch.Tensor) -> torch.Tensor:
    """One program per element of ``x``; returns the SM id each program ran on."""
    out = torch.empty_like(x)
    _smid_kernel[(x.numel(),)](out, ITERS=2000, num_warps=1)
    return out


def _distinct(out: torch.Tensor) -> int:
    return int(torch.unique(out).numel())


@requires_green_streams
def test_emulation_keeps_cuda_graphs_and_their_replays_stay_in_the_partition(fresh_inductor, monkeypatch):
    """Inductor's CUDA graph trees (``mode="max-autotune"``), ``ik.serving.capture_cuda_graphs`` and ``torch.cuda.graph``
    capture in the green context under emulation: the SM ids their replays record span at most the granted
    SMs, while the same graphs captured without emulation span more.  The GEMM part captures cuBLAS and then
    lets the graph trees free cuBLAS's workspaces (a graph captured on the stream eager work ran on would
    then replay into freed memory).  No wall-clock assertion; the timings are printed."""
    from torch._inductor import cudagraph_trees

    recorded: list[int] = []
    real_record = cudagraph_trees.CUDAGraphTreeManager.record_function

    def spy(self, *args, **kwargs):
        recorded.append(1)
        return real_record(self, *args, **kwargs)

    monkeypatch.setattr(cudagraph_trees.CUDAGraphTreeManager, "record_function", spy)
    physical = torch.cuda.get_device_properties(0).multi_processor_count
    n = physical * 32
    x = torch.zeros(n, dtype=torch.int32, device="cuda")
    seen: dict[str, int] = {}

    def tree_replay(label: str) -> None:
        compiled = torch.compile(_smids, mode="max-autotune")
        before = len(recorded)
        for _ in range(3):  # warm-up run, then the recording
            compiled(x)
        assert len(recorded) > before, "no CUDA graph was recorded"
        seen[label] = _distinct(compiled(x))  # a replay
        seen[label + " (replayed again)"] = _distinct(compiled(x))

    def captured_replay(label: str) -> ik.serving.CapturedGraphs:
        captured = ik.serving.capture_cuda_graphs(
            _smids, shapes=[n], factory=lambda n: torch.zeros(n, dtype=torch.int32, device="cuda")
        )
        seen[label] = _distinct(captured(x))
        assert captured.replays == 1
        return captured

    tree_replay("full GPU: graph tree")
    captured_replay("full GPU: capture_cuda_graphs")
    torch._dynamo.reset()  # and the graph trees
    default_stream = torch.cuda.current_stream()
    with ik.emulate_gpu(sms=16) as emu:
        granted = emu.granted_sms or emu.sms
        tree_replay("16 SMs: graph tree")
        manager = cudagraph_trees.get_manager(0, False)
        assert manager is not None and manager.stream is emu.capture_stream
        captured = captured_replay("16 SMs: capture_cuda_graphs")
        g = torch.cuda.CUDAGraph()
        with torch.cuda.graph(g):  # no stream=: the emulation's capture stream on this thread
            plain = _smids(x)
        g.replay()
        seen["16 SMs: torch.cuda.graph"] = _distinct(plain)
    assert manager.stream is not emu.capture_stream, "the graph-tree manager kept the green stream after exit"
    assert torch.cuda.current_stream() == default_stream
    # Graphs keep the stream they were captured on: replayed from the default stream after exit.
    seen["after exit: capture_cuda_graphs captured inside"] = _distinct(captured(x))
    g.replay()
    seen["after exit: torch.cuda.graph captured inside"] = _distinct(plain)
    print(f"\ndistinct SMs ({torch.cuda.get_device_name(0)}, {physical} SMs, {granted} granted, torch {torch.__version__}):")
    for label, count in seen.items():
        print(f"  {label}: {count}")
    inside = {k: v for k, v in seen.items() if not k.startswith("full GPU")}
    assert all(v <= granted for v in inside.values()), inside
    assert all(v > granted for k, v in seen.items() if k.startswith("full GPU")), seen

    # Measured, not asserted: a 4096^3 bf16 GEMM replayed from CUDA graphs, emulated and full, side by side.
    a = torch.randn(4096, 4096, device="cuda", dtype=torch.bfloat16)
    b = torch.randn(4096, 4096, device="cuda", dtype=torch.bfloat16)
    torch._dynamo.reset()

    def gemm_graphs() -> tuple[ik.serving.CapturedGraphs, object]:
        captured = ik.serving.capture_cuda_graphs(lambda x, y: x @ y, shapes=[0], factory=lambda _: (a, b), outputs="static")
        compiled = torch.compile(lambda x, y: x @ y, mode="reduce-overhead")
        for _ in range(3):
            compiled(a, b)
        return captured, compiled

    full_captured, full_compiled = gemm_graphs()
    ms = {"full GPU eager": _median_ms(lambda: a @ b)}
    ms["full GPU capture_cuda_graphs replay"] = _median_ms(lambda: full_captured(a, b))
    ms["full GPU graph tree replay (reduce-overhead)"] = _median_ms(lambda: full_compiled(a, b))
    torch._dynamo.reset()
    with ik.emulate_gpu(sms=16):
        small_captured, small_compiled = gemm_graphs()
        ms["16 SMs eager"] = _median_ms(lambda: a @ b)
        ms["16 SMs capture_cuda_graphs replay"] = _median_ms(lambda: small_captured(a, b))
        ms["16 SMs graph tree replay (reduce-overhead)"] = _median_ms(lambda: small_compiled(a, b))
        ms["16 SMs full-GPU graph replayed inside"] = _median_ms(lambda: full_captured(a, b))
    ms["16 SMs graph replayed after exit, default stream"] = _median_ms(lambda: small_captured(a, b))
    print("4096^3 bf16 GEMM, median ms (triton.testing.do_bench):")
    for label, value in ms.items():
        print(f"  {label}: {value:.3f}")
    print(
        f"  ratio emulated/full: eager {ms['16 SMs eager'] / ms['full GPU eager']:.2f}x, capture_cuda_graphs "
        f"{ms['16 SMs capture_cuda_graphs replay'] / ms['full GPU capture_cuda_graphs replay']:.2f}x, graph tree "
        f"{ms['16 SMs graph tree replay (reduce-overhead)'] / ms['full GPU graph tree replay (reduce-overhead)']:.2f}x"
    )


@requires_green_streams
def test_two_different_emulations_conflict_and_the_first_stays(fresh_inductor):
    with ik.emulate_gpu(sms=40):
        with pytest.raises(ik.errors.EmulationConflict, match="40 SMs"), ik.emulate_gpu(sms=24):
            pass
        assert torch.cuda.get_device_properties(0).multi_processor_count == 40
    with pytest.raises(ik.errors.InvalidKnobValue, match=r"1\.\."):
        ik.emulate_gpu(sms=10_000).start()


def _cudagraph_recordings(monkeypatch, knobs: ik.KnobsContext) -> tuple[int, list[ik.CompileAttestation]]:
    """Compile under ``mode="max-autotune"`` inside ``knobs`` and count cudagraph-tree recordings."""
    from torch._inductor import cudagraph_trees

    recorded: list[int] = []
    real = cudagraph_trees.CUDAGraphTreeManager.record_function

    def spy(self, *args, **kwargs):
        recorded.append(1)
        return real(self, *args, **kwargs)

    monkeypatch.setattr(cudagraph_trees.CUDAGraphTreeManager, "record_function", spy)
    torch._dynamo.reset()
    x = torch.randn(512, 512, device="cuda")
    fn = torch.compile(lambda t: (t @ t).relu(), mode="max-autotune")
    with ik.record_compiles() as rec, knobs:
        for _ in range(4):  # warm-up run, then recording, then replays
            fn(x)
    torch.cuda.synchronize()
    torch._dynamo.reset()
    return len(recorded), rec.attestations


@requires_cuda
def test_cudagraphs_knob_beats_the_max_autotune_mode(monkeypatch):
    off, attested = _cudagraph_recordings(monkeypatch, ik.knobs(cudagraphs=False))
    on, _ = _cudagraph_recordings(monkeypatch, ik.knobs())
    print(f"cudagraph recordings: cudagraphs=False knob {off}, knob unset {on}")
    assert off == 0 and on > 0
    assert attested and all(a.value("triton.cudagraphs") is False for a in attested)


def _attention_inputs(length: int) -> torch.Tensor:
    q = torch.randn(1, 8, length, 128, device="cuda", dtype=torch.bfloat16)
    torch._dynamo.mark_dynamic(q, 2)
    return q


def _attention(q):
    return torch.nn.functional.scaled_dot_product_attention(q, q, q, is_causal=True)


@requires_cuda
def test_cudnn_attention_plans_per_length_are_named_and_the_sdpa_knob_removes_them(fresh_inductor):
    """cuDNN SDPA builds a plan per exact length: after warmup the guard names it; without cuDNN there is none."""
    from torch.nn.attention import SDPBackend, sdpa_kernel

    with sdpa_kernel([SDPBackend.CUDNN_ATTENTION]):
        try:
            _attention(_attention_inputs(64))
        except RuntimeError as err:
            pytest.skip(f"cuDNN attention is not available here: {err}")
    results = {}
    for label, backends in (("cudnn", "CUDNN_ATTENTION"), ("flash", "FLASH_ATTENTION,EFFICIENT_ATTENTION,MATH")):
        torch._dynamo.reset()
        with ik.knobs(sdpa_backends=backends):
            compiled = torch.compile(_attention, dynamic=True)
            report = ik.serving.warmup(compiled, shapes=[128, 1024], factory=_attention_inputs, probes=None)
            guard = ik.serving.no_stalls(compiled, on="record", baseline_ms=report.steady_state_ms, profile="all")
            for length in (301, 302, 303):
                guard(_attention_inputs(length))
        results[label] = [c.kind for s in guard.stalls for c in s.causes]
    assert "cudnn_sdpa_plan" in results["cudnn"]
    assert "cudnn_sdpa_plan" not in results["flash"]


def _twenty_matmuls(x):
    """A served call of about a millisecond on an H100: 20 chained 2048x2048 matmuls."""
    for _ in range(20):
        x = torch.tanh(x @ x * 1e-3)
    return x


@requires_cuda
def test_a_gpu_busy_with_other_work_is_named_gpu_slower_at_the_first_stall():
    """Work on another stream competes for the SMs: the guarded call's launches return as fast as ever and
    its wait for the GPU grows, so the stall is ``gpu_slower`` (no ``host_slower``, nothing unattributed)."""
    x = torch.randn(2048, 2048, device="cuda")
    big = torch.randn(8192, 8192, device="cuda")
    side = torch.cuda.Stream()

    guard = ik.serving.no_stalls(_twenty_matmuls, on="record")
    with guard:
        for _ in range(20):
            guard(x)
        with torch.cuda.stream(side):
            for _ in range(30):
                big @ big
        guard(x)
    stall = guard.stalls[-1]  # earlier ones, if any, are the first calls' (a cuBLAS handle, its workspace)
    assert stall.index == 20 and stall.primary == "gpu_slower" and stall.attributed, [s.describe() for s in guard.stalls]
    assert "host_slower" not in {c.kind for c in stall.causes}, stall.describe()


@requires_cuda
def test_captured_graphs_replay_the_compiled_model_per_bucket(fresh_inductor):
    """One CUDA graph per bucket: a call at a bucket replays it (same result as the compiled model), a
    call at another shape goes to the model, and under the guard the replays stall nowhere."""
    weight = torch.randn(256, 256, device="cuda")

    def model(x):
        return torch.nn.functional.gelu(x @ weight).sum(dim=-1)

    compiled = torch.compile(model, mode="max-autotune-no-cudagraphs", dynamic=True)
    buckets = [64, 128, 256]
    captured = ik.serving.capture_cuda_graphs(compiled, shapes=buckets, factory=lambda n: torch.randn(n, 256, device="cuda"))
    assert len(captured.shapes) == 3
    for n in (100, 64, 256, 200):
        x = ik.serving.pad_to_bucket(torch.randn(n, 256, device="cuda"), buckets, dim=0)
        torch.testing.assert_close(captured(x).clone(), compiled(x), rtol=1e-4, atol=1e-3)
    assert captured.replays == 4 and captured.misses == 0
    captured(torch.randn(100, 256, device="cuda"))  # not padded: the compiled model serves it
    assert captured.misses == 1
    # As served: warm-up seeds the guard with the buckets' steady state (a first call of the guard under
    # the profiler would otherwise count the profiler's own first-event cost).
    report = ik.serving.warmup(captured, shapes=buckets, factory=lambda n: torch.randn(n, 256, device="cuda"), probes=None)
    guard = ik.serving.no_stalls(captured, on="record", min_excess_ms=0.5, warmup=report)
    replayed = captured.replays  # the warm-up's calls (and its measure of the profiler's cost) replay too
    with guard:
        for i in range(300):
            guard(ik.serving.pad_to_bucket(torch.randn(1 + i % 256, 256, device="cuda"), buckets, dim=0))
    assert guard.stalls == [] or all(s.primary in ("host_slower", "gpu_slower") for s in guard.stalls), [
        s.describe() for s in guard.stalls
    ]
    assert captured.replays == replayed + 300


@requires_cuda
def test_captured_graphs_give_each_thread_and_stream_its_own_answer(fresh_inductor):
    """outputs='copy' on real CUDA graphs: 8 threads, half of them on side streams, each get their own
    result (before: the static output was handed back after the lock, and other replays overwrote it)."""
    import concurrent.futures

    weight = torch.randn(256, 256, device="cuda")
    compiled = torch.compile(lambda x: (x @ weight).relu(), mode="max-autotune-no-cudagraphs", dynamic=False)
    captured = ik.serving.capture_cuda_graphs(compiled, shapes=[128], factory=lambda n: torch.randn(n, 256, device="cuda"))
    inputs = [torch.randn(128, 256, device="cuda") for _ in range(64)]
    expected = [compiled(x).cpu() for x in inputs]

    def request(i: int) -> bool:
        stream = torch.cuda.Stream() if i % 2 else torch.cuda.current_stream()
        with torch.cuda.stream(stream):
            out = captured(inputs[i % 64])
            for _ in range(3):  # other threads replay meanwhile
                torch.cuda._sleep(1000)
            got = out.cpu()
        return bool(torch.allclose(got, expected[i % 64], rtol=1e-3, atol=1e-3))

    with concurrent.futures.ThreadPoolExecutor(8) as pool:
        right = list(pool.map(request, range(512)))
    assert all(right), f"{right.count(False)} of 512 answers were another call's"
