"""What autotuning and compilation did: plain data, built from torch objects by :mod:`.autotune_reader`
and :mod:`.hook_callbacks`.

``AutotuneRecord`` is one autotuned op (one ``AlgorithmSelectorCache.__call__`` that reached
the feedback savers); ``CompileEvent`` is one Dynamo compilation (first compile, recompile or
lazy backward).  Both are JSON-serialisable through :meth:`to_dict`.
"""

from __future__ import annotations

import json
import math
import os
from collections.abc import Iterable
from dataclasses import asdict, dataclass, field
from typing import Any

#: ``ChoiceCaller.info_dict()["backend"]`` (torch's spelling) -> the kind this package reports.
CHOICE_KINDS = {"extern": "aten", "triton": "triton", "cuda": "cutlass", "cpp": "cpp", "rocm": "ck"}


@dataclass(frozen=True)
class ChoiceTiming:
    """One candidate kernel of an autotuned op.

    Attributes:
        name: torch's name for the choice (``triton_mm_11``, ``mm``, ``cpp_CppMicroGemmFP32Vec_0``).
        kind: ``aten``, ``triton``, ``cutlass``, ``cpp``, ``ck`` or torch's own backend word.
        params: template parameters (BLOCK_M, num_warps, …) as torch describes them.
        time_ms: benchmarked time in milliseconds; None if the choice failed (torch: ``inf``).
        precompile_ms: precompile time in milliseconds where torch reports it (2.11+), else None.
        lookup_key: the key torch's GEMM lookup table (``lookup_table.table``, 2.10+) finds this choice
            under, device-agnostic (``"((torch.float16, [64, 128], [128, 1]), ...)+mm"``); None where torch
            built the choice without a ``KernelTemplateChoice`` (the C++ GEMM template, torch < 2.10).
        lookup_device_key: the same key with the GPU's name first, which torch tries first (CUDA only).
        lookup_entry: the choice as a table entry (``template_id``, template parameters, ``template_hash``).
    """

    name: str
    kind: str
    params: dict[str, Any]
    time_ms: float | None
    precompile_ms: float | None = None
    lookup_key: str | None = None
    lookup_device_key: str | None = None
    lookup_entry: dict[str, Any] | None = None


@dataclass(frozen=True)
class AutotuneRecord:
    """One autotuned op.

    Attributes:
        op: the op torch autotuned (``mm``, ``addmm``, ``bmm``, ``linear_unary``, …).
        shapes: input sizes; a symbolic size is its expression (``"s0"``).
        shape_hints: input sizes with symbols replaced by the hint torch benchmarked with.
        strides: input strides (same conventions as ``shapes``).
        dtypes: input dtypes (``"torch.bfloat16"``).
        choices: every candidate, fastest first.
        winner: the fastest choice's name (what the timings favour).
        benchmark_seconds: wall seconds torch spent benchmarking (0.0 when the timings came
            from a cache; None when torch did not report it).
        precompile_seconds: wall seconds torch spent precompiling choices (as above).
        from_cache: the timings came from Inductor's autotune cache (no benchmarking ran).
        compile_id: Dynamo's compile id (``"0/1"``) when known.
    """

    op: str
    shapes: list[list[int | str]]
    shape_hints: list[list[int]] | None
    strides: list[list[int | str]] | None
    dtypes: list[str]
    choices: list[ChoiceTiming]
    winner: str | None
    benchmark_seconds: float | None
    precompile_seconds: float | None
    from_cache: bool
    compile_id: str | None = None

    @property
    def signature(self) -> str:
        """``mm(560x3420, 3420x1280)``: the op and its (hinted) input shapes, as torch prints them."""
        shapes = self.shape_hints or self.shapes
        return f"{self.op}({', '.join('x'.join(str(d) for d in s) for s in shapes)})"

    def to_dict(self) -> dict[str, Any]:
        """A JSON-ready dict (``inf`` timings are already None)."""
        return asdict(self)


@dataclass(frozen=True)
class CompileEvent:
    """One Dynamo compilation.

    Attributes:
        compile_id: Dynamo's compile id (``"0/1"``: frame 0, its second compilation) when known.
        recompile: True when an earlier compilation of the same frame existed (a guard failed).
        reasons: Dynamo's guard-failure reasons for a recompile (``"tensor 'x' size mismatch at
            index 0. expected 1024, actual 2048"``); empty for a first compile.
        trigger: what started it: ``dynamo`` or, on torch 2.8+, ``lazy_backward``,
            ``cudagraph_recording`` etc.
        code: the recompiled function as ``name (file:line)``; known for recompiles.
        inputs: the recompiled frame's tensor arguments as ``{name: "torch.float32[2048, 3420]"}``.
    """

    compile_id: str | None
    recompile: bool
    reasons: list[str] = field(default_factory=list)
    trigger: str = "dynamo"
    code: str | None = None
    inputs: dict[str, str] = field(default_factory=dict)

    def describe(self) -> str:
        """One line: what compiled and why."""
        what = "recompile" if self.recompile else "compile"
        where = f" of {self.code}" if self.code else ""
        why = f" because {'; '.join(self.reasons)}" if self.reasons else ""
        inputs = f" [inputs: {', '.join(f'{k}={v}' for k, v in self.inputs.items())}]" if self.inputs else ""
        return f"Dynamo {what} {self.compile_id or '?'}{where} ({self.trigger}){why}{inputs}"

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass(frozen=True)
class RuntimeEvent:
    """A first-call cost torch paid inside a call: what it was, how long, and where.

    Attributes:
        kind: one of :data:`CAUSES` (``dynamo_compile``, ``gemm_autotune``, ``runtime_benchmark``,
            ``coordinate_descent``, ``triton_compile``, ``cudagraph_recording``, ``cudnn_sdpa_plan``,
            ``cublas_first_call``, ``tunableop``, ``cudnn_conv``, ``aten_first_call``, ``python_gc``,
            ``thread_off_cpu``).
        seconds: wall seconds it took (host side).
        detail: what torch said about it: the op and shapes, the kernel, Dynamo's recompile reason.
        started: ``time.perf_counter()`` when it started, or None when only its length is known
            (profiled ops), so nested events are not counted twice.
    """

    kind: str
    seconds: float
    detail: str = ""
    started: float | None = None

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


#: Every cause a stall can be attributed to, with what it is (the guard's report and ``doctor`` use these words).
CAUSES = {
    "dynamo_compile": "Dynamo (re)compile and Inductor compile of the graph",
    "gemm_autotune": "Inductor GEMM autotune (select_algorithm benchmarking)",
    "runtime_benchmark": "Inductor runtime benchmark of Triton configs (CachingAutotuner.benchmark_all_configs)",
    "coordinate_descent": "Inductor coordinate-descent tuning (CachingAutotuner.coordinate_descent_tuning)",
    "triton_compile": "Triton kernel compile (CachingAutotuner.precompile; with Triton 3.4+, one in which Triton compiled)",
    "triton_load": "Inductor loaded Triton kernels compiled before (Triton's cache, the FX graph cache's bundle or a compile "
    "worker): CachingAutotuner.precompile in which Triton compiled nothing (Triton 3.4+)",
    "cudagraph_recording": "CUDA graph recording of a new shape (CUDAGraphTreeManager.record_function, or a capture "
    "of ik.capture_cuda_graphs)",
    "cudnn_sdpa_plan": "cuDNN SDPA execution-plan build (one per exact input shape)",
    "cublas_first_call": "cuBLAS/cuBLASLt first call at a new GEMM shape (heuristics, handles, workspace)",
    "tunableop": "TunableOp GEMM tuning (torch.cuda.tunable)",
    "cudnn_conv": "cuDNN convolution algorithm search at a new shape",
    "aten_first_call": "an ATen op slow at a new shape (named in the detail)",
    "python_gc": "Python's cyclic garbage collector (gc.callbacks): a collection walks the objects the process holds",
    "thread_off_cpu": "the serving thread was off the CPU (time.thread_time): waiting for the GIL, preempted, a CPU quota",
    "profiler": "the guard's own sampled torch.profiler on a new-shape call (its cost measured by ik.warmup)",
    "host_slower": "the call's host part (Python, kernel launches) ran longer at a warm shape with no hook or profiled op "
    "in it: a slower or shared CPU, not a first-call cost",
    "gpu_slower": "the call waited longer for the GPU after its last launch: clocks, power or thermal limits, another "
    "process on the GPU; not a first-call cost",
    "queued": "waited for another thread's call of the same CUDA graphs (capture_cuda_graphs' lock)",
    "concurrent_calls": "other threads' calls of the guard ran at the same time: their GPU work and Python came first",
    "unattributed": "no hook or profiled op accounts for the time",
}


def finite_or_none(value: float) -> float | None:
    """torch marks failed choices with ``inf``; JSON has no ``inf``, so they become None."""
    return float(value) if math.isfinite(value) else None


def format_table(records: Iterable[AutotuneRecord], top: int = 10) -> str:
    """The human table, like torch's ``AUTOTUNE mm(...)`` block, for each record.

    Args:
        records: what to show.
        top: choices shown per record (fastest first).
    """
    lines: list[str] = []
    for rec in records:
        if rec.from_cache:
            source = "from cache"
        elif rec.benchmark_seconds is None:
            source = "benchmarked"
        else:
            source = f"benchmarked in {rec.benchmark_seconds:.3f} s + {rec.precompile_seconds or 0:.3f} s precompile"
        lines.append(f"AUTOTUNE {rec.signature}  [{source}; {len(rec.choices)} choices; compile {rec.compile_id or '?'}]")
        best = rec.choices[0].time_ms if rec.choices else None
        for choice in rec.choices[:top]:
            if choice.time_ms is None:
                timing = "failed"
            else:
                share = f"{100 * best / choice.time_ms:5.1f}%" if best and choice.time_ms else "  n/a"
                timing = f"{choice.time_ms:.4f} ms {share}"
            params = ", ".join(f"{k}={v}" for k, v in choice.params.items())
            lines.append(f"  {choice.name:<32} {choice.kind:<8} {timing}  {params}".rstrip())
    return "\n".join(lines)


def write_jsonl(path: str | os.PathLike[str], rows: Iterable[dict[str, Any]]) -> int:
    """Write one JSON object per line; returns the number of lines written."""
    count = 0
    with open(path, "w", encoding="utf-8") as out:
        for row in rows:
            out.write(json.dumps(row, default=str) + "\n")
            count += 1
    return count


def current_compile_id() -> str | None:
    """Dynamo's id of the compile running on this thread (``"0/1"``), or None outside one.

    Relies on ``torch._guards.CompileContext.current_compile_id()`` (torch 2.4-2.15).
    """
    try:
        from torch._guards import CompileContext

        compile_id = CompileContext.current_compile_id()
    except (ImportError, AttributeError):
        return None
    return None if compile_id is None else str(compile_id)
