"""Turn raw ablation records into statistics, a Markdown table, results.json/.csv and a plot.

Latency per arm pools the steady-state samples of all its repeats: median, IQR (25th–75th
percentile) and n.  Speedup is the baseline's median over the arm's.  Where the two IQRs overlap
the table says so (``~``): the difference is within the spread of the samples.
"""

from __future__ import annotations

import csv
import json
import os
import statistics
from typing import Any

#: Every file :func:`write` may write into ``--out`` (what ``--overwrite`` removes first).
OUTPUT_FILES = ("results.json", "results.csv", "results.md", "results.png")

#: The keys :func:`summarize`, :func:`markdown`, :func:`compare` and :func:`merge` read.
REQUIRED_KEYS = ("workload", "baseline", "repeats", "arms", "runs")


def _quantiles(samples: list[float]) -> tuple[float, float, float]:
    if len(samples) == 1:
        return samples[0], samples[0], samples[0]
    q1, q2, q3 = statistics.quantiles(samples, n=4, method="inclusive")
    return q1, q2, q3


def summarize(results: dict[str, Any]) -> list[dict[str, Any]]:
    """One row per arm, in arm order: latency stats, compile/autotune seconds, memory, kernels, errors."""
    baseline = results["baseline"]
    rows = []
    for arm in results["arms"]:
        runs = [r for r in results["runs"] if r["arm"] == arm["name"]]
        good = [r for r in runs if r.get("ok")]
        row: dict[str, Any] = {"arm": arm["name"], "runs": len(runs), "failed": len(runs) - len(good)}
        if good:
            samples = [s for r in good for s in r["samples_ms"]]
            q1, median, q3 = _quantiles(samples)
            row.update(
                median_ms=median,
                q1_ms=q1,
                q3_ms=q3,
                n=len(samples),
                compile_seconds=statistics.median(r["compile_seconds"] for r in good),
                autotune_seconds=statistics.median(r["autotune_seconds"] for r in good),
                peak_memory_mib=max(r["peak_memory_bytes"] for r in good) / 2**20,
                max_abs_diff=max(r["max_abs_diff"] for r in good),
                mismatch=any(r["mismatch"] for r in good),
                not_applied=sorted({n for r in good for n in r.get("not_applied", [])}),
                kernels=good[0]["kernels"],
            )
        else:
            row["error"] = runs[0]["error"] if runs else "not run"
        rows.append(row)
    base = next((r for r in rows if r["arm"] == baseline and "median_ms" in r), None)
    for row in rows:
        if base is not None and "median_ms" in row:
            row["speedup"] = base["median_ms"] / row["median_ms"]
            row["overlaps_baseline"] = row["arm"] != baseline and row["q1_ms"] <= base["q3_ms"] and base["q1_ms"] <= row["q3_ms"]
    return rows


def markdown(results: dict[str, Any], rows: list[dict[str, Any]] | None = None) -> str:
    """The results table, with the baseline, the environment line and failures' error tails."""
    rows = rows if rows is not None else summarize(results)
    env = results.get("environment", {})
    head = (
        f"workload `{results['workload']}` on {env.get('device_name', results.get('device'))}, torch {env.get('torch')}, "
        f"{results['repeats']} process(es) per arm, interleaved; baseline `{results['baseline']}`"
    )
    if results.get("partial"):
        planned = results.get("planned_runs")
        head += (
            f"\n\n**PARTIAL**: interrupted by {results.get('interrupted', 'a signal')} after {len(results['runs'])}"
            + (f" of {planned}" if planned else "")
            + " runs; the table shows the runs that finished."
        )
    lines = [
        head,
        "",
        "| arm | median ms | IQR ms | n | speedup | compile s | autotune s | peak MiB | max abs diff | kernels chosen |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        if not r["runs"]:  # an interrupted ablation, or a shard without this arm
            lines.append(f"| {r['arm']} | not run | | | | | | | | |")
            continue
        if "median_ms" not in r:
            lines.append(f"| {r['arm']} | FAILED ({r['failed']}/{r['runs']}): {r['error'][:80]} | | | | | | | | |")
            continue
        speed = f"{r['speedup']:.2f}x" + (" ~" if r.get("overlaps_baseline") else "") if "speedup" in r else "n/a"
        diff = f"{r['max_abs_diff']:.2e}" + (" **MISMATCH**" if r["mismatch"] else "")
        if r.get("not_applied"):
            diff += " **NOT APPLIED**"
        kernels = "; ".join(f"{k}: {v}" for k, v in r["kernels"].items())[:120] or "-"
        failed = f" ({r['failed']} failed)" if r["failed"] else ""
        lines.append(
            f"| {r['arm']}{failed} | {r['median_ms']:.4f} | {r['q1_ms']:.4f}–{r['q3_ms']:.4f} | {r['n']} | {speed} | "
            f"{r['compile_seconds']:.2f} | {r['autotune_seconds']:.2f} | {r['peak_memory_mib']:.0f} | {diff} | {kernels} |"
        )
    if any(r.get("overlaps_baseline") for r in rows):
        lines.append("\n`~`: the arm's IQR overlaps the baseline's; the difference is within the spread of the samples.")
    for r in rows:
        for item in r.get("not_applied", []):
            lines.append(f"\n**NOT APPLIED** in arm {r['arm']}: {item}; this arm did not measure what it asked for.")
    for run in results["runs"]:
        if not run.get("ok"):
            tail = run.get("traceback", "").strip().splitlines()[-3:]
            lines.append(f"\n{run['arm']} repeat {run['repeat']} failed: {run['error']}" + "".join(f"\n    {t}" for t in tail))
    return "\n".join(lines)


def write(results: dict[str, Any], out: str, plot: bool = False) -> list[str]:
    """Write results.json (everything, raw samples included), results.csv (one row per arm),
    results.md (the table) and, with ``plot``, results.png.

    Returns:
        The paths written.

    Raises:
        NotSupportedOnThisTorch: ``plot`` without matplotlib (the command checks this before running).
    """
    os.makedirs(out, exist_ok=True)
    rows = summarize(results)
    written = [os.path.join(out, "results.json"), os.path.join(out, "results.csv"), os.path.join(out, "results.md")]
    with open(written[0], "w", encoding="utf-8") as dst:
        json.dump({**results, "summary": rows}, dst, indent=2, default=str)
    columns = [
        "arm",
        "median_ms",
        "q1_ms",
        "q3_ms",
        "n",
        "speedup",
        "compile_seconds",
        "autotune_seconds",
        "peak_memory_mib",
        "max_abs_diff",
        "mismatch",
        "not_applied",
        "runs",
        "failed",
        "error",
    ]
    with open(written[1], "w", newline="", encoding="utf-8") as dst:
        writer = csv.DictWriter(dst, fieldnames=columns, extrasaction="ignore")
        writer.writeheader()
        writer.writerows(rows)
    with open(written[2], "w", encoding="utf-8") as dst:
        dst.write(markdown(results, rows) + "\n")
    if plot:
        written.append(_plot(rows, os.path.join(out, "results.png"), results["workload"]))
    return written


def _plot(rows: list[dict[str, Any]], path: str, title: str) -> str:
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError as err:
        from ..errors import NotSupportedOnThisTorch

        raise NotSupportedOnThisTorch("--plot needs matplotlib: pip install 'inductor-knobs[plot]'") from err
    ok = [r for r in rows if "median_ms" in r]
    fig, (lat, scatter) = plt.subplots(1, 2, figsize=(12, 4.5))
    lat.bar(
        [r["arm"] for r in ok],
        [r["median_ms"] for r in ok],
        yerr=[[r["median_ms"] - r["q1_ms"] for r in ok], [r["q3_ms"] - r["median_ms"] for r in ok]],
        capsize=4,
    )
    lat.set_ylabel("latency, ms (median, IQR)")
    lat.tick_params(axis="x", rotation=30)
    for r in ok:
        scatter.scatter(r["compile_seconds"], r.get("speedup", 1.0))
        scatter.annotate(r["arm"], (r["compile_seconds"], r.get("speedup", 1.0)), fontsize=8)
    scatter.set_xlabel("compile seconds (cold, median)")
    scatter.set_ylabel("speedup vs baseline")
    fig.suptitle(title)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return path


def compare(old: dict[str, Any], new: dict[str, Any]) -> str:
    """What changed between two results.json files: per arm, latency ratio, compile time, kernels."""
    before = {r["arm"]: r for r in summarize(old)}
    lines = [
        "| arm | old median ms | new median ms | new/old | old compile s | new compile s | kernels changed |",
        "|---|---|---|---|---|---|---|",
    ]
    for row in summarize(new):
        prev = before.get(row["arm"])
        if prev is None or "median_ms" not in prev or "median_ms" not in row:
            old_ms = "-" if prev is None else prev.get("median_ms", "failed")
            lines.append(f"| {row['arm']} | {old_ms} | {row.get('median_ms', 'failed')} | | | | |")
            continue
        changed = sorted(k for k in set(prev["kernels"]) | set(row["kernels"]) if prev["kernels"].get(k) != row["kernels"].get(k))
        lines.append(
            f"| {row['arm']} | {prev['median_ms']:.4f} | {row['median_ms']:.4f} | {row['median_ms'] / prev['median_ms']:.3f} | "
            f"{prev['compile_seconds']:.2f} | {row['compile_seconds']:.2f} | {', '.join(changed) or 'none'} |"
        )
    return "\n".join(lines)


def check(data: Any, source: str) -> dict[str, Any]:
    """``data`` if it looks like a results.json that this module can read.

    Args:
        data: the parsed JSON.
        source: what to name in the error, e.g. ``--compare 'old/results.json'``.

    Raises:
        InvalidKnobValue: not an object, or a required key missing.
    """
    from ..errors import InvalidKnobValue

    if not isinstance(data, dict):
        raise InvalidKnobValue(f"{source} is not an ablation results.json: a JSON {type(data).__name__}, not an object")
    missing = [k for k in REQUIRED_KEYS if k not in data]
    if missing or not isinstance(data["runs"], list) or not isinstance(data["arms"], list):
        raise InvalidKnobValue(
            f"{source} is not an ablation results.json: "
            + (f"missing {', '.join(missing)}" if missing else "'runs' and 'arms' must be lists")
            + f"; allowed: what `inductor-knobs ablate --out` writes ({', '.join(REQUIRED_KEYS)}, ...)"
        )
    return data


def _settings(arm: dict[str, Any]) -> dict[str, Any]:
    return {k: arm.get(k) or None for k in ("knobs", "compile_args", "eager")}


def differences(old: dict[str, Any], new: dict[str, Any]) -> list[str]:
    """What makes two results not comparable: quick, repeats, iterations, workload, device, torch,
    SM emulation, an interrupted run, or an arm of the same name with other settings.

    Returns:
        One sentence per difference (empty: comparable).
    """
    out = []

    def env(results: dict[str, Any], key: str) -> Any:
        return (results.get("environment") or {}).get(key)

    checks = [
        ("workload", old.get("workload"), new.get("workload")),
        ("quick", bool(old.get("quick")), bool(new.get("quick"))),
        ("repeats", old.get("repeats"), new.get("repeats")),
        ("iters", old.get("iters"), new.get("iters")),
        ("device", old.get("device"), new.get("device")),
        ("device name", env(old, "device_name"), env(new, "device_name")),
        ("torch version", env(old, "torch"), env(new, "torch")),
        ("emulate_sms", old.get("emulate_sms"), new.get("emulate_sms")),
        ("partial (interrupted)", bool(old.get("partial")), bool(new.get("partial"))),
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


def merge(parts: list[dict[str, Any]]) -> dict[str, Any]:
    """Merge shard results.json files of one ablation (same workload and arms) into one.

    Raises:
        InvalidKnobValue: the parts come from different ablations.
    """
    from ..errors import InvalidKnobValue

    first = parts[0]
    for part in parts[1:]:
        if part["workload"] != first["workload"] or part["arms"] != first["arms"]:
            raise InvalidKnobValue("--merge: the files come from different ablations (workload or arms differ)")
    runs = sorted((r for p in parts for r in p["runs"]), key=lambda r: r["index"])
    merged = {**first, "runs": runs, "shard": None, "merged_from": len(parts), "partial": False}
    merged.pop("planned_runs", None)  # a shard's count, not the merge's
    merged.pop("interrupted", None)
    for part in parts:  # a shard that was interrupted leaves the merge partial
        if part.get("partial"):
            merged.update(partial=True, interrupted=part.get("interrupted"))
    return merged
