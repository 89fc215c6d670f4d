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
import time
from collections.abc import Callable, Iterable
from typing import Any

from .. import RuntimeEvent
from ..errors import InvalidKnobValue, torch_version
from ..ext import describe_owner, events
from .errors import GraphCallRefused, GraphCaptureFailed

#: What a replayed call returns: ``"copy"`` (a clone the caller owns) or ``"static"`` (the graph's own buffer).
OUTPUTS = ("copy", "static")
#: A wait for the lock shorter than this (seconds) is not published as ``queued``.
MIN_QUEUED_SECONDS = 1e-4


class CapturedGraphs:
    """The compiled callable with one CUDA graph per captured input shape; made by :func:`capture_cuda_graphs`.

    Calling it with inputs of a captured shape (same dtypes, shapes, devices and non-tensor values)
    copies the tensors into that graph's static inputs and replays it; any other call goes to ``fn``
    (counted in :attr:`misses`).

    **Who owns the output.**  The graphs share one memory pool, so every replay overwrites the
    static outputs.  With ``outputs="copy"`` (the default) a replayed call returns a clone of the
    output made under the lock, on the calling stream: the caller owns it, and no other call can
    change it; it costs one device-to-device copy of the output per call.  With ``outputs="static"``
    the call returns the graph's own buffer, valid until the next call; only the thread that called
    first may call it (:class:`~inductor_knobs.serving.errors.GraphCallRefused` for any other thread,
    nothing replayed), so no caller can read another caller's result.

    **Threads and streams.**  Calls are serialised by a lock: copying the inputs, the replay and the
    copy of the output happen as one.  Each call runs on the caller's current CUDA stream and first
    waits (on the GPU, ``Stream.wait_event``) for the previous call's work, so calls from several
    threads and streams are ordered and each reads its own inputs.  The time a call waited for the
    lock is published on the compile-event channel as a ``queued`` runtime event, which
    ``ik.serving.no_stalls`` names as the cause instead of a slow GPU.

    Attributes:
        fn: the callable the graphs were captured from.
        outputs: ``"copy"`` or ``"static"``.
        shapes: the captured keys, in capture order.
        capture_shapes: the items given to :func:`capture_cuda_graphs` (``shapes=``), in the order given
            (what ``ik.serving.save_serving_bundle`` records to capture again in another process).
        warmup_calls: the warm-up calls per shape before each capture.
        replays: calls served by a replay.
        misses: calls served by ``fn`` because no graph had their shape.
    """

    def __init__(self, fn: Callable[..., Any], outputs: str = "copy") -> None:
        if outputs not in OUTPUTS:
            raise _invalid("outputs", outputs, " or ".join(repr(o) for o in OUTPUTS))
        self.fn = fn
        self.outputs = outputs
        self._graphs: dict[tuple[Any, ...], tuple[Any, tuple[Any, ...], dict[str, Any], Any]] = {}
        self._lock = threading.Lock()
        self._done: Any = None  # the CUDA event recorded after the previous replayed call's work
        self._static_caller: int | None = None  # outputs="static": the one thread that may call
        self.replays = 0
        self.misses = 0
        self.capture_shapes: list[Any] = []
        self.warmup_calls = 0

    @property
    def shapes(self) -> list[tuple[Any, ...]]:
        return list(self._graphs)

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        """``fn(*args, **kwargs)``, by a replay where a graph has this call's shape.

        Raises:
            GraphCallRefused: ``outputs="static"`` and a thread other than the first caller calls.
        """
        try:
            entry = self._graphs.get(_key(args, kwargs))
        except TypeError:  # an unhashable non-tensor argument: no graph can have baked it in
            entry = None
        if entry is None:
            with self._lock:  # the count only: fn itself runs outside the lock
                self.misses += 1
            return self.fn(*args, **kwargs)
        graph, static_args, static_kwargs, out = entry
        if self.outputs == "static":
            self._check_static_caller()
        queued_since = time.perf_counter()
        with self._lock:
            waited = time.perf_counter() - queued_since
            cuda = _cuda_of(out)
            if cuda is not None and self._done is not None:
                cuda.current_stream().wait_event(self._done)  # the previous call's clone and replay come first
            for static, value in itertools.chain(zip(static_args, args), ((static_kwargs[k], v) for k, v in kwargs.items())):
                if static is not value and hasattr(static, "copy_"):
                    static.copy_(value)
            graph.replay()
            result = _clone_tensors(out) if self.outputs == "copy" else out
            if cuda is not None:
                self._done = cuda.Event()
                self._done.record()
            self.replays += 1
        if waited >= MIN_QUEUED_SECONDS:
            detail = f"waited for another thread's replay of {getattr(self.fn, '__name__', type(self.fn).__name__)}"
            events.publish("runtime", RuntimeEvent("queued", waited, detail, queued_since))
        return result

    def _check_static_caller(self) -> None:
        me = threading.get_ident()
        with self._lock:
            if self._static_caller is None:
                self._static_caller = me
        if self._static_caller != me:
            raise GraphCallRefused(
                f"capture_cuda_graphs({getattr(self.fn, '__name__', self.fn)!r}, outputs='static') called from "
                f"{describe_owner((me, None))}, but {describe_owner((self._static_caller, None))} called it first: a static "
                "output is overwritten by the next replay, so only one thread may call. Allowed: calls from that thread, "
                f"or outputs='copy' (each call gets its own output) from any thread (torch {torch_version()})"
            )

    def _capture(self, torch: Any, args: tuple[Any, ...], kwargs: dict[str, Any], pool: Any, warmup_calls: int) -> None:
        """Warm ``fn`` on a side stream (as torch's CUDA graph docs ask), then capture one call into ``pool``.

        Under ``ik.emulate_gpu`` on this thread the warm-up runs on the emulation's green stream (it runs
        whatever autotuning ``fn`` does on its first calls) and the capture on its capture stream, a second
        stream of the green context (:func:`inductor_knobs.emulation.confine.capture_streams`): a graph
        replays on the SMs of the stream it was captured on.  Otherwise the capture runs on
        ``torch.cuda.graph``'s own side stream (``stream=None``).
        """
        from ..ext import capture_streams

        green = capture_streams()
        side = torch.cuda.Stream() if green is None else green[0]
        side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(side):
            for _ in range(warmup_calls):
                self.fn(*args, **kwargs)
        torch.cuda.current_stream().wait_stream(side)
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph, pool=pool, stream=None if green is None else green[1]):
            out = self.fn(*args, **kwargs)
        self._graphs[_key(args, kwargs)] = (graph, args, kwargs, out)


def capture_cuda_graphs(
    fn: Callable[..., Any],
    *,
    shapes: Iterable[Any],
    factory: Callable[[Any], Any],
    warmup_calls: int = 3,
    outputs: str = "copy",
) -> CapturedGraphs:
    """Capture one CUDA graph of ``fn`` per shape, largest first, into one shared memory pool.

    Use it after ``ik.serving.warmup`` recommended buckets: pad each request with ``ik.serving.pad_to_bucket`` and
    call the result instead of ``fn``.  Padding must not change the result (see
    :mod:`inductor_knobs.serving.buckets`).

    Args:
        fn: the compiled callable (``torch.compile``/``ik.compile`` with a mode without CUDA graphs,
            e.g. ``"max-autotune-no-cudagraphs"``), or any CUDA callable that does not synchronise.
        shapes: one item per graph, passed to ``factory`` (for example ``report.recommended_buckets``).
        factory: returns a call's inputs for a shape, as ``ik.serving.warmup`` takes them: a tuple/list of
            positional arguments, a mapping of keyword arguments, or one argument.  Its tensors become
            the graph's static inputs (kept for the graph's life).
        warmup_calls: calls of ``fn`` per shape on a side stream before its capture (int >= 1; default 3).
            Under ``ik.emulate_gpu`` the warm-up and the capture run on the emulation's green context, so
            the replays stay on the emulated SMs.
        outputs: ``"copy"`` (default): each replayed call returns a clone its caller owns, safe from any
            thread; ``"static"``: the graph's own output buffer, overwritten by the next call, for one
            calling thread only (see :class:`CapturedGraphs`).

    Returns:
        A :class:`CapturedGraphs` callable.

    Raises:
        InvalidKnobValue: ``fn``/``factory`` not callable, no shapes, ``warmup_calls`` < 1, or an
            unknown ``outputs``.
        GraphCaptureFailed: no CUDA, an input not on CUDA, or the capture failed (the message names
            the shape and torch's error); nothing stays captured.

    Relies on ``torch.cuda.CUDAGraph``, ``torch.cuda.graph(graph, pool=..., stream=...)`` (``stream=None``:
    torch's ``default_capture_stream``, ``cuda/graphs.py:408`` in 2.13) and ``torch.cuda.graph_pool_handle()``
    (checked in torch 2.11 and 2.13).
    """
    if not callable(fn) or not callable(factory):
        raise _invalid("fn/factory", (fn, factory), "callables (the compiled model; shape -> its inputs)")
    shape_list = list(shapes)
    if not shape_list:
        raise _invalid("shapes", shapes, "at least one shape (e.g. the report's recommended_buckets)")
    if isinstance(warmup_calls, bool) or not isinstance(warmup_calls, int) or warmup_calls < 1:
        raise _invalid("warmup_calls", warmup_calls, "an int >= 1")
    if outputs not in OUTPUTS:
        raise _invalid("outputs", outputs, " or ".join(repr(o) for o in OUTPUTS))
    import torch

    if not torch.cuda.is_available():
        raise GraphCaptureFailed(f"capture_cuda_graphs needs a CUDA GPU; torch {torch_version()} sees none")
    from .signature import as_call

    calls = [(shape, *as_call(factory(shape))) for shape in shape_list]
    for shape, args, kwargs in calls:
        off = [v for v in (*args, *kwargs.values()) if isinstance(v, torch.Tensor) and v.device.type != "cuda"]
        if off:
            raise GraphCaptureFailed(
                f"capture_cuda_graphs: the inputs for shape {shape!r} hold a tensor on {off[0].device}; a CUDA graph "
                f"replays only CUDA tensors (torch {torch_version()})"
            )
    # Largest first: a smaller graph then reuses the pool memory the larger capture freed.
    calls.sort(key=lambda call: -sum(v.numel() for v in (*call[1], *call[2].values()) if isinstance(v, torch.Tensor)))
    captured = CapturedGraphs(fn, outputs)
    captured.capture_shapes, captured.warmup_calls = shape_list, warmup_calls
    pool = torch.cuda.graph_pool_handle()
    for shape, args, kwargs in calls:
        started = time.perf_counter()
        try:
            captured._capture(torch, args, kwargs, pool, warmup_calls)
        except Exception as err:
            captured._graphs.clear()
            raise GraphCaptureFailed(
                f"capture_cuda_graphs: capturing shape {shape!r} failed on torch {torch_version()}: {err!r} (an op that "
                "synchronises with the host or a CPU tensor cannot be captured; nothing stays captured)"
            ) from err
        # On the compile-event channel, as torch's own graph-tree recordings are: a guard or a recorder
        # (ik.serving.load_serving_bundle's proof) names every capture with its time.
        detail = f"ik.serving.capture_cuda_graphs: shape {shape!r} ({warmup_calls} warm-up calls and one capture)"
        events.publish("runtime", RuntimeEvent("cudagraph_recording", time.perf_counter() - started, detail, started))
    torch.cuda.synchronize()
    return captured


def _cuda_of(out: Any) -> Any:
    """``torch.cuda`` when the output holds a CUDA tensor (a real graph), else None (a CPU stand-in in tests)."""
    import torch
    from torch.utils._pytree import tree_leaves

    on_cuda = any(isinstance(t, torch.Tensor) and t.device.type == "cuda" for t in tree_leaves(out))
    return torch.cuda if on_cuda else None


def _clone_tensors(out: Any) -> Any:
    """``out`` with every tensor cloned (tuples, lists, dicts and the output classes torch's pytree knows)."""
    import torch
    from torch.utils._pytree import tree_map_only

    return tree_map_only(torch.Tensor, lambda t: t.clone(), out)


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
