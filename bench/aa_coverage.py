"""How often does an ablation's verdict call two equal arms "faster" or "slower"?  (issue 49)

A coverage simulation on the project's recorded A/A comparisons, not on a parametric model.  Each
recorded A/A comparison (one run, one metric: latency or GPU kernel time) gives one *pool*: the
per-process values of both of its arms together, since under the null both arms come from one
population.  For n = 3, 5 and 8 processes per arm, every trial draws two arms of n processes each
from one pool, with replacement, applies a verdict method and counts "faster"/"slower" as a false
verdict.  Every pool gets the same number of trials.  The false-verdict rate comes with a 95 %
Clopper-Pearson interval (``scipy.stats.binomtest``) for the simulation's own error.

Power, on the same pools: the second arm's values are divided by a true speedup (1.05x, 1.10x,
1.5x) and the "faster" rate counted; and each method is applied to the recorded emulated-T4 arms
(gated against forced GEMM autotuning, about 1.5x in kernel time) of every recorded main job.

Methods (:func:`interval_methods`, :func:`verdicts`):

- ``bootstrap of medians (before)``: the 95 % percentile bootstrap of the ratio of medians, two
  independent samples (``scipy.stats.bootstrap``, ``--resamples`` per interval; the report's method
  before the t-interval, at 9,999 resamples);
- ``t-log, Student (after)``: the 95 % Student t-interval of the difference of mean log values (pooled
  variance, ``2n - 2`` degrees of freedom), i.e. of the ratio of geometric means; checked against
  ``inductor_knobs.ablation.stats.ratio_interval`` on every run of this script;
- ``t-log, Welch``: the same with Welch's variance and degrees of freedom;
- ``permutation of mean logs``: a two-sided exact permutation test of the difference of mean log
  values over all splits of the 2n processes, "faster"/"slower" where p < 0.05;
- ``… + ±2% band``: a declared equivalence band on an interval: one inside [1/1.02, 1.02] reads "no
  practical difference"; only an interval that excludes 1.00x *and* reaches outside the band is
  "faster"/"slower".

A second table pools across runs (each comparison's values over its own median, one pool per
metric): many distinct values instead of 4-6, at the price of mixing runs of different spread.

Usage::

    python bench/aa_coverage.py extract bench/results     # (re)write bench/results/aa-per-process/aa_runs.json
    python bench/aa_coverage.py                           # the Markdown tables (1-1.5 min on 2 busy CPUs)

Deterministic: every draw comes from ``numpy.random.default_rng(--seed)``.
"""

from __future__ import annotations

import argparse
import itertools
import json
import sys
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

import numpy as np
from scipy import stats as sps

HERE = Path(__file__).resolve().parent
DATA = HERE / "results" / "aa-per-process" / "aa_runs.json"
SIZES = (3, 5, 8)
ALPHA = 0.05
BAND = 0.02
FASTER, SLOWER, NONE, PRACTICAL = 1, -1, 0, 2


# -- extraction ----------------------------------------------------------------------------------------------


def _round(values: Iterable[float]) -> list[float]:
    return [float(f"{v:.6g}") for v in values]


def _latency(run: dict[str, Any]) -> float | None:
    samples = run.get("samples_ms")
    return float(np.median(samples)) if run.get("ok") and samples else None


def _comparisons_of_results(path: Path, root: Path) -> list[dict[str, Any]]:
    """The A/A and T4 comparisons of one results.json: the main job's section "this GPU (..., above the
    gate): A/A control" (gated against forced GEMM autotuning with the gate open: equal settings in
    effect), its emulated-T4 section, and a model run on the full GPU without emulation (gated against
    forced in max-autotune-no-cudagraphs, above the gate: equal in effect)."""
    data = json.loads(path.read_text())
    if data.get("smoke"):
        return []
    env = data.get("environment") or {}
    base = {
        "source": str(path.relative_to(root)),
        "gpu": env.get("device_name"),
        "torch": env.get("torch"),
        "workload": data.get("workload"),
    }
    groups: list[tuple[str, str, list[str]]] = []
    sections: dict[str, list[str]] = {}
    for arm in data["arms"]:
        sections.setdefault(arm.get("section") or "", []).append(arm["name"])
    for section, names in sections.items():
        if "A/A control" in section and len(names) == 2:
            groups.append(("aa", section, names))
        elif section.startswith("emulated T4") and len(names) == 2:
            groups.append(("t4", section, names))
    names = [a["name"] for a in data["arms"]]
    if not data.get("main_job") and data.get("emulate_sms") is None and set(names) == {"gated", "forced"}:
        groups.append(("aa", "full GPU, gated vs forced (gate open)", ["gated", "forced"]))
    out = []
    for kind, label, arms in groups:
        for metric in ("latency_ms", "kernel_ms"):
            values: dict[str, list[float]] = {}
            gpus: dict[str, list[int | None]] = {}
            for arm in arms:
                runs = [r for r in data["runs"] if r["arm"] == arm and r.get("ok")]
                pairs = [(_latency(r) if metric == "latency_ms" else r.get("kernel_ms"), r.get("gpu")) for r in runs]
                pairs = [(v, g) for v, g in pairs if isinstance(v, (int, float))]
                values[arm] = _round(v for v, _ in pairs)
                gpus[arm] = [g for _, g in pairs]
            if all(len(v) >= 2 for v in values.values()):
                out.append({**base, "kind": kind, "comparison": label, "metric": metric, "arms": values, "gpu_index": gpus})
    return out


def _comparisons_of_jsonl(path: Path, root: Path) -> list[dict[str, Any]]:
    """The kernel times of a main job's runs.jsonl (bench/gpu_parts.sh): the A/A control (gated,
    force_gemm_autotune) and the emulated T4 (gated@T4, force_gemm_autotune@T4).  A file with more than
    18 lines holds a second, A/A-only run after the main job's 18: it is its own comparison."""
    records = [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
    env = path.parent / "env.txt"
    text = env.read_text() if env.exists() else ""
    gpu = "NVIDIA H200" if "H200" in text or "h200" in path.parent.name else "NVIDIA H100 80GB HBM3"
    base = {"source": str(path.relative_to(root)), "gpu": gpu, "torch": "2.11.0+cu130", "workload": "hf:bert-base"}
    chunks = [("main job", records[:18])] + ([("A/A alone, --parallel 1", records[18:])] if len(records) > 18 else [])
    out = []
    for label, chunk in chunks:
        for kind, arms in (("aa", ["gated", "force_gemm_autotune"]), ("t4", ["gated@T4", "force_gemm_autotune@T4"])):
            values = {
                a: _round(r["kernel_ms"] for r in chunk if r["arm"] == a and isinstance(r.get("kernel_ms"), float)) for a in arms
            }
            if all(len(v) >= 2 for v in values.values()):
                out.append({**base, "kind": kind, "comparison": label, "metric": "kernel_ms", "arms": values})
    return out


def extract(root: Path, out: Path) -> None:
    """Write every recorded A/A and T4 comparison under ``root`` (ablate-*, session-*) to ``out``."""
    found: list[dict[str, Any]] = []
    for path in sorted(root.glob("ablate-*/**/results.json")) + sorted(root.glob("session-*/**/results.json")):
        found += _comparisons_of_results(path, root)
    for path in sorted(root.glob("session-*/**/*runs.jsonl")):
        found += _comparisons_of_jsonl(path, root)
    doc = {
        "description": "Per-process values of every recorded A/A comparison (kind aa: two arms whose settings are "
        "equal in effect) and of the emulated-T4 comparison of the BERT-base main job (kind t4: gated vs forced "
        "GEMM autotuning, a real effect), from bench/results/{ablate-*,session-*} (source: the file). latency_ms: "
        "one value per process, the median of its samples; kernel_ms: GPU kernel time per iteration of the process. "
        "gpu_index: the GPU each process ran on, where recorded. Written by bench/aa_coverage.py extract.",
        "comparisons": found,
    }
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(doc, separators=(",", ":")) + "\n")
    print(f"wrote {out}: {len(found)} comparisons, {out.stat().st_size} bytes")


# -- verdicts, vectorized over trials (arrays of shape (trials, n)) ---------------------------------------------


def _verdict_of_interval(low: np.ndarray, high: np.ndarray, band: float | None) -> np.ndarray:
    verdict = np.where(low > 1.0, FASTER, np.where(high < 1.0, SLOWER, NONE))
    if band is not None:
        inside = (low >= 1.0 / (1.0 + band)) & (high <= 1.0 + band)
        verdict = np.where(inside, PRACTICAL, verdict)
    return verdict


def _median_ratio(a: np.ndarray, b: np.ndarray, axis: int = -1) -> np.ndarray:
    return np.median(a, axis=axis) / np.median(b, axis=axis)


def bootstrap_interval(base: np.ndarray, arm: np.ndarray, resamples: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """The percentile bootstrap of median(base)/median(arm), as ``scipy.stats.bootstrap`` computes it."""
    result = sps.bootstrap(
        (base, arm),
        _median_ratio,
        vectorized=True,
        paired=False,
        axis=-1,
        confidence_level=1 - ALPHA,
        n_resamples=resamples,
        method="percentile",
        batch=max(1, 4_000_000 // (base.shape[-1] * base.shape[0] or 1)),
        rng=np.random.default_rng(seed),
    )
    low, high = result.confidence_interval
    estimate = _median_ratio(base, arm)
    return np.minimum(low, estimate), np.maximum(high, estimate)


def t_interval(base: np.ndarray, arm: np.ndarray, welch: bool = False) -> tuple[np.ndarray, np.ndarray]:
    """The 95 % t-interval of exp(mean log base - mean log arm): Student (pooled) or Welch."""
    la, lb = np.log(base), np.log(arm)
    na, nb = la.shape[-1], lb.shape[-1]
    va, vb = la.var(axis=-1, ddof=1), lb.var(axis=-1, ddof=1)
    diff = la.mean(axis=-1) - lb.mean(axis=-1)
    if welch:
        se2 = va / na + vb / nb
        with np.errstate(invalid="ignore", divide="ignore"):
            df = se2**2 / ((va / na) ** 2 / (na - 1) + (vb / nb) ** 2 / (nb - 1))
        df = np.where(np.isfinite(df), df, na + nb - 2)
    else:
        pooled = ((na - 1) * va + (nb - 1) * vb) / (na + nb - 2)
        se2 = pooled * (1 / na + 1 / nb)
        df = np.full_like(diff, na + nb - 2)
    half = sps.t.ppf(1 - ALPHA / 2, df) * np.sqrt(se2)
    return np.exp(diff - half), np.exp(diff + half)


def _splits(n: int) -> np.ndarray:
    return np.array(list(itertools.combinations(range(2 * n), n)), dtype=np.intp)


def permutation_verdict(base: np.ndarray, arm: np.ndarray) -> np.ndarray:
    """Two-sided exact permutation test of the difference of mean logs, over all splits of the 2n processes
    (what ``scipy.stats.permutation_test(..., permutation_type="independent")`` does when its
    ``n_resamples`` exceeds the number of splits), vectorized over trials."""
    n = base.shape[-1]
    logs = np.log(np.concatenate([base, arm], axis=-1))
    splits = _splits(n)
    member = np.zeros((2 * n, len(splits)))
    member[splits, np.arange(len(splits))[:, None]] = 1.0
    first = logs @ member  # (trials, splits): the sum of the "base" side of each split
    total = logs.sum(axis=-1, keepdims=True)
    statistic = first / n - (total - first) / n
    observed = logs[:, :n].mean(axis=-1) - logs[:, n:].mean(axis=-1)
    tolerance = 1e-9 * np.maximum(1.0, np.abs(observed))
    p = (np.abs(statistic) >= (np.abs(observed) - tolerance)[:, None]).mean(axis=-1)
    return np.where(p < ALPHA, np.where(observed > 0, FASTER, SLOWER), NONE)


#: Interval methods: name -> (base, arm) -> (low, high) of the speedup base/arm, arrays (trials, n) in.
#: An interval scales with a true speedup f (the arm's values divided by f gives f x the interval), so each is
#: computed once per draw.
def interval_methods(resamples: int, seed: int) -> dict[str, Callable[[np.ndarray, np.ndarray], tuple[np.ndarray, np.ndarray]]]:
    return {
        "bootstrap of medians (before)": lambda b, a: bootstrap_interval(b, a, resamples, seed),
        "t-log, Student (after)": t_interval,
        "t-log, Welch": lambda b, a: t_interval(b, a, welch=True),
    }


def verdicts(
    intervals: dict[str, tuple[np.ndarray, np.ndarray]], base: np.ndarray, arm: np.ndarray, factor: float
) -> dict[str, np.ndarray]:
    """Every method's verdicts where the arm is truly ``factor`` x faster (1.0: the null)."""
    out = {}
    for name, (low, high) in intervals.items():
        out[name] = _verdict_of_interval(low * factor, high * factor, None)
    out["permutation of mean logs"] = permutation_verdict(base, arm / factor)
    for name in ("bootstrap of medians (before)", "t-log, Student (after)"):
        low, high = intervals[name]
        out[f"{name.split(' (')[0]} + ±{BAND:.0%} band"] = _verdict_of_interval(low * factor, high * factor, BAND)
    return out


# -- the simulation --------------------------------------------------------------------------------------------


def _draw(rng: np.random.Generator, pool: np.ndarray, trials: int, n: int) -> tuple[np.ndarray, np.ndarray]:
    picks = rng.integers(0, len(pool), size=(trials, 2 * n))
    values = pool[picks]
    return values[:, :n], values[:, n:]


def _rate(k: int, total: int) -> str:
    ci = sps.binomtest(k, total).proportion_ci(confidence_level=0.95, method="exact")
    return f"{k / total:.1%} [{ci.low:.1%}–{ci.high:.1%}]"


def _pools(aa: list[dict[str, Any]]) -> list[tuple[str, np.ndarray]]:
    """(metric, values) per recorded A/A comparison: both arms' processes together."""
    return [(c["metric"], np.array([v for vs in c["arms"].values() for v in vs], dtype=float)) for c in aa]


def _cross_run_pools(aa: list[dict[str, Any]]) -> list[tuple[str, np.ndarray]]:
    """One pool per metric across runs: each comparison's values divided by its own median (a sensitivity
    check: many distinct values instead of 4-6 per pool, at the price of mixing runs of different spread)."""
    out = []
    for metric in ("latency_ms", "kernel_ms"):
        values = [np.array([v for vs in c["arms"].values() for v in vs], dtype=float) for c in aa if c["metric"] == metric]
        out.append((metric, np.concatenate([v / np.median(v) for v in values])))
    return out


FACTORS = (1.0, 1.05, 1.10, 1.5)


Counts = dict[tuple[str, int, float, str], list[int]]


def _tally(pools: list[tuple[str, np.ndarray]], trials: int, resamples: int, seed: int) -> Counts:
    """(method, n, factor, metric) -> [false or faster count, trials]."""
    rng = np.random.default_rng(seed)
    counts: Counts = {}
    for n in SIZES:
        for metric, pool in pools:
            base, arm = _draw(rng, pool, trials, n)
            intervals = {name: method(base, arm) for name, method in interval_methods(resamples, seed).items()}
            for factor in FACTORS:
                for name, verdict in verdicts(intervals, base, arm, factor).items():
                    hit = np.isin(verdict, (FASTER, SLOWER)) if factor == 1.0 else verdict == FASTER
                    for key in ((name, n, factor, metric), (name, n, factor, "all")):
                        cell = counts.setdefault(key, [0, 0])
                        cell[0] += int(hit.sum())
                        cell[1] += trials
    return counts


def _names(counts: Counts) -> list[str]:
    return list(dict.fromkeys(key[0] for key in counts))


def _false_table(counts: Counts, title: str) -> list[str]:
    lines = [
        title,
        "",
        "| method | " + " | ".join(f"n = {n}" for n in SIZES) + " | n = 3, latency | n = 3, kernel time |",
        "|---|" + "---|" * (len(SIZES) + 2),
    ]
    for name in _names(counts):
        cells = [_rate(*counts[(name, n, 1.0, "all")]) for n in SIZES]
        cells += [_rate(*counts[(name, 3, 1.0, metric)]) for metric in ("latency_ms", "kernel_ms")]
        lines.append(f"| {name} | " + " | ".join(cells) + " |")
    return lines


def check_against_package(pool: np.ndarray, seed: int) -> None:
    """Raise SystemExit unless :func:`t_interval` gives what ``inductor_knobs.ablation.stats.ratio_interval``
    gives (the method the report uses), on 20 draws from ``pool``."""
    from inductor_knobs.ablation import stats

    base, arm = _draw(np.random.default_rng(seed), pool, 20, 3)
    low, high = t_interval(base, arm)
    for i in range(len(base)):
        interval = stats.ratio_interval(list(base[i]), list(arm[i]))
        if interval is None or not np.allclose((interval.low, interval.high), (low[i], high[i]), rtol=1e-9):
            raise SystemExit(f"t_interval differs from stats.ratio_interval on {base[i]} vs {arm[i]}: {interval}")


def simulate(data: dict[str, Any], trials: int, resamples: int, seed: int) -> str:
    """The Markdown tables: false verdicts of two equal arms (within-run pools, then cross-run pools), power,
    and the recorded emulated-T4 comparisons."""
    aa = [c for c in data["comparisons"] if c["kind"] == "aa"]
    check_against_package(_pools(aa)[0][1], seed)
    t4 = [c for c in data["comparisons"] if c["kind"] == "t4"]
    within = _tally(_pools(aa), trials, resamples, seed)
    across = _tally(_cross_run_pools(aa), trials * 10, resamples, seed)
    lines = _false_table(
        within,
        f"**False verdicts of two equal arms**: {len(aa)} recorded A/A comparisons, each one pool of its two arms' "
        f"processes; {trials} trials per pool and n, each drawing 2 x n processes from one pool with replacement; the "
        "fraction that said faster or slower, with its 95% Clopper-Pearson interval",
    )
    lines += [
        "",
        *_false_table(
            across,
            f"**The same across runs**: one pool per metric of every A/A comparison's values over its own median; "
            f"{trials * 10} trials per pool and n",
        ),
    ]
    lines += [
        "",
        "**Power**: the fraction that said `faster` where the arm is truly faster by the factor (the within-run pools, "
        "the arm's values divided by it)",
        "",
        "| method | " + " | ".join(f"{f:.2f}x, n = {n}" for f in FACTORS[1:] for n in SIZES) + " |",
        "|---|" + "---|" * (len(FACTORS[1:]) * len(SIZES)),
    ]
    for name in _names(within):
        cells = [f"{within[(name, n, f, 'all')][0] / within[(name, n, f, 'all')][1]:.0%}" for f in FACTORS[1:] for n in SIZES]
        lines.append(f"| {name} | " + " | ".join(cells) + " |")
    lines += [
        "",
        "**The recorded emulated-T4 comparisons** (gated against forced GEMM autotuning, about 1.5x; 3 processes per "
        "arm as recorded): how many said `faster`",
        "",
        "| method | kernel time | latency |",
        "|---|---|---|",
    ]
    said: dict[tuple[str, str], int] = {}
    totals: dict[str, int] = {}
    for c in t4:
        base, arm = (np.array(v, dtype=float)[None, :] for v in c["arms"].values())
        if base.shape[1] != arm.shape[1]:
            continue
        totals[c["metric"]] = totals.get(c["metric"], 0) + 1
        intervals = {name: method(base, arm) for name, method in interval_methods(resamples, seed).items()}
        for name, verdict in verdicts(intervals, base, arm, 1.0).items():
            said[(name, c["metric"])] = said.get((name, c["metric"]), 0) + int(verdict[0] == FASTER)
    for name in _names(within):
        cells = [f"{said.get((name, m), 0)} of {totals.get(m, 0)}" for m in ("kernel_ms", "latency_ms")]
        lines.append(f"| {name} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("command", nargs="?", choices=("simulate", "extract"), default="simulate")
    parser.add_argument("root", nargs="?", type=Path, default=HERE / "results", help="extract: the results directory")
    parser.add_argument("--data", type=Path, default=DATA)
    parser.add_argument("--trials", type=int, default=200, help="trials per pool and size")
    parser.add_argument("--resamples", type=int, default=1999, help="bootstrap resamples per interval")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)
    if args.command == "extract":
        extract(args.root, args.data)
        return 0
    print(simulate(json.loads(args.data.read_text()), args.trials, args.resamples, args.seed))
    return 0


if __name__ == "__main__":
    sys.exit(main())
