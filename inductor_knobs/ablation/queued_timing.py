"""Autotune timings of an ablation's workers with the launch queued before the clock starts.

Why: Inductor's benchmarker (``InductorBenchmarker.benchmark_gpu``, ``runtime/benchmarking.py``, the
``benchmarker`` of torch 2.8+ on CUDA by default) times each call of a candidate between two CUDA events:
``buffer.zero_()`` (an L2 flush), ``start.record()``, the call, ``end.record()``, and keeps the fastest.
BERT-base's GEMMs take 5-10 us on an H100, less than launching a Triton template from a slow host
thread, so the GPU finished the flush, passed the start event and waited for the launch: the timing
measured the host.  In fresh processes of plain torch 2.11 on one H100 node, one after another with nothing
beside them (``bench/probe_autotune_spread.py``), the best candidate of one 128x768 by 768x768 ``addmm``
timed 6.4-22.8 us and the fastest ATen one 7.1-82.9 us, and processes whose host was slow picked slower
kernels (the main job's A/A control: 0.52-0.80 ms of kernel time per iteration between processes of the
same settings).

How: while :func:`.autotune_lock.benchmarks_in_turn` is active with ``queue_us``, the start event of every
pair ``InductorBenchmarker.get_event_pairs`` hands out first queues a GPU spin of that many microseconds
(``torch.cuda._sleep``, counted in cycles of a 2 GHz clock, so at least that long at any SM clock up to
2 GHz) on the same stream, then records.  The host launches the candidate while the GPU spins, so the call
is queued when the start event passes: the pair times the kernels alone, after the same L2 flush, and
the spin is outside it.  Nothing else of the timing changes (its iterations, its minimum, the estimate that
sizes them); torch's ``TritonBenchmarker`` (Triton's ``do_bench``) and the 2.13+ profiler benchmarker keep
their own timing.  Under ``ik.emulate_gpu`` the spin runs on the emulation's stream, where the work runs.
"""

from __future__ import annotations

import contextlib
from typing import Any

#: Microseconds of GPU spin every ablation worker on a GPU queues before each timing's start event: longer than
#: a Triton template's launch from a slow host thread (the compiled call of one GEMM took 42-87 us of host time
#: on one H100 node, torch 2.11, Dynamo's guards included).
QUEUE_US = 60.0

#: Cycles per microsecond the spin is counted in: a 2 GHz clock (an H100's SM clock is at most 1.98 GHz).
CYCLES_PER_US = 2000


class QueuedStart:
    """A start event whose ``record`` first queues a GPU spin (everything else is the event's own).

    Args:
        event: the CUDA event torch made.
        cycles (int): the spin's length in GPU clock cycles.
    """

    __slots__ = ("_cycles", "_event")

    def __init__(self, event: Any, cycles: int) -> None:
        self._event = event
        self._cycles = cycles

    def record(self, *args: Any, **kwargs: Any) -> None:
        """Queue the spin on the stream the event records on (the current one unless given), then record."""
        import torch

        stream = args[0] if args else kwargs.get("stream")
        with torch.cuda.stream(stream) if stream is not None else contextlib.nullcontext():
            torch.cuda._sleep(self._cycles)
        self._event.record(*args, **kwargs)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._event, name)


def queued_pairs(pairs: list[tuple[Any, Any]], queue_us: float) -> list[tuple[Any, Any]]:
    """``pairs`` with every start event a :class:`QueuedStart` of ``queue_us`` microseconds.

    Args:
        pairs (list[tuple[Any, Any]]): torch's ``(start, end)`` event pairs.
        queue_us (float): the spin before each start, in microseconds (> 0).

    Returns:
        list[tuple[Any, Any]]: the same end events, the start events wrapped.
    """
    cycles = int(queue_us * CYCLES_PER_US)
    return [(QueuedStart(start, cycles), end) for start, end in pairs]
