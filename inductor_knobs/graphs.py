"""One CUDA graph per bucket around a compiled model: a request is a copy into static inputs and one replay.

Why: a small model served one request at a time is host-bound.  A 2-layer Llama compiled with
``max-autotune-no-cudagraphs`` spent 0.84-1.04 ms of a 1.0-1.2 ms request in Python and kernel
launches (H100, torch 2.11), so the GPU waited for the host and every host slowdown (bursts of
5-10x on a shared host) was the request's.  Replaying one graph per padded length (vLLM's "capture
sizes") leaves about 20 us of host work: p50 0.51 ms instead of 1.16 ms, and host bursts no longer
reach the response.  ``mode="reduce-overhead"`` records CUDA graphs inside ``torch.compile`` too,
but its per-call Python (dynamic-shape guards, graph-tree bookkeeping, eager partitions) was 0.71 ms
of host work for the same model; a whole-model capture around the compiled callable is what
``torch.cuda.graph`` gives for a fixed set of shapes.
"""

from __future__ import annotations

import itertools
import threading
from collections.abc import Callable, Iterable
from typing import Any

from .errors import GraphCaptureFailed, InvalidKnobValue
from .knobs import torch_version


class CapturedGraphs:
    """The compiled callable with one CUDA graph per captured input shape; made by :func:`capture_cuda_graphs`.

    Calling it with inputs of a captured shape (same dtypes, shapes, devices and non-tensor values)
    copies the tensors into that graph's static inputs and replays it; any other call goes to ``fn``
    (counted in :attr:`misses`).

    The returned output is the graph's own static output: the next call (of any shape: the graphs
    share one memory pool) overwrites it, so copy what must outlive it.  Calls are serialised by a
    lock, so two threads never replay into the same buffers at once.

    Attributes:
        fn: the callable the graphs were captured from.
        shapes: the captured keys, in capture order.
        replays: calls served by a replay.
        misses: calls served by ``fn`` because no graph had their shape.
    """

    def __init__(self, fn: Callable[..., Any]) -> None:
        self.fn = fn
        self._graphs: dict[tuple[Any, ...], tuple[Any, tuple[Any, ...], dict[str, Any], Any]] = {}
        self._lock = threading.Lock()
        self.replays = 0
        self.misses = 0

    @property
    def shapes(self) -> list[tuple[Any, ...]]:
        return list(self._graphs)

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        """``fn(*args, **kwargs)``, by a replay where a graph has this call's shape."""
        try:
            entry = self._graphs.get(_key(args, kwargs))
        except TypeError:  # an unhashable non-tensor argument: no graph can have baked it in
            entry = None
        if entry is None:
            with self._lock:  # the count only: fn itself runs outside the lock
                self.misses += 1
            return self.fn(*args, **kwargs)
        graph, static_args, static_kwargs, out = entry
        with self._lock:
            for static, value in itertools.chain(zip(static_args, args), ((static_kwargs[k], v) for k, v in kwargs.items())):
                if static is not value and hasattr(static, "copy_"):
                    static.copy_(value)
            graph.replay()
            self.replays += 1
        return out

    def _capture(self, torch: Any, args: tuple[Any, ...], kwargs: dict[str, Any], pool: Any, warmup_calls: int) -> None:
        """Warm ``fn`` on a side stream (as torch's CUDA graph docs ask), then capture one call into ``pool``."""
        side = torch.cuda.Stream()
        side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(side):
            for _ in range(warmup_calls):
                self.fn(*args, **kwargs)
        torch.cuda.current_stream().wait_stream(side)
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph, pool=pool):
            out = self.fn(*args, **kwargs)
        self._graphs[_key(args, kwargs)] = (graph, args, kwargs, out)


def capture_cuda_graphs(
    fn: Callable[..., Any], *, shapes: Iterable[Any], factory: Callable[[Any], Any], warmup_calls: int = 3
) -> CapturedGraphs:
    """Capture one CUDA graph of ``fn`` per shape, largest first, into one shared memory pool.

    Use it after ``ik.warmup`` recommended buckets: pad each request with ``ik.pad_to_bucket`` and
    call the result instead of ``fn``.  Padding must not change the result (see
    :mod:`inductor_knobs.buckets`).

    Args:
        fn: the compiled callable (``torch.compile``/``ik.compile`` with a mode without CUDA graphs,
            e.g. ``"max-autotune-no-cudagraphs"``), or any CUDA callable that does not synchronise.
        shapes: one item per graph, passed to ``factory`` (for example ``report.recommended_buckets``).
        factory: returns a call's inputs for a shape, as ``ik.warmup`` takes them: a tuple/list of
            positional arguments, a mapping of keyword arguments, or one argument.  Its tensors become
            the graph's static inputs (kept for the graph's life).
        warmup_calls: calls of ``fn`` per shape on a side stream before its capture (int >= 1; default 3).

    Returns:
        A :class:`CapturedGraphs` callable.

    Raises:
        InvalidKnobValue: ``fn``/``factory`` not callable, no shapes, or ``warmup_calls`` < 1.
        GraphCaptureFailed: no CUDA, an input not on CUDA, or the capture failed (the message names
            the shape and torch's error); nothing stays captured.

    Relies on ``torch.cuda.CUDAGraph``, ``torch.cuda.graph(graph, pool=...)`` and
    ``torch.cuda.graph_pool_handle()`` (checked in torch 2.11 and 2.13).
    """
    if not callable(fn) or not callable(factory):
        raise _invalid("fn/factory", (fn, factory), "callables (the compiled model; shape -> its inputs)")
    shape_list = list(shapes)
    if not shape_list:
        raise _invalid("shapes", shapes, "at least one shape (e.g. the report's recommended_buckets)")
    if isinstance(warmup_calls, bool) or not isinstance(warmup_calls, int) or warmup_calls < 1:
        raise _invalid("warmup_calls", warmup_calls, "an int >= 1")
    import torch

    if not torch.cuda.is_available():
        raise GraphCaptureFailed(f"capture_cuda_graphs needs a CUDA GPU; torch {torch_version()} sees none")
    from .serving import _as_call

    calls = [(shape, *_as_call(factory(shape))) for shape in shape_list]
    for shape, args, kwargs in calls:
        off = [v for v in (*args, *kwargs.values()) if isinstance(v, torch.Tensor) and v.device.type != "cuda"]
        if off:
            raise GraphCaptureFailed(
                f"capture_cuda_graphs: the inputs for shape {shape!r} hold a tensor on {off[0].device}; a CUDA graph "
                f"replays only CUDA tensors (torch {torch_version()})"
            )
    # Largest first: a smaller graph then reuses the pool memory the larger capture freed.
    calls.sort(key=lambda call: -sum(v.numel() for v in (*call[1], *call[2].values()) if isinstance(v, torch.Tensor)))
    captured = CapturedGraphs(fn)
    pool = torch.cuda.graph_pool_handle()
    for shape, args, kwargs in calls:
        try:
            captured._capture(torch, args, kwargs, pool, warmup_calls)
        except Exception as err:
            captured._graphs.clear()
            raise GraphCaptureFailed(
                f"capture_cuda_graphs: capturing shape {shape!r} failed on torch {torch_version()}: {err!r} (an op that "
                "synchronises with the host or a CPU tensor cannot be captured; nothing stays captured)"
            ) from err
    torch.cuda.synchronize()
    return captured


def _key(args: tuple[Any, ...], kwargs: dict[str, Any]) -> tuple[Any, ...]:
    """What a replay must match: each tensor's dtype, shape and device; every other argument's value."""
    parts: list[Any] = []
    for name, value in itertools.chain(enumerate(args), sorted(kwargs.items())):
        shape = getattr(value, "shape", None)
        if shape is not None and hasattr(value, "copy_"):
            parts.append((name, value.dtype, tuple(shape), value.device))
        else:
            parts.append((name, type(value), value))
    return tuple(parts)


def _invalid(name: str, value: object, allowed: str) -> InvalidKnobValue:
    return InvalidKnobValue(f"capture_cuda_graphs({name}={value!r}) is invalid on torch {torch_version()}: allowed {allowed}")
