"""The Markdown report of an ablation: notes, one table per section, legend, warnings, failures and
where the time went (:func:`markdown`), from the summary rows of :mod:`.summary`.
"""

from __future__ import annotations

import statistics
from collections.abc import Mapping
from typing import Any

from . import explain, load, stats
from .merge import describe
from .summary import compile_source, section_of, summarize

#: Processes per arm below which the table says what an arm's latency interval covers (see :mod:`.stats`).
NOMINAL_PROCESSES = 5

#: Differences a mixed merge's paragraph lists (the rest are counted; results.json keeps all).
MIXED_SHOWN = 8


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


def _head(results: Mapping[str, Any], rows: list[dict[str, Any]]) -> str:
    env = results.get("environment", {})
    # --smoke with --repeats >= 3 still has enough processes for intervals (summarize computes them).
    repeats = int(results.get("repeats") or 0)
    no_intervals = bool(results.get("smoke")) and repeats < stats.MIN_PROCESSES
    head = (
        f"workload `{results['workload']}` on {env.get('device_name', results.get('device'))}, torch {env.get('torch')}, "
        f"{_processes_per_arm(results, rows)}, {results.get('iters', '?')} samples each, interleaved; "
        + ("**smoke run: no confidence intervals**" if no_intervals else _method(rows, repeats))
        + ("; smoke run (quick inputs)" if results.get("smoke") and not no_intervals else "")
    )
    if results.get("emulate_sms"):
        head += f"; every arm under emulated {results['emulate_sms']} ({explain.EMULATION_MEANS})"
    quiet = explain.quiet_note(results)
    if quiet:
        head += f"; {quiet}"
    if int(results.get("parallel") or 1) > 1:
        runs = results.get("runs") or []
        shared = sum(1 for r in runs if r.get("kernel_cache") == "shared")
        head += (
            "; compile s is the median over each arm's processes that compiled with empty caches"
            + (f" (the {shared} of {len(runs)} later repeats, which share Triton binaries, are left out)" if shared else "")
            + f", timed while up to {results['parallel']} processes compiled at once; the load rule "
            "checks only SM clocks here (--parallel 1 for the full check)"
        )
    not_cold = [str(r["arm"]) for r in rows if compile_source(r) != "cold"]
    if not_cold:
        reused = "is from later repeats, which shared their Triton binaries (no cold run finished)"
        head += f"; compile s of {', '.join(not_cold)} {reused}"
    if isinstance(results.get("wall_seconds"), (int, float)):
        gpus = results.get("gpus") or []
        head += f"; whole run {results['wall_seconds']:.0f} s" + (f" on {len(gpus)} GPU(s)" if gpus else "")
    present = min((r["runs"] for r in rows if r["runs"]), default=repeats)
    if not no_intervals and 0 < present < stats.MIN_PROCESSES:
        head += f". With {present} processes per arm there are no intervals and no verdicts: they need {stats.MIN_PROCESSES}"
    elif not no_intervals and stats.MIN_PROCESSES <= present < NOMINAL_PROCESSES:
        head += (
            f". With {present} processes per arm an arm's latency interval is the range of its processes, which "
            f"contains the median of their distribution {1 - 2 ** (1 - present):.0%} of the time; --repeats "
            f"{NOMINAL_PROCESSES} or more for about 95% (the speedups' intervals hold at {present})"
        )
    if results.get("partial"):
        planned = results.get("planned_runs")
        why = []
        if results.get("missing_shards"):
            why.append(f"shard(s) {', '.join(results['missing_shards'])} not merged")
        if results.get("interrupted") or not why:
            why.append(f"interrupted by {results.get('interrupted') or 'a signal'}")
        head += (
            f"\n\n**PARTIAL**: {' and '.join(why)}: {len(results['runs'])}"
            + (f" of {planned}" if planned else "")
            + " runs; the table shows the runs that finished."
        )
    return head


def _method(rows: list[dict[str, Any]], repeats: int) -> str:
    """The speedups' method, its unit of replication and its measured false-verdict rate (:data:`.stats.FALSE_VERDICTS`)
    at the largest measured count of processes per arm that the arms reach."""
    present = min((int(r["processes"]) for r in rows if r.get("processes")), default=repeats)
    measured = [n for n in sorted(stats.FALSE_VERDICTS) if n <= present]
    text = f"speedups: 95% {stats.METHOD}, the process the unit of replication"
    if measured:
        n = measured[-1]
        text += (
            f" (two equal arms said faster or slower in {stats.FALSE_VERDICTS[n]:.0%} of resampled recorded A/A "
            f"comparisons with {n} processes per arm: bench/aa_coverage.py)"
        )
    return text


def _processes_per_arm(results: Mapping[str, Any], rows: list[dict[str, Any]]) -> str:
    """The processes each arm has in ``results`` (a merge of some shards, an interrupted run: fewer than
    ``repeats``), e.g. ``2 process(es) per arm`` or ``2-3 process(es) per arm (of 3 planned)``."""
    counts = [int(r["runs"]) for r in rows] or [int(results.get("repeats") or 0)]
    low, high = min(counts), max(counts)
    text = (f"{low}" if low == high else f"{low}-{high}") + " process(es) per arm"
    planned = int(results.get("repeats") or 0)
    return text + (f" (of {planned} planned)" if planned and low != planned else "")


def _mixed(items: list[dict[str, Any]], how: str = "merged") -> str:
    """The paragraph of a merge or resume made with ``--allow-mixed`` (see :mod:`.merge`); ``how``: ``merged``
    or ``resumed``."""
    fields = sorted({str(i["field"]) for i in items if "field" in i})
    shown = "; ".join(describe(i) for i in items[:MIXED_SHOWN])
    more = f"; and {len(items) - MIXED_SHOWN} more (results.json's `mixed`)" if len(items) > MIXED_SHOWN else ""
    return (
        f"**MIXED DATA**: {how} with --allow-mixed from runs whose fingerprints differ"
        + (f" in {', '.join(fields)}" if fields else "")
        + f": {shown}{more}. Each arm's row pools its processes across them."
    )


def _main_section(results: Mapping[str, Any]) -> str:
    name = (results.get("environment") or {}).get("device_name")
    return f"this GPU ({name})" if name and results.get("device") == "cuda" else "this machine"


def load_warnings(results: Mapping[str, Any]) -> list[str]:
    """The load rule's warnings for ``results`` (see :mod:`.load`).

    Args:
        results (Mapping[str, Any]): a results.json's data.

    Returns:
        list[str]: one sentence per warning.
    """
    cores = (results.get("machine") or {}).get("cpu_count")
    parallel = int(results.get("parallel") or 1)
    return load.load_warnings(results["runs"], cores, section_of(results), results.get("device"), parallel)


def markdown(results: dict[str, Any], rows: list[dict[str, Any]] | None = None) -> str:
    """The report: notes, one table per section (its baseline named), legend, warnings, failures.

    Args:
        results (dict[str, Any]): a results.json's data.
        rows (list[dict[str, Any]] | None): its summary rows (None: computed with :func:`.summary.summarize`).

    Returns:
        str: the Markdown text.
    """
    rows = rows if rows is not None else summarize(results)
    warnings = load_warnings(results)
    lines = [_head(results, rows)]
    if results.get("mixed"):
        lines += ["", _mixed(results["mixed"], "merged" if results.get("merged_from") else "resumed")]
    for note in explain.notes(results, rows):
        lines += ["", note]
    sections = _sections(rows)
    for section, section_rows in sections:
        lines.append("")
        if len(sections) > 1 or section:
            lines += [f"**{section or _main_section(results)}**", ""]
        base = section_rows[0]["baseline"] if section_rows else results["baseline"]
        lines.append(f"baseline `{base}`; speedup = baseline / arm, geometric means over processes (> 1: faster)")
        lines.append("")
        lines += _table(section_rows, loaded=bool(warnings))
    if any(r.get("verdict") in ("faster", "slower", stats.NO_DIFFERENCE) for r in rows):
        lines.append(
            f"\nverdict: `faster` / `slower` when the 95% interval of the speedup excludes 1.00x; `{stats.NO_DIFFERENCE}` "
            "when it contains 1.00x. Latency is the median over processes of each process's median; the speedup is the "
            "ratio of the geometric means of those per-process values; the process is the unit of the intervals."
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
    ("wait", "wait for quiet"),
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
    all runs.

    Args:
        results (Mapping[str, Any]): a results.json's data.

    Returns:
        list[str]: Markdown lines; empty when no run recorded its phases (older files).
    """
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
        waited = sum(p["wait"] for p in every)
        parallel = int(results.get("parallel") or 1)
        lines.append(
            f"\nThe runs took {total:.0f} s of process time in {wall:.0f} s of wall time "
            f"({total / wall:.1f} processes alive on average; up to {parallel} compiling "
            + ("per GPU " if results.get("device") == "cuda" else "")
            + "at once"
            + (f"; {waited:.0f} s of the process time was waiting for a quiet turn to measure" if waited >= 0.5 else "")
            + ")"
            + (
                f"; before the first run the command spent {results['setup_seconds']:.1f} s (imports, checks, plan)"
                if isinstance(results.get("setup_seconds"), (int, float))
                else ""
            )
            + "."
        )
    started = explain.start_note(results)
    if started:
        lines.append(f"\n{started[0].upper()}{started[1:]}.")
    return lines
