"""results.png: one row per arm, four panels that read across a row.

1. The answer at a glance: each arm's speedup over its section's baseline with its 95 % interval
   (a forest plot; the vertical line at 1.00x is "no difference"): GPU kernel time (squares, CUDA
   runs only) and end-to-end latency (circles), coloured by verdict; a speedup without an interval
   (the baseline itself, a smoke run, fewer than 3 processes) says why beside its mark, and the
   legend names only what was measured.  Under each arm's name, what it costs to
   compile (``compile 21 s -> 76 s (cold)``: its baseline's cold compile, then its own).  For the
   main job on a GPU the rows are "force_gemm_autotune on an emulated T4 / L4 / this GPU", so the
   panel answers "does forcing the gate help this model on this GPU class, and what does it cost to
   compile".
2. Latency: bars from zero to the median over processes, whiskers the 95 % interval.
3. Cold compile seconds, the autotune part of them darker.
4. Cold compile seconds against speedup (GPU kernel time where measured) with its interval, each
   point numbered like its row.

The first three panels share one row per arm (horizontal bars); the arm names, numbered and with
their section in brackets, sit once on the left y axis, and the figure grows with the number of
arms, so labels never overlap however many arms there are.  The speedup axis turns logarithmic when
the ratios span more than 4x (then 2x faster and 2x slower sit at the same distance from 1.00x).
"""

from __future__ import annotations

from typing import Any

from ..ext import atomic_write
from .errors import INSTALL_HINT, ExtraMissing
from .stats import MIN_PROCESSES
from .summary import compile_source

#: Inches of figure height per arm (and the least height).
ROW_INCHES, MIN_INCHES = 0.42, 3.2


def _label(index: int, row: dict[str, Any], compile_of: dict[str, Any]) -> str:
    """``1 arm [section]``, and below it the cold compile seconds of its baseline and of the arm."""
    section = f" [{row['section']}]" if row.get("section") else ""
    base = compile_of.get(row.get("baseline", ""))
    cost = ""
    if row.get("baseline") != row["arm"] and base is not None and row.get("compile_seconds") is not None:
        cost = f"\ncompile {base:.0f} s -> {row['compile_seconds']:.0f} s ({compile_source(row)})"
    return f"{index} {row['arm']}{section}{cost}"


def _speedup(row: dict[str, Any], key: str) -> tuple[float | None, float | None, float | None, str]:
    """A row's speedup ``key`` (``speedup`` or ``kernel_speedup``), its 95 % interval, and why it has none.

    Returns:
        ``(speedup, low, high, why)``: ``why`` is "" when the interval is there; the speedup is None
        where there is none (its baseline has no measurement).
    """
    if row["arm"] == row.get("baseline"):
        return 1.0, None, None, "baseline (1.00x by definition)"
    speed = row.get(key)
    if speed is None:
        return None, None, None, f"no speedup: baseline {row.get('baseline')!r} has no measurement"
    low, high = row.get(f"{key}_low"), row.get(f"{key}_high")
    if low is not None and high is not None:
        return speed, low, high, ""
    verdict = str(row.get("verdict", ""))
    why = verdict[len("n/a (") : -1] if verdict.startswith("n/a (") else f"< {MIN_PROCESSES} processes"
    return speed, None, None, f"no interval: {why}"


def legend(rows: list[dict[str, Any]], device: str) -> str:
    """What the speedup panel's marks are, naming only what was measured on ``device``.

    Args:
        rows (list[dict[str, Any]]): the rows drawn.
        device (str): where the runs ran (``"cuda"`` or ``"cpu"``; results.json's ``device``).

    Returns:
        str: e.g. ``"■ GPU kernel time, ○ latency"``, or ``"○ latency on CPU"`` where no kernel time was measured
        (kernel time is measured with CUDA's profiler only, :func:`.kernels.gpu_kernel_times`).
    """
    if any("kernel_speedup" in r for r in rows):
        return "\u25a0 GPU kernel time, \u25cb latency"
    return f"\u25cb latency on {device.upper()}"


def plot(rows: list[dict[str, Any]], path: str, title: str, device: str = "cuda") -> str:
    """Draw ``rows`` (from :func:`.summary.summarize`) into ``path`` (written whole or not at all,
    :func:`~inductor_knobs.ext.atomic_write`).

    Args:
        rows (list[dict[str, Any]]): summary rows; rows without a measurement (failed, not run) are left out.
        path (str): the PNG to write.
        title (str): the figure's title (the workload).
        device (str): where the runs ran (``"cuda"`` or ``"cpu"``), for the legend (:func:`legend`).

    Returns:
        str: ``path``.

    Raises:
        ExtraMissing: matplotlib is not installed (the command checks this first).
    """
    try:
        import matplotlib
        import matplotlib.ticker

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError as err:
        raise ExtraMissing(f"--plot needs matplotlib, which cannot be imported ({err}): {INSTALL_HINT}") from err
    ok = [r for r in rows if "median_ms" in r]
    compile_of = {r["arm"]: r.get("compile_seconds") for r in ok}
    labels = [_label(i + 1, r, compile_of) for i, r in enumerate(ok)]
    ys = list(range(len(ok)))[::-1]  # the first arm on top
    height = max(MIN_INCHES, ROW_INCHES * len(ok) + 1.6)
    fig = plt.figure(figsize=(18, height))
    grid = fig.add_gridspec(1, 4, width_ratios=[1.2, 1, 1, 1.1])
    forest = fig.add_subplot(grid[0])
    # The first three panels share the rows: one arm per row, named once, on the left.
    latency = fig.add_subplot(grid[1], sharey=forest)
    compile_ax = fig.add_subplot(grid[2], sharey=forest)
    scatter = fig.add_subplot(grid[3])

    speeds: list[float] = []
    notes: list[tuple[float, float, str]] = []  # why a mark has no interval, written beside it
    colours = {"faster": "tab:green", "slower": "tab:red"}
    for y, r in zip(ys, ok):
        marks = [("speedup", "verdict", "o", 0.12)]
        if "kernel_speedup" in r:
            marks.insert(0, ("kernel_speedup", "kernel_verdict", "s", -0.12))
        for key, verdict, marker, shift in marks:
            speed, low, high, why = _speedup(r, key)
            if speed is None:
                forest.annotate(why, (0.02, y + shift), xycoords=("axes fraction", "data"), fontsize=7, va="center")
                continue
            errors = [[speed - low], [high - speed]] if low is not None and high is not None else None
            colour = colours.get(r.get(verdict, ""), "tab:gray")
            face = colour if marker == "s" else "white"
            forest.errorbar(speed, y + shift, xerr=errors, fmt=marker, color=colour, mfc=face, capsize=3)
            if why:
                notes.append((speed, y + shift, why))
            speeds += [v for v in (speed, low, high) if v]
    forest.axvline(1.0, color="black", linewidth=0.8)
    if speeds and max(speeds) / min(speeds) > 4:
        # Wide ratios on a log axis: 2x faster and 2x slower sit at the same distance from 1.00x.
        forest.set_xscale("log")
        forest.xaxis.set_major_locator(matplotlib.ticker.LogLocator(subs=(1.0, 2.0, 5.0)))
        forest.xaxis.set_minor_formatter(matplotlib.ticker.NullFormatter())
    forest.xaxis.set_major_formatter(matplotlib.ticker.FuncFormatter(lambda v, _: f"{v:.3g}x"))
    left, right = (forest.transScale.transform((x, 0))[0] for x in forest.get_xlim())
    for speed, at, why in notes:  # on the side of the mark with more room, inside the panel
        room_right = forest.transScale.transform((speed, 0))[0] < (left + right) / 2
        offset, align = ((6, 0), "left") if room_right else ((-6, 0), "right")
        forest.annotate(why, (speed, at), xytext=offset, textcoords="offset points", fontsize=7, va="center", ha=align)
    forest.set_yticks(ys, labels)
    forest.set_xlabel("speedup vs the section's baseline, 95% CI (> 1: faster)")
    forest.set_title(
        "does the arm beat its section's baseline, and at what compile cost (left)?\n"
        f"{legend(ok, device)}; green faster, red slower, grey: no detectable difference",
        fontsize=9,
    )

    medians = [r["median_ms"] for r in ok]
    low_err = [r["median_ms"] - r["median_low_ms"] if r.get("median_low_ms") is not None else 0.0 for r in ok]
    high_err = [r["median_high_ms"] - r["median_ms"] if r.get("median_high_ms") is not None else 0.0 for r in ok]
    latency.barh(ys, medians, xerr=[low_err, high_err], capsize=3, color="tab:blue")
    latency.set_xlim(left=0)
    latency.set_xlabel("latency ms (median, 95% CI)")
    latency.tick_params(axis="y", labelleft=False)

    compile_s = [r["compile_seconds"] for r in ok]
    autotune_s = [min(r["autotune_seconds"], r["compile_seconds"]) for r in ok]
    compile_ax.barh(ys, compile_s, color="tab:orange", label="compile")
    compile_ax.barh(ys, autotune_s, color="tab:brown", label="of which autotune")
    compile_ax.set_xlim(left=0)
    compile_ax.set_xlabel("cold compile s (median)")
    compile_ax.tick_params(axis="y", labelleft=False)
    compile_ax.legend(fontsize=8, loc="lower right")
    for ax in (forest, latency, compile_ax):
        ax.grid(axis="y", linestyle=":", linewidth=0.5)

    kernel = any("kernel_speedup" in r for r in ok)
    for i, r in enumerate(ok):
        speed, low, high, _ = _speedup(r, "kernel_speedup" if kernel and "kernel_speedup" in r else "speedup")
        if speed is None:
            continue
        errors = [[speed - low], [high - speed]] if low is not None and high is not None else None
        scatter.errorbar(r["compile_seconds"], speed, yerr=errors, fmt="o", color="tab:purple", capsize=3)
        scatter.annotate(str(i + 1), (r["compile_seconds"], speed), xytext=(4, 3), textcoords="offset points")
    scatter.axhline(1.0, color="black", linewidth=0.8)
    scatter.set_xlabel("cold compile s")
    scatter.set_ylabel("GPU kernel time speedup vs baseline" if kernel else "latency speedup vs baseline")
    scatter.set_title("compile time vs speedup, 95% CI (numbers: rows)", fontsize=9)

    fig.suptitle(title)
    fig.tight_layout()
    with atomic_write(path, binary=True) as dst:
        fig.savefig(dst, format="png", dpi=110)
    plt.close(fig)
    return path
