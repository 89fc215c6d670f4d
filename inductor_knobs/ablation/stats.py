"""Statistics of an ablation, with the worker **process** as the unit of replication.

Why processes, not samples: every arm × repeat runs in a fresh process that compiles cold, autotunes
on its own and gets its own memory layout, clocks and neighbours.  Latency samples inside one
process share all of that, so they are not independent: twenty samples from one lucky process say
nothing about the next process (it may pick another GEMM kernel).  So each process is reduced to
one number, the median of its steady-state samples (:func:`process_medians`), and every interval
here is over those per-process values.  Many samples from few processes therefore cannot make an
interval narrower; only more processes can.

**The speedup and its verdict** (:func:`ratio_interval`): the speedup of an arm is the ratio of the
geometric means of the two arms' per-process values (``baseline / arm``; > 1: the arm is faster),
with the 95 % Student t-interval of the difference of the mean log values (pooled variance,
``n_baseline + n_arm - 2`` degrees of freedom; quantile from :func:`scipy.stats.t.ppf`),
exponentiated.  Logs, because process-to-process noise is multiplicative (a slower clock, another
kernel) and a ratio of times is what is compared; the interval is transformation-respecting: that of
``arm / baseline`` is the reciprocal of that of ``baseline / arm``.  The verdict is ``faster`` or
``slower`` when the interval excludes 1.0, else :data:`NO_DIFFERENCE`.

Why this method: ``bench/aa_coverage.py`` resamples processes from the project's recorded A/A
comparisons (two arms of equal settings on H100 and H200, ``bench/results/aa-per-process/aa_runs.json``)
and counts how often two equal arms get ``faster``/``slower`` (:data:`FALSE_VERDICTS`: about 3 %
with 3 processes per arm, about 5 % with 5 or 8), where the percentile bootstrap of the ratio of medians
said so in 5.7 % (processes resampled within a run) to 10 % (across runs) at 3 processes per arm.
A permutation test cannot say anything at 3 processes per arm (its smallest p-value is 0.1), and
Welch's interval only loses power.  The recorded emulated-T4 comparisons (about 1.5x in kernel time)
all say ``faster`` with it.  A declared equivalence band (an interval inside ±2 % reads "no
practical difference") changed the false-verdict rate by less than half a point, so there is none.

**An arm's latency** (:func:`median_interval`): the median of its per-process medians with a 95 %
percentile bootstrap interval (:func:`scipy.stats.bootstrap`).  With 3 or 5 processes that interval
is the processes' range, which contains the median of the processes' distribution with probability
75 % (3) or 94 % (5); the report says so.

A fixed seed (:data:`SEED`) makes the bootstrap a function of the data: the same results.json gives
the same table in ``--compare`` and ``--merge``.
"""

from __future__ import annotations

import inspect
import math
import statistics
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

#: The fewest processes per arm that give an interval: the t-interval needs 2, and the false-verdict rate is
#: measured from 3 (see the module docstring).
MIN_PROCESSES = 3

#: What the speedup's interval is, as the report names it.
METHOD = "Student t-interval of the ratio of geometric means (on log per-process values)"

#: Measured fraction of comparisons of two equal arms that said faster or slower, by processes per arm:
#: ``python bench/aa_coverage.py`` on 65 recorded A/A comparisons (H100 and H200; 200 resampled pairs of arms
#: per comparison and size; Clopper-Pearson 95 % intervals 2.9-3.6 %, 4.6-5.3 % and 4.7-5.5 %).
FALSE_VERDICTS = {3: 0.032, 5: 0.049, 8: 0.051}

#: Confidence level of every interval.
CONFIDENCE = 0.95

#: Bootstrap resamples of an arm's median: enough that the 2.5 % and 97.5 % quantiles are stable to about 1 % of
#: their width; cheap, since the statistic is vectorized over a few numbers.
RESAMPLES = 9999

#: Seed of the bootstrap's random generator (results.json in, the same intervals out).
SEED = 0

NO_DIFFERENCE = "no detectable difference"


@dataclass(frozen=True)
class Interval:
    """A point estimate and its confidence interval.

    Attributes:
        estimate: the statistic on the data (a ratio, or milliseconds).
        low, high: the interval's ends, same unit.
        confidence: its level (0.95).
        processes: how many processes went in, per sample (``(baseline, arm)`` for a ratio).
    """

    estimate: float
    low: float
    high: float
    confidence: float
    processes: tuple[int, ...]

    def contains(self, value: float) -> bool:
        """Whether ``value`` lies in the closed interval.

        Args:
            value (float): e.g. 1.0 for a speedup.

        Returns:
            bool: ``low <= value <= high``.
        """
        return self.low <= value <= self.high

    def verdict(self) -> str:
        """The verdict on a speedup ratio.

        Returns:
            str: ``faster`` (interval above 1), ``slower`` (below 1) or ``no detectable difference``
            (it contains 1.0).
        """
        if self.contains(1.0):
            return NO_DIFFERENCE
        return "faster" if self.low > 1.0 else "slower"

    def to_dict(self) -> dict[str, Any]:
        """The interval as JSON holds it.

        Returns:
            dict[str, Any]: ``estimate``, ``low``, ``high``, ``confidence``, ``processes``.
        """
        return {
            "estimate": self.estimate,
            "low": self.low,
            "high": self.high,
            "confidence": self.confidence,
            "processes": list(self.processes),
        }


def process_medians(runs: Sequence[Mapping[str, Any]]) -> list[float]:
    """One latency per process: the median of each successful run's ``samples_ms``.

    Args:
        runs: worker records (see :mod:`.worker`); failed runs and runs without samples are skipped.

    Returns:
        Milliseconds, one per usable run, in the order given.
    """
    return [float(statistics.median(r["samples_ms"])) for r in runs if r.get("ok") and r.get("samples_ms")]


def _rng_argument() -> str:
    # scipy 1.15 renamed random_state to rng (SPEC 7); scipy >= 1.9 is supported.
    from scipy import stats

    return "rng" if "rng" in inspect.signature(stats.bootstrap).parameters else "random_state"


def _bootstrap(data: tuple[Sequence[float], ...], statistic: Any) -> tuple[float, float]:
    import numpy as np
    from scipy import stats

    result = stats.bootstrap(
        tuple(np.asarray(d, dtype=float) for d in data),
        statistic,
        vectorized=True,
        paired=False,
        confidence_level=CONFIDENCE,
        n_resamples=RESAMPLES,
        method="percentile",
        **{_rng_argument(): np.random.default_rng(SEED)},
    )
    low, high = result.confidence_interval
    return float(low), float(high)


def _median(values: Any, axis: int = -1) -> Any:
    import numpy as np

    return np.median(values, axis=axis)


def ratio_interval(baseline: Sequence[float], arm: Sequence[float]) -> Interval | None:
    """The speedup ``baseline / arm`` as the ratio of geometric means, with its 95 % Student t-interval.

    The interval is ``exp(d ± t * s * sqrt(1/n_b + 1/n_a))`` where ``d`` is the difference of the mean
    log values, ``s`` the pooled standard deviation of the log values and ``t`` the 97.5 % quantile of
    Student's t with ``n_b + n_a - 2`` degrees of freedom (:func:`scipy.stats.t.ppf`).

    Args:
        baseline: the baseline arm's per-process values, in ms (:func:`process_medians`, or kernel times).
        arm: the arm's per-process values, in ms.

    Returns:
        The interval (> 1: the arm is faster), or None when either side has fewer than
        :data:`MIN_PROCESSES` processes.

    Raises:
        ValueError: a latency that is not a positive finite number.
    """
    _check_positive(baseline)
    _check_positive(arm)
    if len(baseline) < MIN_PROCESSES or len(arm) < MIN_PROCESSES:
        return None
    import numpy as np
    from scipy import stats

    logs_b, logs_a = np.log(np.asarray(baseline, dtype=float)), np.log(np.asarray(arm, dtype=float))
    nb, na = len(logs_b), len(logs_a)
    difference = float(logs_b.mean() - logs_a.mean())
    pooled = ((nb - 1) * logs_b.var(ddof=1) + (na - 1) * logs_a.var(ddof=1)) / (nb + na - 2)
    half = float(stats.t.ppf(0.5 + CONFIDENCE / 2, nb + na - 2) * math.sqrt(pooled * (1 / nb + 1 / na)))
    return Interval(math.exp(difference), math.exp(difference - half), math.exp(difference + half), CONFIDENCE, (nb, na))


def speedup(baseline: Sequence[float], arm: Sequence[float]) -> float:
    """The speedup ``baseline / arm`` as the ratio of geometric means (the estimate of :func:`ratio_interval`,
    also where there are too few processes for an interval).

    Args:
        baseline: the baseline arm's per-process values, in ms; at least one.
        arm: the arm's per-process values, in ms; at least one.

    Returns:
        float: > 1 where the arm is faster.

    Raises:
        ValueError: a latency that is not a positive finite number, or no value on a side.
    """
    _check_positive(baseline)
    _check_positive(arm)
    if not baseline or not arm:
        raise ValueError("a speedup needs at least one process on each side")
    return math.exp(statistics.fmean(map(math.log, baseline)) - statistics.fmean(map(math.log, arm)))


def median_interval(values: Sequence[float]) -> Interval | None:
    """The median of per-process medians (ms) with its 95 % percentile-bootstrap interval.

    Args:
        values (Sequence[float]): one latency (ms) per process.

    Returns:
        Interval | None: the interval, or None with fewer than :data:`MIN_PROCESSES` values.

    Raises:
        ValueError: a latency that is not a positive finite number.
    """
    _check_positive(values)
    if len(values) < MIN_PROCESSES:
        return None
    estimate = float(statistics.median(values))
    low, high = _bootstrap((values,), _median)
    return Interval(estimate, min(low, estimate), max(high, estimate), CONFIDENCE, (len(values),))


def _check_positive(values: Sequence[float]) -> None:
    bad = [v for v in values if not (isinstance(v, (int, float)) and math.isfinite(v) and v > 0)]
    if bad:
        raise ValueError(f"latencies must be positive finite milliseconds; got {bad[:3]}")
