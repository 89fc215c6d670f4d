"""Plain-words notes printed above an ablation's table: what this run can and cannot show.

- On CPU, the SM gate is a CUDA matter: the note says so, and says what the CPU run does show,
  from the run's own data (compile cost, and whether the arms' compiled code calls the same GEMM
  kernels).
- On a GPU, the main job's note says what its sections are (this GPU; an emulated T4 below the
  68-SM gate), or why there is no emulated section.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

#: The knobs that only move the CUDA SM gate (``preset`` covers ``force_gemm_autotune``).
GATE_KNOBS = ("min_sms", "preset")


def gemm_summary(calls: Mapping[str, int]) -> str:
    """``{"aten.mm": 4}`` as ``aten.mm×4``; ``-`` when empty."""
    return ", ".join(f"{name}×{count}" for name, count in sorted(calls.items())) or "-"


def _touches_gate(results: Mapping[str, Any]) -> bool:
    return bool(results.get("main_job")) or any(
        k in (arm.get("knobs") or {}) for arm in results.get("arms", []) for k in GATE_KNOBS
    )


def cpu_note(rows: Sequence[Mapping[str, Any]]) -> str:
    """The CPU note, with what the rows show (compile cost, GEMM kernels per arm)."""
    measured = [r for r in rows if "median_ms" in r]
    compiled = [r for r in measured if r.get("gemm_calls")]
    kernels = {gemm_summary(r["gemm_calls"]) for r in compiled}
    if len(kernels) == 1:
        same = (
            f"every compiled arm's code calls the same GEMM kernels ({kernels.pop()}), so latency differences are "
            "not GEMM choices"
        )
    elif kernels:
        same = "the arms' compiled code calls different GEMM kernels (column GEMM kernels)"
    else:
        same = "which GEMM kernels each arm's compiled code calls (column GEMM kernels)"
    costs = ", ".join(f"{r['arm']} {r['compile_seconds']:.1f} s" for r in measured if r.get("compile_seconds"))
    cost = f" (cold compile: {costs})" if costs else ""
    return (
        "**This is a CPU run, and the SM gate is a CUDA matter.** torch's `is_big_gpu` gate (68 SMs) decides "
        "whether Inductor autotunes Triton GEMM templates on a CUDA GPU; `min_sms` and `force_gemm_autotune` only "
        "move that gate, so on CPU they cannot change which GEMM runs. What this run does show: what each arm costs "
        f"to compile{cost}, where max-autotune compiles and benchmarks C++ GEMM template candidates; that {same}; and "
        "whether the arms differ in latency at all (verdict column). Run `inductor-knobs ablate` on a CUDA machine "
        "for the gate's effect."
    )


def gpu_note(results: Mapping[str, Any]) -> str:
    """The main job's note on a GPU: its sections, or why the emulated one is missing."""
    skipped = results.get("emulation_skipped")
    if skipped:
        return f"**One section: this GPU.** No emulated small-GPU section: {skipped}."
    emulated = sorted({a["section"] for a in results.get("arms", []) if a.get("emulate") and a.get("section")})
    if not emulated:
        return ""
    return (
        f"**Two sections.** This GPU, above torch's 68-SM gate, where `max-autotune-no-cudagraphs` already "
        f"autotunes GEMMs; and {emulated[0]}, below the gate, where it leaves GEMMs to ATen unless "
        "`force_gemm_autotune` opens the gate (`min_sms` = 40). Each section's speedups are relative to its own "
        "`default` arm."
    )


def notes(results: Mapping[str, Any], rows: Sequence[Mapping[str, Any]]) -> list[str]:
    """The notes for ``results`` (paragraphs, possibly none)."""
    out = list(results.get("notes") or [])
    if results.get("device") == "cpu" and _touches_gate(results):
        out.append(cpu_note(rows))
    elif results.get("device") == "cuda" and results.get("main_job"):
        note = gpu_note(results)
        if note:
            out.append(note)
    return out
