"""Plain-words notes printed above an ablation's table: what this run can and cannot show.

- On CPU, the SM gate is a CUDA matter: the note says so, and says what the CPU run does show,
  from the run's own data (compile cost, and whether the arms' compiled code calls the same GEMM
  kernels).
- On a GPU, the main job's note says what its sections are (emulated T4 and L4 below the 68-SM gate,
  and this GPU as the A/A control) and how to read them, or why there is no emulated section.
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


def cpu_note(rows: Sequence[Mapping[str, Any]], main_job: bool = False) -> str:
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
    gate = (
        "so the main job on CPU runs no gate arm (`force_gemm_autotune` could change nothing here)"
        if main_job
        else "`min_sms` and `force_gemm_autotune` only move that gate, so on CPU they cannot change which GEMM runs"
    )
    return (
        "**This is a CPU run: it tests no SM gate.** torch's `is_big_gpu` gate (68 SMs) decides whether Inductor "
        f"autotunes Triton GEMM templates on a CUDA GPU; a CPU has no such gate, {gate}. What this run does show: "
        f"what each arm costs to compile{cost}, where max-autotune compiles and benchmarks C++ GEMM template "
        f"candidates; that {same}; and whether the arms differ in latency at all (verdict column). What it cannot "
        "show: whether forcing the gate helps a model on a small GPU. For that, run `inductor-knobs ablate` on a "
        "CUDA machine."
    )


def gpu_note(results: Mapping[str, Any]) -> str:
    """The main job's note on a GPU: what its sections are, how to read them, and what is missing."""
    skipped = results.get("emulation_skipped")
    emulated: list[str] = []
    for arm in results.get("arms", []):
        if arm.get("emulate") and arm.get("section") and arm["section"] not in emulated:
            emulated.append(arm["section"])
    parts = []
    if emulated:
        parts.append(
            f"**Does forcing the SM gate help `{results.get('workload')}` on a small GPU?** Sections {', '.join(emulated)}: "
            "`gated` asks for GEMM autotuning, but torch's 68-SM gate keeps GEMMs on ATen there; "
            "`force_gemm_autotune` lowers the gate to the section's SM count, so Triton GEMM templates compete. "
            "The last section is this GPU, above the gate, where both arms autotune alike: an A/A control, where "
            "the expected verdict is no detectable difference. Read GPU kernel time for the GEMM choice (a small "
            "model is launch-bound, so its end-to-end latency mostly measures the CPU) and compile s for the price of "
            "forcing."
        )
    if skipped:
        parts.append(f"**No emulated small-GPU sections:** {skipped}.")
    return " ".join(parts)


def notes(results: Mapping[str, Any], rows: Sequence[Mapping[str, Any]]) -> list[str]:
    """The notes for ``results`` (paragraphs, possibly none)."""
    out = list(results.get("notes") or [])
    if results.get("device") == "cpu" and _touches_gate(results):
        out.append(cpu_note(rows, main_job=bool(results.get("main_job"))))
    elif results.get("device") == "cuda" and results.get("main_job"):
        note = gpu_note(results)
        if note:
            out.append(note)
    return out
