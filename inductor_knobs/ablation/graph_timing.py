"""Autotune timings of an ablation's workers taken as CUDA graph replays, so host speed cannot pick a kernel.

Why: Inductor's benchmarker (``runtime/benchmarking.py``, torch 2.8-2.13) times a candidate with a CUDA event
pair around each call, an L2 flush (``buffer.zero_()``) before each.  BERT-base's GEMMs take 5-10 µs on an
H100; launching a Triton template through its Python launcher takes longer than that on a slow host thread,
so the GPU waits for the launch between the events and the timing measures the host.  In fresh processes of
plain torch 2.11 on one H100 node, one after another with nothing beside them
(``bench/probe_autotune_spread.py``), the best candidate of one 128x768 by 768x768 ``addmm`` timed 6.4-19.1 µs
and the fastest ATen one 7.1-49.6 µs, while the compiled call took 42-87 µs of host time per call: the
processes' hosts differed, and so did the kernels they picked (the main job's A/A control: 0.52-0.80 ms of
GPU kernel time per iteration between processes of the same settings).

How: the ablation's timing wrapper (:mod:`.autotune_lock`) captures the candidate's callable into a CUDA graph
(``torch.cuda.graph``, after its first call) and hands torch's own ``benchmark_gpu`` the graph's ``replay``:
one C++ launch, queued while the GPU still runs the L2 flush, so every timed call starts at once and the
event pair measures the kernels alone, on a cold L2 as before.  torch 2.14+ offers the same for its GEMM
autotuning (``autotune_cudagraph_benchmarking``; a callable that is already a graph's ``replay`` is timed
as it is).  A capture that fails (a callable that synchronizes or reads back) is timed as torch times it,
and counted.  Under ``ik.emulate_gpu`` the capture goes to the emulation's capture stream
(:mod:`inductor_knobs.emulation.capture`), so the replay runs on the emulated SMs.
"""

from __future__ import annotations

from typing import Any

#: At most this many characters of the first failed capture's error are kept.
ERROR_CHARS = 300


class GraphTiming:
    """Counts of one worker's graph-timed candidates.

    Attributes:
        graphs (int): candidates timed as a graph replay.
        fallbacks (int): candidates whose capture failed, timed as torch times them.
        first_error (str): the first failed capture's error ("" if none).
    """

    def __init__(self) -> None:
        self.graphs = 0
        self.fallbacks = 0
        self.first_error = ""

    def capture(self, timed: Any) -> Any:
        """``timed`` captured in a CUDA graph, or None where it is a graph replay already, a capture is under
        way on this thread, or the capture fails (counted).

        Args:
            timed: the callable torch is about to time, already called once (warm).

        Returns:
            torch.cuda.CUDAGraph | None: the graph; its ``replay`` is what to time.
        """
        import torch

        if isinstance(getattr(timed, "__self__", None), torch.cuda.CUDAGraph) or torch.cuda.is_current_stream_capturing():
            return None
        graph = torch.cuda.CUDAGraph()
        try:
            with torch.cuda.graph(graph, capture_error_mode="thread_local"):
                timed()
        except Exception as err:  # noqa: BLE001 - the candidate is still timed, the way torch times it
            self.fallbacks += 1
            self.first_error = self.first_error or f"{type(err).__name__}: {err}"[:ERROR_CHARS]
            return None
        self.graphs += 1
        return graph

    def to_record(self) -> dict[str, Any]:
        """The worker record's fields: ``autotune_graph_timings``, ``autotune_graph_fallbacks`` and, after a
        failed capture, ``autotune_graph_error``."""
        out: dict[str, Any] = {"autotune_graph_timings": self.graphs, "autotune_graph_fallbacks": self.fallbacks}
        if self.first_error:
            out["autotune_graph_error"] = self.first_error
        return out
