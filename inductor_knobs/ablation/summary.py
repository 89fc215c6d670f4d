"""Per-arm statistics of an ablation's records: one summary row per arm (:func:`summarize`).

Each successful process is one latency, the median of its samples; the arm's latency is the median of
those per-process medians, with a 95 % bootstrap interval over processes; its speedup is the ratio of
the baseline's and the arm's geometric means over processes, with a 95 % Student t-interval over both
arms' processes (:mod:`.stats`).  The verdict is ``faster`` or ``slower`` when that interval excludes
1.00x and ``no detectable difference`` when it contains it.  Arms belong to sections (this GPU, an
emulated smaller one); each section has its own baseline.
"""

from __future__ import annotations

import statistics
from collections.abc import Mapping
from typing import Any

from . import stats


def section_of(results: Mapping[str, Any]) -> dict[str, str]:
    """Arm name -> its section label ("" for the main section).

    Args:
        results (Mapping[str, Any]): a results.json's data.

    Returns:
        dict[str, str]: the label of every arm.
    """
    return {a["name"]: a.get("section") or "" for a in results["arms"]}


def _baseline_of(results: Mapping[str, Any], arm: Mapping[str, Any]) -> str:
    return str(arm.get("baseline") or results["baseline"])


def compile_source(row: Mapping[str, Any]) -> str:
    """Where a row's ``compile_seconds`` came from: ``cold`` (runs with empty caches), or ``reused binaries``
    where none of the arm's cold runs finished (``compile_cold`` False; rows of older files count as cold)."""
    return "cold" if row.get("compile_cold", True) else "reused binaries"


def _row(arm: Mapping[str, Any], runs: list[dict[str, Any]]) -> dict[str, Any]:
    good = [r for r in runs if r.get("ok")]
    row: dict[str, Any] = {"arm": arm["name"], "section": arm.get("section") or "", "runs": len(runs)}
    row["failed"] = len(runs) - len(good)
    if not good:
        row["error"] = runs[0]["error"] if runs else "not run"
        return row
    medians = stats.process_medians(good)
    interval = stats.median_interval(medians)
    # Compile time is the cold one: later repeats, which share the ablation's Triton binaries (``kernel_cache``
    # "shared", see workers) compile faster than a user's first compile would.  Only where none of the arm's
    # cold runs finished do they stand in, and the row says so (``compile_cold`` False).
    cold = [r for r in good if r.get("kernel_cache") != "shared"]
    compiled = cold or good
    kernel = [float(r["kernel_ms"]) for r in good if isinstance(r.get("kernel_ms"), (int, float))]
    calls = [r.get("gemm_calls") or {} for r in good]
    row.update(
        process_medians_ms=medians,
        median_ms=float(statistics.median(medians)),
        median_low_ms=interval.low if interval else None,
        median_high_ms=interval.high if interval else None,
        processes=len(medians),
        n=sum(len(r["samples_ms"]) for r in good),
        kernel_ms=float(statistics.median(kernel)) if kernel else None,
        kernel_process_ms=kernel,
        compile_seconds=statistics.median(r["compile_seconds"] for r in compiled),
        autotune_seconds=statistics.median(r["autotune_seconds"] for r in compiled),
        compile_processes=len(compiled),
        compile_cold=bool(cold),
        peak_memory_mib=max(r["peak_memory_bytes"] for r in good) / 2**20,
        max_abs_diff=max(r["max_abs_diff"] for r in good),
        mismatch=any(r["mismatch"] for r in good),
        not_applied=sorted({n for r in good for n in r.get("not_applied", [])}),
        kernels=good[0].get("kernels", {}),
        gemm_calls=calls[0],
        # Processes of one arm may autotune to different kernels: that is worth seeing.
        gemm_varies=any(c != calls[0] for c in calls),
    )
    return row


def summarize(results: Mapping[str, Any]) -> list[dict[str, Any]]:
    """One row per arm, in arm order.

    Args:
        results (Mapping[str, Any]): a results.json's data (``arms``, ``runs``, ``baseline``, …).

    Returns:
        list[dict[str, Any]]: rows with ``arm``, ``section``, ``baseline``, ``runs``, ``failed`` and, where a run
        succeeded, ``median_ms`` (median of per-process medians) and its interval
        (``median_low_ms``, ``median_high_ms``), ``processes``, ``n`` (samples), ``speedup`` (the ratio of
        geometric means over processes, :func:`.stats.speedup`),
        ``speedup_low``, ``speedup_high``, ``verdict``, ``kernel_ms`` (GPU kernel time per
        iteration, None off CUDA) and, where both arms have it, ``kernel_speedup`` with
        ``kernel_speedup_low``, ``kernel_speedup_high`` and ``kernel_verdict`` (the same statistics
        over the processes' kernel times: the GEMM choice without launch overhead),
        compile/autotune seconds, peak MiB, ``max_abs_diff``,
        ``mismatch``, ``not_applied``, ``kernels`` (autotune winners) and ``gemm_calls``;
        otherwise ``error``.  Intervals are None below :data:`.stats.MIN_PROCESSES` processes.
    """
    rows = []
    for arm in results["arms"]:
        row = _row(arm, [r for r in results["runs"] if r["arm"] == arm["name"]])
        row["baseline"] = _baseline_of(results, arm)
        rows.append(row)
    by_name = {r["arm"]: r for r in rows}
    for row in rows:
        base = by_name.get(row["baseline"])
        if base is None or "median_ms" not in base or "median_ms" not in row:
            continue
        row["speedup"] = stats.speedup(base["process_medians_ms"], row["process_medians_ms"])
        if row["arm"] == row["baseline"]:
            row["verdict"] = "baseline"
            continue
        if base.get("kernel_ms") and row.get("kernel_ms"):
            row["kernel_speedup"] = stats.speedup(base["kernel_process_ms"], row["kernel_process_ms"])
            kernel = stats.ratio_interval(base["kernel_process_ms"], row["kernel_process_ms"])
            if kernel is not None:
                row.update(kernel_speedup_low=kernel.low, kernel_speedup_high=kernel.high, kernel_verdict=kernel.verdict())
        interval = stats.ratio_interval(base["process_medians_ms"], row["process_medians_ms"])
        if interval is None:
            row["verdict"] = "n/a (smoke run)" if results.get("smoke") else f"n/a (< {stats.MIN_PROCESSES} processes)"
        else:
            row.update(speedup_low=interval.low, speedup_high=interval.high, verdict=interval.verdict())
    return rows
