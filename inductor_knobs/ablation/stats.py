"""Statistics of an ablation, with the worker **process** as the unit of replication.

Why processes, not samples: every arm × repeat runs in a fresh process that compiles cold, autotunes
on its own and gets its own memory layout, clocks and neighbours.  Latency samples inside one
process share all of that, so they are not independent: twenty samples from one lucky process say
nothing about the next process (it may pick another GEMM kernel).  So each process is reduced to
one number, the median of its steady-state samples (:func:`process_medians`), and every interval
here resamples those per-process medians.  Many samples from few processes therefore cannot make an
interval narrower; only more processes can.

The speedup of an arm is ``baseline median / arm median`` (> 1: the arm is faster), where each
median is the median of that arm's per-process medians.  Its 95 % confidence interval
(:func:`ratio_interval`) comes from :func:`scipy.stats.bootstrap` with two independent samples
(``paired=False``: the processes of one arm are resampled independently of the other arm's, since
process *i* of the baseline has nothing to do with process *i* of the arm) and
``method="percentile"``.  Percentile rather than BCa (see the ``scipy.stats.bootstrap``
documentation for both):

- BCa's acceleration comes from a jackknife, and the jackknife is unreliable for the median (a
  non-smooth statistic) at 3–8 observations; BCa also warns and may return NaN when resamples tie,
  which per-process medians at a timer's resolution do;
- the percentile interval is transformation-respecting: the interval of ``arm / baseline`` is the
  reciprocal of the interval of ``baseline / arm``, so it does not matter which way a speedup is
  written.

How many processes per arm (``--repeats``; the defaults live in :mod:`.command`): in a simulation
of this exact procedure (2,000 resamples, 1,000 trials per setting, log-normal and heavy-tailed
Student-t(3) process-to-process noise, no true difference) the 95 % interval of the ratio of medians
contained 1.0 in about 91 % of trials with 3 processes per arm, 92–94 % with 4, and 95–97 % with 5
to 8; its width shrinks only slowly after that (from about 3.1 to 2.2 process standard deviations,
on the log scale, between 5 and 8 processes).  So the default is **5 processes per arm** (the
smallest count with nominal coverage: on a GPU, where processes of a GEMM-bound arm differ by a
few percent, that detects differences of about 5 % and up), and **3** (:data:`MIN_PROCESSES`) with
``--quick`` and for the no-argument main job, whose intervals are indicative (about 90 % coverage,
close to the range of the processes) and the table says so.  Fewer than 3 cannot give an interval:
with 2 processes a resampled median takes only 3 values.

A fixed seed (:data:`SEED`) makes the intervals a function of the data: the same results.json gives
the same table in ``--compare`` and ``--merge``.
"""

from __future__ import annotations

import inspect
import statistics
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

#: The fewest processes per arm that give an interval (see the module docstring).
MIN_PROCESSES = 3

#: Confidence level of every interval.
CONFIDENCE = 0.95

#: Bootstrap resamples: enough that the 2.5 % and 97.5 % quantiles are stable to about 1 % of
#: their width; cheap, since the statistic is vectorized over a few numbers.
RESAMPLES = 9999

#: Seed of the bootstrap's random generator (results.json in, the same intervals out).
SEED = 0

NO_DIFFERENCE = "no detectable difference"


@dataclass(frozen=True)
class Interval:
    """A point estimate and its bootstrap confidence interval.

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


def _median_ratio(baseline: Any, arm: Any, axis: int = -1) -> Any:
    import numpy as np

    return np.median(baseline, axis=axis) / np.median(arm, axis=axis)


def _median(values: Any, axis: int = -1) -> Any:
    import numpy as np

    return np.median(values, axis=axis)


def ratio_interval(baseline: Sequence[float], arm: Sequence[float]) -> Interval | None:
    """The speedup ``median(baseline) / median(arm)`` with its 95 % percentile-bootstrap interval.

    Args:
        baseline: the baseline arm's per-process medians, in ms (:func:`process_medians`).
        arm: the arm's per-process medians, in ms.

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
    estimate = float(statistics.median(baseline) / statistics.median(arm))
    low, high = _bootstrap((baseline, arm), _median_ratio)
    # The percentile interval of a median can sit exactly on the estimate (ties); never let
    # floating point put the estimate outside its own interval.
    return Interval(estimate, min(low, estimate), max(high, estimate), CONFIDENCE, (len(baseline), len(arm)))


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
    import math

    bad = [v for v in values if not (isinstance(v, (int, float)) and math.isfinite(v) and v > 0)]
    if bad:
        raise ValueError(f"latencies must be positive finite milliseconds; got {bad[:3]}")
