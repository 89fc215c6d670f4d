"""Turn raw ablation records into statistics, a Markdown table, results.json/.csv and a plot.

Per arm (:func:`summarize`): each successful process is one latency, the median of its samples;
the arm's latency is the median of those per-process medians, with a 95 % bootstrap interval over
processes; its speedup is ``baseline latency / arm latency`` with a 95 % bootstrap interval over
both arms' processes (:mod:`.stats`).  The verdict is ``faster`` or ``slower`` when that interval
excludes 1.00x and ``no detectable difference`` when it contains it.  Arms belong to sections (this
GPU, an emulated smaller one); each section has its own baseline and table.

results.json keeps everything raw (every run's samples, load readings, attestations) plus the
``summary`` rows; ``schema`` is :data:`SCHEMA` (files without the key are schema 1, from before
per-process statistics, and still load for ``--compare`` and ``--merge``).
"""

from __future__ import annotations

import csv
import json
import os
import statistics
from collections.abc import Mapping
from typing import Any

from . import explain, load, stats

#: Every file :func:`write` may write into ``--out`` (what ``--overwrite`` removes first).
OUTPUT_FILES = ("results.json", "results.csv", "results.md", "results.png")

#: The keys :func:`summarize`, :func:`markdown`, :func:`compare` and :func:`merge` read.
REQUIRED_KEYS = ("workload", "baseline", "repeats", "arms", "runs")

#: results.json format: 2 adds per-process statistics, sections, load readings, kernel time and
#: the total wall time.  A newer file than this module reads is refused.
SCHEMA = 2

#: Processes per arm below which the table says its intervals are indicative (see :mod:`.stats`).
NOMINAL_PROCESSES = 5

CSV_COLUMNS = [
    "section",
    "arm",
    "baseline",
    "median_ms",
    "median_low_ms",
    "median_high_ms",
    "speedup",
    "speedup_low",
    "speedup_high",
    "verdict",
    "processes",
    "n",
    "kernel_ms",
    "kernel_speedup",
    "kernel_speedup_low",
    "kernel_speedup_high",
    "kernel_verdict",
    "compile_seconds",
    "autotune_seconds",
    "peak_memory_mib",
    "max_abs_diff",
    "mismatch",
    "not_applied",
    "gemm_kernels",
    "runs",
    "failed",
    "error",
]


def section_of(results: Mapping[str, Any]) -> dict[str, str]:
    """Arm name -> its section label ("" for the main section)."""
    return {a["name"]: a.get("section") or "" for a in results["arms"]}


def _baseline_of(results: Mapping[str, Any], arm: Mapping[str, Any]) -> str:
    return str(arm.get("baseline") or results["baseline"])


def _row(arm: Mapping[str, Any], runs: list[dict[str, Any]]) -> dict[str, Any]:
    good = [r for r in runs if r.get("ok")]
    row: dict[str, Any] = {"arm": arm["name"], "section": arm.get("section") or "", "runs": len(runs)}
    row["failed"] = len(runs) - len(good)
    if not good:
        row["error"] = runs[0]["error"] if runs else "not run"
        return row
    medians = stats.process_medians(good)
    interval = stats.median_interval(medians)
    # Compile time is the cold one: runs that reused the ablation's shared Triton binaries (repeat >= 1
    # on a GPU, see runner) compile faster than a user's first compile would.
    cold = [r for r in good if r.get("kernel_cache") != "shared"] or good
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
        compile_seconds=statistics.median(r["compile_seconds"] for r in cold),
        autotune_seconds=statistics.median(r["autotune_seconds"] for r in cold),
        compile_processes=len(cold),
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

    Returns:
        Rows with ``arm``, ``section``, ``baseline``, ``runs``, ``failed`` and, where a run
        succeeded, ``median_ms`` (median of per-process medians) and its interval
        (``median_low_ms``, ``median_high_ms``), ``processes``, ``n`` (samples), ``speedup``,
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
        row["speedup"] = base["median_ms"] / row["median_ms"]
        if row["arm"] == row["baseline"]:
            row["verdict"] = "baseline"
            continue
        if base.get("kernel_ms") and row.get("kernel_ms"):
            row["kernel_speedup"] = base["kernel_ms"] / row["kernel_ms"]
            kernel = stats.ratio_interval(base["kernel_process_ms"], row["kernel_process_ms"])
            if kernel is not None:
                row.update(kernel_speedup_low=kernel.low, kernel_speedup_high=kernel.high, kernel_verdict=kernel.verdict())
        interval = stats.ratio_interval(base["process_medians_ms"], row["process_medians_ms"])
        if interval is None:
            row["verdict"] = "n/a (smoke run)" if results.get("smoke") else f"n/a (< {stats.MIN_PROCESSES} processes)"
        else:
            row.update(speedup_low=interval.low, speedup_high=interval.high, verdict=interval.verdict())
    return rows


def _sections(rows: list[dict[str, Any]]) -> list[tuple[str, list[dict[str, Any]]]]:
    order: list[str] = []
    for r in rows:
        if r["section"] not in order:
            order.append(r["section"])
    return [(s, [r for r in rows if r["section"] == s]) for s in order]


def _interval(value: float, low: float | None, high: float | None, fmt: str, unit: str = "") -> str:
    if unit == "x" and low is not None and high is not None and (high < 1 or low > 1):
        # An interval that excludes 1.00x must not print as "[0.92–1.00]" beside "slower": one more digit.
        if f"{1:{fmt}}" in (f"{low:{fmt}}", f"{high:{fmt}}"):
            fmt = ".3f"
    text = f"{value:{fmt}}{unit}"
    return text + (f" [{low:{fmt}}–{high:{fmt}}]" if low is not None and high is not None else "")


def _gemm_cell(row: Mapping[str, Any]) -> str:
    cell = explain.gemm_summary(row.get("gemm_calls") or {})
    if row.get("gemm_varies"):
        cell += " (varies between processes)"
    if row.get("kernels"):
        cell += "; autotuned: " + "; ".join(f"{k}: {v}" for k, v in row["kernels"].items())
    return cell[:160]


def _table(rows: list[dict[str, Any]], loaded: bool = False) -> list[str]:
    """``loaded``: a load warning stands below, so a latency verdict of faster/slower points to it."""
    lines = [
        "| arm | latency ms [95% CI] | speedup [95% CI] | verdict | processes | GPU kernel ms; speedup [95% CI] "
        "| compile s | autotune s | peak MiB | max abs diff | GEMM kernels |",
        "|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        if not r["runs"]:  # an interrupted ablation, or a shard without this arm
            lines.append(f"| {r['arm']} | not run | | | | | | | | | |")
            continue
        if "median_ms" not in r:
            lines.append(f"| {r['arm']} | FAILED ({r['failed']}/{r['runs']}): {r['error'][:80]} | | | | | | | | | |")
            continue
        latency = _interval(r["median_ms"], r.get("median_low_ms"), r.get("median_high_ms"), ".4f")
        speed = _interval(r["speedup"], r.get("speedup_low"), r.get("speedup_high"), ".2f", "x") if "speedup" in r else "n/a"
        diff = f"{r['max_abs_diff']:.2e}" + (" **MISMATCH**" if r["mismatch"] else "")
        if r.get("not_applied"):
            diff += " **NOT APPLIED**"
        kernel = f"{r['kernel_ms']:.4f}" if r.get("kernel_ms") is not None else "-"
        if "kernel_speedup" in r:
            kernel += "; " + _interval(r["kernel_speedup"], r.get("kernel_speedup_low"), r.get("kernel_speedup_high"), ".2f", "x")
            kernel += f" {r['kernel_verdict']}" if "kernel_verdict" in r else ""
        failed = f" ({r['failed']} failed)" if r["failed"] else ""
        lines.append(
            f"| {r['arm']}{failed} | {latency} | {speed} | {_verdict(r, loaded)} | {r['processes']} | {kernel} | "
            f"{r['compile_seconds']:.2f} | {r['autotune_seconds']:.2f} | {r['peak_memory_mib']:.0f} | {diff} | {_gemm_cell(r)} |"
        )
    return lines


def _verdict(row: Mapping[str, Any], loaded: bool) -> str:
    verdict = str(row.get("verdict", "n/a"))
    # A changing or busy machine can make an interval exclude 1.00x by itself: say so in the cell.
    return verdict + " (see LOAD WARNING)" if loaded and verdict in ("faster", "slower") else verdict


def _head(results: Mapping[str, Any]) -> str:
    env = results.get("environment", {})
    # --smoke with --repeats >= 3 still has enough processes for intervals (summarize computes them).
    repeats = int(results.get("repeats") or 0)
    no_intervals = bool(results.get("smoke")) and repeats < stats.MIN_PROCESSES
    head = (
        f"workload `{results['workload']}` on {env.get('device_name', results.get('device'))}, torch {env.get('torch')}, "
        f"{results['repeats']} process(es) per arm, {results.get('iters', '?')} samples each, interleaved; "
        + ("**smoke run: no confidence intervals**" if no_intervals else "95% percentile-bootstrap intervals over processes")
        + ("; smoke run (quick inputs)" if results.get("smoke") and not no_intervals else "")
    )
    if results.get("emulate_sms"):
        head += f"; every arm under emulated {results['emulate_sms']} (SM emulation)"
    if int(results.get("parallel") or 1) > 1:
        head += (
            f"; {results['parallel']} processes per GPU started and compiled at once, measurements one at a time; "
            "compile s is the cold compile of each arm's first process (later processes reused the run's Triton "
            "binaries), timed while other processes compiled beside it; the load rule checks only SM clocks here "
            "(--parallel 1 for the full check)"
        )
    if isinstance(results.get("wall_seconds"), (int, float)):
        gpus = results.get("gpus") or []
        head += f"; whole run {results['wall_seconds']:.0f} s" + (f" on {len(gpus)} GPU(s)" if gpus else "")
    if not no_intervals and 0 < repeats < NOMINAL_PROCESSES:
        head += (
            f". With {results['repeats']} processes per arm the intervals are indicative (about 90% coverage, close to "
            f"the processes' range); --repeats {NOMINAL_PROCESSES} or more for 95%"
        )
    if results.get("partial"):
        planned = results.get("planned_runs")
        head += (
            f"\n\n**PARTIAL**: interrupted by {results.get('interrupted', 'a signal')} after {len(results['runs'])}"
            + (f" of {planned}" if planned else "")
            + " runs; the table shows the runs that finished."
        )
    return head


def _main_section(results: Mapping[str, Any]) -> str:
    name = (results.get("environment") or {}).get("device_name")
    return f"this GPU ({name})" if name and results.get("device") == "cuda" else "this machine"


def load_warnings(results: Mapping[str, Any]) -> list[str]:
    """The load rule's warnings for ``results`` (see :mod:`.load`)."""
    cores = (results.get("machine") or {}).get("cpu_count")
    parallel = int(results.get("parallel") or 1)
    return load.load_warnings(results["runs"], cores, section_of(results), results.get("device"), parallel)


def markdown(results: dict[str, Any], rows: list[dict[str, Any]] | None = None) -> str:
    """The report: notes, one table per section (its baseline named), legend, warnings, failures."""
    rows = rows if rows is not None else summarize(results)
    warnings = load_warnings(results)
    lines = [_head(results)]
    for note in explain.notes(results, rows):
        lines += ["", note]
    sections = _sections(rows)
    for section, section_rows in sections:
        lines.append("")
        if len(sections) > 1 or section:
            lines += [f"**{section or _main_section(results)}**", ""]
        base = section_rows[0]["baseline"] if section_rows else results["baseline"]
        lines.append(f"baseline `{base}`; speedup = baseline latency / arm latency (> 1: faster)")
        lines.append("")
        lines += _table(section_rows, loaded=bool(warnings))
    if any(r.get("verdict") in ("faster", "slower", stats.NO_DIFFERENCE) for r in rows):
        lines.append(
            f"\nverdict: `faster` / `slower` when the 95% interval of the speedup excludes 1.00x; `{stats.NO_DIFFERENCE}` "
            "when it contains 1.00x. Latency is the median over processes of each process's median; the process is "
            "the unit of the intervals."
        )
    for warning in warnings:
        lines.append(f"\n**LOAD WARNING**: {warning}.")
    for r in rows:
        for item in r.get("not_applied", []):
            lines.append(f"\n**NOT APPLIED** in arm {r['arm']}: {item}; this arm did not measure what it asked for.")
    for run in results["runs"]:
        if not run.get("ok"):
            tail = run.get("traceback", "").strip().splitlines()[-3:]
            lines.append(f"\n{run['arm']} repeat {run['repeat']} failed: {run['error']}" + "".join(f"\n    {t}" for t in tail))
    lines += time_table(results)
    return "\n".join(lines)


#: The worker's phases in the time table (``phase_seconds``, see :mod:`.worker`), and their headers.
PHASES = (
    ("import", "import"),
    ("build", "build + eager"),
    ("compile", "compile"),
    ("autotune", "of which autotune"),
    ("wait", "wait for GPU"),
    ("measure", "measure"),
    ("extras", "profile"),
    ("shutdown", "shutdown"),
)


def _phases(run: Mapping[str, Any]) -> dict[str, float]:
    """One run's seconds per :data:`PHASES` entry, plus ``start/exit`` (the interpreter's start and
    exit: the run's wall time less its phases) and ``wall``."""
    phases = {k: float(v) for k, v in (run.get("phase_seconds") or {}).items() if isinstance(v, (int, float))}
    out = {key: phases.get(key, 0.0) for key, _ in PHASES if key != "autotune"}
    out["autotune"] = float(run.get("autotune_seconds") or 0.0)
    wall = float(run.get("wall_seconds") or 0.0)
    out["start/exit"] = max(0.0, wall - sum(phases.values()))
    out["wall"] = wall
    return out


def time_table(results: Mapping[str, Any]) -> list[str]:
    """Where the time went: per arm the median seconds of each phase over its runs, and the sums over
    all runs; empty when no run recorded its phases (older files)."""
    runs = [r for r in results["runs"] if r.get("phase_seconds")]
    if not runs:
        return []
    keys = ["start/exit", *(k for k, _ in PHASES), "wall"]
    names = {"start/exit": "start/exit", "wall": "run wall", **dict(PHASES)}
    lines = [
        "",
        "**Where the time went** (seconds; per arm the median over its processes, cold and warm alike; last row: the "
        "sum over all runs)",
        "",
        "| arm | runs | " + " | ".join(names[k] for k in keys) + " |",
        "|---|---|" + "---|" * len(keys),
    ]
    for arm in results["arms"]:
        mine = [_phases(r) for r in runs if r["arm"] == arm["name"]]
        if mine:
            cells = " | ".join(f"{statistics.median(p[k] for p in mine):.1f}" for k in keys)
            lines.append(f"| {arm['name']} | {len(mine)} | {cells} |")
    every = [_phases(r) for r in runs]
    lines.append("| all runs (sum) | " + f"{len(every)} | " + " | ".join(f"{sum(p[k] for p in every):.0f}" for k in keys) + " |")
    wall = results.get("wall_seconds")
    if isinstance(wall, (int, float)) and wall > 0:
        total = sum(p["wall"] for p in every)
        parallel = int(results.get("parallel") or 1)
        lines.append(
            f"\nThe runs took {total:.0f} s of process time in {wall:.0f} s of wall time "
            f"({total / wall:.1f} processes busy on average; up to {parallel} per GPU at once)"
            + (
                f"; before the first run the command spent {results['setup_seconds']:.1f} s (imports, checks, plan)"
                if isinstance(results.get("setup_seconds"), (int, float))
                else ""
            )
            + "."
        )
    return lines


def _csv_row(row: Mapping[str, Any]) -> dict[str, Any]:
    return {**row, "gemm_kernels": explain.gemm_summary(row.get("gemm_calls") or {}) if "median_ms" in row else ""}


def write(results: dict[str, Any], out: str, plot: bool = False) -> list[str]:
    """Write results.json (everything, raw samples included), results.csv (one row per arm),
    results.md (the report) and, with ``plot``, results.png.

    Returns:
        The paths written.

    Raises:
        NotSupportedOnThisTorch: ``plot`` without matplotlib (the command checks this before running).
    """
    os.makedirs(out, exist_ok=True)
    rows = summarize(results)
    written = [os.path.join(out, "results.json"), os.path.join(out, "results.csv"), os.path.join(out, "results.md")]
    with open(written[0], "w", encoding="utf-8") as dst:
        json.dump({"schema": SCHEMA, **results, "summary": rows}, dst, indent=2, default=str)
    with open(written[1], "w", newline="", encoding="utf-8") as dst:
        writer = csv.DictWriter(dst, fieldnames=CSV_COLUMNS, extrasaction="ignore")
        writer.writeheader()
        writer.writerows(_csv_row(r) for r in rows)
    with open(written[2], "w", encoding="utf-8") as dst:
        dst.write(markdown(results, rows) + "\n")
    if plot:
        from .plot import plot as draw

        where = (results.get("environment") or {}).get("device_name") or results.get("device")
        written.append(draw(rows, os.path.join(out, "results.png"), f"{results['workload']} on {where}"))
    return written


def compare(old: dict[str, Any], new: dict[str, Any]) -> str:
    """What changed between two results.json files, per arm: latency ratio new/old with a 95 %
    bootstrap interval over both files' processes, compile time, GEMM kernels."""
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
        ci = f"{interval.low:.3f}–{interval.high:.3f}" if interval else "n/a"
        verdict = "n/a" if interval is None else ("no detectable change" if interval.contains(1.0) else "changed")
        changed = sorted(k for k in set(prev["kernels"]) | set(row["kernels"]) if prev["kernels"].get(k) != row["kernels"].get(k))
        if prev.get("gemm_calls") != row.get("gemm_calls"):
            old_calls, new_calls = (explain.gemm_summary(r.get("gemm_calls") or {}) for r in (prev, row))
            changed.append(f"GEMM calls {old_calls} -> {new_calls}")
        lines.append(
            f"| {row['arm']} | {prev['median_ms']:.4f} | {row['median_ms']:.4f} | {row['median_ms'] / prev['median_ms']:.3f} | "
            f"{ci} | {verdict} | {prev['compile_seconds']:.2f} | {row['compile_seconds']:.2f} | {', '.join(changed) or 'none'} |"
        )
    return "\n".join(lines)


def check(data: Any, source: str) -> dict[str, Any]:
    """``data`` if it looks like a results.json that this module can read.

    Args:
        data: the parsed JSON.
        source: what to name in the error, e.g. ``--compare 'old/results.json'``.

    Raises:
        InvalidKnobValue: not an object, a required key missing, or a newer schema than :data:`SCHEMA`.
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
    schema = data.get("schema", 1)
    if not isinstance(schema, int) or schema > SCHEMA:
        raise InvalidKnobValue(
            f"{source} has results schema {schema!r}: allowed 1..{SCHEMA}; it was written by a newer inductor-knobs"
        )
    return data


def _settings(arm: dict[str, Any]) -> dict[str, Any]:
    return {k: arm.get(k) or None for k in ("knobs", "compile_args", "eager", "emulate")}


def differences(old: dict[str, Any], new: dict[str, Any]) -> list[str]:
    """What makes two results not comparable: quick, smoke, repeats, iterations, workload, device,
    torch, SM emulation, an interrupted run, or an arm of the same name with other settings.

    Returns:
        One sentence per difference (empty: comparable).
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

    The processes of all shards are concatenated: each is one more replicate of its arm, whichever
    machine ran it.  Each shard's total wall time is kept in ``shard_wall_seconds``.

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
    merged.pop("summary", None)  # recomputed from the merged runs
    merged["shard_wall_seconds"] = [p.get("wall_seconds") for p in parts]
    merged.pop("wall_seconds", None)  # one shard's, not the merge's
    for part in parts:  # a shard that was interrupted leaves the merge partial
        if part.get("partial"):
            merged.update(partial=True, interrupted=part.get("interrupted"))
    return merged
