"""``ablate --compare OLD NEW``: what changed between two results.json files (:func:`compare`), and what
makes them not comparable (:func:`differences`).
"""

from __future__ import annotations

from typing import Any

from . import explain, stats
from .summary import compile_source, summarize


def compare(old: dict[str, Any], new: dict[str, Any]) -> str:
    """What changed between two results.json files, per arm: latency ratio new/old (geometric means over
    processes) with its 95 % interval over both files' processes (:func:`.stats.ratio_interval`), compile
    time, GEMM kernels.

    Args:
        old (dict[str, Any]): the earlier results.json's data.
        new (dict[str, Any]): the later one's.

    Returns:
        str: a Markdown table.
    """
    before = {r["arm"]: r for r in summarize(old)}
    lines = [
        "| arm | old median ms | new median ms | new/old | 95% CI | verdict | old compile s | new compile s | kernels changed |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for row in summarize(new):
        prev = before.get(row["arm"])
        if prev is None or "median_ms" not in prev or "median_ms" not in row:
            old_ms = "-" if prev is None else prev.get("median_ms", "failed")
            lines.append(f"| {row['arm']} | {old_ms} | {row.get('median_ms', 'failed')} | | | | | | |")
            continue
        # new/old latency: the old file plays the baseline's part with the ratio inverted.
        interval = stats.ratio_interval(row["process_medians_ms"], prev["process_medians_ms"])
        ratio = stats.speedup(row["process_medians_ms"], prev["process_medians_ms"])
        ci = f"{interval.low:.3f}–{interval.high:.3f}" if interval else "n/a"
        verdict = "n/a" if interval is None else ("no detectable change" if interval.contains(1.0) else "changed")
        changed = sorted(k for k in set(prev["kernels"]) | set(row["kernels"]) if prev["kernels"].get(k) != row["kernels"].get(k))
        if prev.get("gemm_calls") != row.get("gemm_calls"):
            old_calls, new_calls = (explain.gemm_summary(r.get("gemm_calls") or {}) for r in (prev, row))
            changed.append(f"GEMM calls {old_calls} -> {new_calls}")
        lines.append(
            f"| {row['arm']} | {prev['median_ms']:.4f} | {row['median_ms']:.4f} | {ratio:.3f} | "
            f"{ci} | {verdict} | {_compile_cell(prev)} | {_compile_cell(row)} | {', '.join(changed) or 'none'} |"
        )
    return "\n".join(lines)


def _compile_cell(row: dict[str, Any]) -> str:
    """An arm's compile seconds, marked where they come from later repeats, which shared Triton binaries (no cold run
    finished: ``compile_cold`` False, see :mod:`.summary`)."""
    source = compile_source(row)
    return f"{row['compile_seconds']:.2f}" + ("" if source == "cold" else f" ({source})")


def _settings(arm: dict[str, Any]) -> dict[str, Any]:
    return {k: arm.get(k) or None for k in ("knobs", "compile_args", "eager", "emulate")}


def differences(old: dict[str, Any], new: dict[str, Any]) -> list[str]:
    """What makes two results not comparable: quick, smoke, repeats, iterations, workload, device,
    torch, SM emulation, a partial run (interrupted, or a merge without every shard), or an arm of the same name
    with other settings.

    Args:
        old (dict[str, Any]): the earlier results.json's data.
        new (dict[str, Any]): the later one's.

    Returns:
        list[str]: one sentence per difference (empty: comparable).
    """
    out = []

    def env(results: dict[str, Any], key: str) -> Any:
        return (results.get("environment") or {}).get(key)

    checks = [
        ("workload", old.get("workload"), new.get("workload")),
        ("quick", bool(old.get("quick")), bool(new.get("quick"))),
        ("smoke", bool(old.get("smoke")), bool(new.get("smoke"))),
        ("repeats", old.get("repeats"), new.get("repeats")),
        ("iters", old.get("iters"), new.get("iters")),
        ("device", old.get("device"), new.get("device")),
        ("device name", env(old, "device_name"), env(new, "device_name")),
        ("torch version", env(old, "torch"), env(new, "torch")),
        ("emulate_sms", old.get("emulate_sms"), new.get("emulate_sms")),
        ("partial (interrupted, or shards missing)", bool(old.get("partial")), bool(new.get("partial"))),
    ]
    for what, a, b in checks:
        if a != b:
            out.append(f"the results differ in {what}: old {a!r}, new {b!r}")
    before = {a.get("name"): a for a in old.get("arms", [])}
    for arm in new.get("arms", []):
        prev = before.get(arm.get("name"))
        if prev is not None and _settings(prev) != _settings(arm):
            out.append(f"arm {arm.get('name')} has other settings: old {_settings(prev)}, new {_settings(arm)}")
    return out
