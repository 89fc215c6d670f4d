"""What an arm's compiled code runs: the GEMM implementations it calls, and GPU kernel time.

- :func:`gemm_calls` reads the Python wrapper modules Inductor wrote into the worker's private
  ``TORCHINDUCTOR_CACHE_DIR`` (the runner gives every worker an empty one, so they are this arm's)
  and counts the GEMM calls by implementation: ``aten.mm`` (cuBLAS / oneDNN / MKL through ATen),
  ``triton template`` (an autotuned Triton GEMM), ``cpp gemm template`` (Inductor's CPU GEMM
  template), ``cutlass template``.  It works on every device and every torch the package
  supports, including CPU, where the autotune feedback hook reports nothing; where the code
  cannot be read it returns ``{}``.
- :func:`gpu_kernel_times` gives the durations of the GPU kernels (and device memcpy/memset) of a few
  iterations with ``torch.profiler`` (``ProfilerActivity.CUDA``), per kernel name and per iteration; their
  sum is the record's ``kernel_ms``.
  Beside end-to-end latency it shows the GEMMs' own time even where launch overhead dominates.
  Kernels on concurrent streams add up, so it can exceed the latency.
"""

from __future__ import annotations

import collections
import glob
import os
import re
from typing import Any, Callable

#: What marks a file as an Inductor output wrapper (not a kernel or a benchmark harness).
_WRAPPER_MARKERS = ("async_compile.wait(globals())", "def call(")

_DEFINITION = re.compile(r"^(\w+) = async_compile\.(\w+)\(", re.MULTILINE)
_EXTERN = re.compile(r"\bextern_kernels\.(\w+)\(")
_OPS = re.compile(r"\btorch\.ops\.(mkldnn|mkl|aten)\.(\w+)")
_KERNEL_CALL = re.compile(r"^\s*(\w+)(?:\.run)?\(", re.MULTILINE)

#: ``extern_kernels`` / ``torch.ops`` names that are GEMMs or convolutions.
_GEMM_NAME = re.compile(r"mm|linear|conv", re.IGNORECASE)

#: What marks a C++ kernel as Inductor's CPU GEMM template (its blocking loops and micro-kernel).
_CPP_TEMPLATE_MARKERS = ("micro_gemm", "Mc_blocks")


def _kinds(text: str) -> dict[str, str]:
    """Kernel name -> ``triton template`` / ``cpp gemm template`` / ``cutlass template`` for the
    GEMM kernels the wrapper defines (other kernels are left out)."""
    kinds: dict[str, str] = {}
    definitions = list(_DEFINITION.finditer(text))
    for i, match in enumerate(definitions):
        name, compiler = match.group(1), match.group(2)
        body = text[match.end() : definitions[i + 1].start() if i + 1 < len(definitions) else len(text)]
        if name.startswith("triton_tem_"):  # Inductor names template kernels triton_tem_<fused name>
            kinds[name] = "triton template"
        elif compiler.startswith("cpp") and any(m in body for m in _CPP_TEMPLATE_MARKERS):
            kinds[name] = "cpp gemm template"
        elif compiler in ("cuda", "rocm"):  # CUTLASS / CK templates compile through nvcc / hipcc
            kinds[name] = "cutlass template" if compiler == "cuda" else "ck template"
    return kinds


def count_gemm_calls(text: str) -> collections.Counter[str]:
    """GEMM calls in one wrapper module's source, by implementation (see the module docstring).

    Args:
        text (str): the source of one Inductor output wrapper.

    Returns:
        collections.Counter[str]: implementation (``aten.mm``, ``triton template``, …) -> calls.
    """
    counts: collections.Counter[str] = collections.Counter()
    kinds = _kinds(text)
    for line in text.splitlines():
        stripped = line.strip()
        if stripped.startswith(("#", "def ", "class ")) or " = async_compile." in stripped:
            continue
        for name in _EXTERN.findall(stripped):
            if _GEMM_NAME.search(name):
                counts[f"aten.{name}"] += 1
        for namespace, name in _OPS.findall(stripped):
            if _GEMM_NAME.search(name):
                counts[f"{namespace}.{name}"] += 1
        call = _KERNEL_CALL.match(line)
        if call and call.group(1) in kinds:
            counts[kinds[call.group(1)]] += 1
    return counts


def gemm_calls(cache_dir: str | None) -> dict[str, int]:
    """GEMM calls of every wrapper Inductor wrote under ``cache_dir``, by implementation.

    Args:
        cache_dir: the worker's ``TORCHINDUCTOR_CACHE_DIR`` (None or missing: nothing to read).

    Returns:
        ``{"aten.mm": 4}``-style counts, sorted by name; ``{}`` when nothing was found.
    """
    if not cache_dir or not os.path.isdir(cache_dir):
        return {}
    counts: collections.Counter[str] = collections.Counter()
    for path in glob.glob(os.path.join(cache_dir, "**", "*.py"), recursive=True):
        try:
            with open(path, encoding="utf-8") as src:
                text = src.read()
        except (OSError, UnicodeDecodeError):
            continue
        if all(marker in text for marker in _WRAPPER_MARKERS):
            counts.update(count_gemm_calls(text))
    return dict(sorted(counts.items()))


def gpu_kernel_times(call: Callable[[], Any], iterations: int) -> dict[str, float]:
    """GPU time per iteration of every kernel (and device memcpy/memset) over ``iterations`` calls.

    Kernels of the same name add up: ``{"triton_tem_fused_addmm_0": 0.0051, "ampere_bf16_s16816gemm…": …}``.
    Which kernels differ between two processes of one arm shows what their GEMM picks cost in the model.

    Args:
        call: one iteration of the workload (already warmed up).
        iterations: how many to profile (>= 1).

    Returns:
        dict[str, float]: kernel name -> milliseconds of device time per iteration.

    Raises:
        RuntimeError: the profiler recorded no device activity (CUPTI unavailable).

    Relies on ``torch.profiler.profile(activities=[ProfilerActivity.CUDA])`` and its events'
    ``self_device_time_total``; a release without the property (before the cuda -> device rename) gets the
    kernel's own ``time_range``, the same number.
    """
    import torch
    from torch.autograd import DeviceType
    from torch.profiler import ProfilerActivity, profile

    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        for _ in range(iterations):
            call()
        torch.cuda.synchronize()
    totals: dict[str, float] = collections.defaultdict(float)
    seen = False
    for event in prof.events():
        if event.device_type != DeviceType.CUDA or getattr(event, "is_user_annotation", False):
            continue
        seen = True
        # What torch's own profiler table totals as "Self CUDA".
        value = getattr(event, "self_device_time_total", None)
        totals[str(getattr(event, "name", "?"))] += float(value if value is not None else event.time_range.elapsed_us())
    if not seen:
        raise RuntimeError("torch.profiler recorded no CUDA kernels (is CUPTI available?)")
    return {name: us / 1e3 / iterations for name, us in sorted(totals.items(), key=lambda kv: -kv[1])}
