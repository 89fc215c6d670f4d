"""Bounded summaries of call times for a guard that serves for days: O(1) memory per call.

:class:`Latencies` keeps the exact count, total and maximum of every call's seconds, and a
histogram of logarithmic buckets (each 2% wide) from which p50/p99 are read with a relative error
of at most 1% of the exact order statistic; :class:`ShapeMedian` keeps the running median of the
last few calls of one input shape in a fixed array of doubles.
"""

from __future__ import annotations

import math
from array import array
from collections.abc import Iterator

#: Bucket ratio: a value lands in bucket ``floor(log(v) / log(RATIO))`` and is reported as the bucket's
#: geometric middle, within ``sqrt(RATIO) - 1`` (0.995%) of every value in it.
RATIO = 1.02
RELATIVE_ERROR = math.sqrt(RATIO) - 1
_LOG_RATIO = math.log(RATIO)
#: Values below this (seconds) share the lowest bucket (a clock cannot time a call shorter than that).
FLOOR = 1e-9


class Latencies:
    """Exact count, sum and max of a stream of seconds, and its quantiles within :data:`RELATIVE_ERROR`.

    Memory is one dict entry per occupied bucket: at most about 1,600 buckets between 1 ns and
    10,000 s, whatever the number of values.
    """

    __slots__ = ("_buckets", "count", "maximum", "total")

    def __init__(self) -> None:
        self._buckets: dict[int, int] = {}
        self.count = 0
        self.total = 0.0
        self.maximum: float | None = None

    def add(self, seconds: float) -> None:
        """Count one value (float seconds)."""
        index = math.floor(math.log(max(seconds, FLOOR)) / _LOG_RATIO)
        buckets = self._buckets
        buckets[index] = buckets.get(index, 0) + 1
        self.count += 1
        self.total += seconds
        if self.maximum is None or seconds > self.maximum:
            self.maximum = seconds

    def quantile(self, q: float) -> float | None:
        """The ``q``-quantile (0..1) of the values, within :data:`RELATIVE_ERROR` of the exact order statistic
        of rank ``round(q * (count - 1))``; the exact maximum for ``q == 1``; None when empty."""
        if not self.count:
            return None
        if q >= 1:
            return self.maximum
        rank = round(q * (self.count - 1))
        seen = 0
        for index, count in sorted(self._buckets.items()):
            seen += count
            if seen > rank:
                return min(RATIO ** (index + 0.5), self.maximum or math.inf)
        return self.maximum

    def __len__(self) -> int:
        return self.count

    def __iter__(self) -> Iterator[float]:
        raise TypeError("Latencies keeps no per-call values: read quantile(), count, total or maximum")


class ShapeMedian:
    """The median of the last ``size`` values of one input shape, in a ring of doubles (8 bytes a value)."""

    __slots__ = ("_next", "_size", "_values")

    def __init__(self, size: int) -> None:
        self._values = array("d")
        self._size = size
        self._next = 0

    def __len__(self) -> int:
        return len(self._values)

    def add(self, value: float) -> None:
        values = self._values
        if len(values) < self._size:
            values.append(value)
        else:
            values[self._next] = value
            self._next = (self._next + 1) % self._size

    def value(self) -> float:
        ordered = sorted(self._values)
        middle = len(ordered) // 2
        return ordered[middle] if len(ordered) % 2 else (ordered[middle - 1] + ordered[middle]) / 2
