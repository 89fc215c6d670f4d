"""Per-bucket tuning for ``ik.serving.warmup(per_bucket=...)``: one graph per bucket, each with GEMMs autotuned at its size.

Why: a dynamic compile (``torch.compile(dynamic=True)``, ``mark_dynamic``) lowers and autotunes its GEMMs
once, at the first size it sees.  On one H100 (torch 2.11, ``Linear(3420 -> 1280)``, bf16,
``max-autotune-no-cudagraphs``) the graph first called at 560 rows ran 1.20-1.66x slower at 1024-8192 rows
than a compile tuned at each size; at 128-560 rows it was the faster one (the static compile pads the
weight's K dimension, 3420 -> 3424).  So the target at each size is the better of the two.

How (every release 2.4-2.15): a graph per bucket.  ``fn`` is compiled with static shapes (``dynamic=False``
or the default, no ``mark_dynamic`` on the bucketed dimension), and the warm-up calls it at each bucket while
Dynamo's ``automatic_dynamic_shapes`` is off and its per-frame recompile limit is raised by the number of
buckets (:func:`graph_per_bucket`).  Each bucket then fails the other buckets' size guards, recompiles
with static sizes and autotunes its GEMMs at its own row count.  Traffic at a bucket size passes that
bucket's guards: nothing compiles.  Dynamo looks a frame's graphs up newest first and moves a hit to the
front; a graph with a dynamic size would pass every bucket's size and so serve them all once it exists.
Traffic therefore must meet only warmed sizes in ``fn`` (pad to buckets), or go through a
:class:`BucketRouter`, which sends every other size to a separately compiled dynamic ``dynamic_fn``.

Considered and not used:

- ``mark_dynamic(..., hint_override=)`` (2.13 ``_dynamo/decorators.py:1236``; later releases only): one
  graph still tunes once, at the hint; per-size tuning needs one graph per range anyway, and the
  argument is missing on older releases.
- ``torch.compile(shapes_spec=)``: in 2.13 (``torch/__init__.py:2590``) but not in 2.14.1, whose
  ``compile`` takes ``dynamic_shapes=`` (:3025) instead; it says which sizes are dynamic, not where to tune.
- torch's GEMM ``lookup_table`` pinned per exact shape with ``ik.record_autotune().write_lookup_table()``:
  2.10+ and CUDA only (``patches/features.py``), and it needs the per-size autotune this does first.
"""

from __future__ import annotations

import statistics
import threading
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from ..errors import InvalidKnobValue, torch_version
from ..ext import torch_compat
from .signature import input_signature

#: ``per_bucket=`` values: off, a graph per bucket, or a graph per bucket only where it measured faster.
MODES = (False, True, "auto")
#: ``"auto"`` keeps a bucket's own graph when the dynamic graph's call takes at least this much longer (2%).
MIN_GAIN = 0.02


def check_per_bucket(value: object) -> bool | str:
    """Validate ``per_bucket=``.

    Returns:
        ``False``, ``True`` or ``"auto"``.

    Raises:
        InvalidKnobValue: anything else.
    """
    if isinstance(value, bool) or value == "auto":
        return value  # type: ignore[return-value]
    raise InvalidKnobValue(
        f"warmup per_bucket={value!r} is invalid on torch {torch_version()}: allowed False, True (a graph per bucket) "
        "or 'auto' (a graph per bucket where it measured faster than dynamic_fn's one graph)"
    )


#: The process-global resource a per-bucket warm-up holds where Dynamo's config is not per thread (torch < 2.12).
DYNAMO_CONFIG = "torch._dynamo.config"


def graph_per_bucket(count: int) -> Any:
    """A ``with`` block inside which Dynamo compiles a new size with static shapes, and a frame may hold ``count``
    more graphs.

    Sets ``torch._dynamo.config.automatic_dynamic_shapes = False`` (every release 2.4-2.15; 2.13
    ``_dynamo/config.py:185``) and raises the per-frame recompile limit (the key per release is the patch
    module's ``recompile_limit_key``: ``cache_size_limit`` before 2.7, ``recompile_limit`` from 2.7) by
    ``count``, read as the block enters.  Both go through the knobs' own undo record (``ik.ext.ConfigChange``
    in ``ik.ext.Applied``): written with torch's raw patcher, read back, put back exactly on exit, an
    interrupted exit finished by running it again.  From 2.12 Dynamo's overrides are per thread, like
    Inductor's, so the calling thread compiles under them.

    Before 2.12 they are process-global: two threads (or asyncio tasks) inside at once, leaving in the other order,
    would leave the first one's values set for the process.  There the block first holds :data:`DYNAMO_CONFIG`
    for its thread or task (``ik.ext.Claim``, as a knob block holds Inductor's config), so a second owner is
    refused before anything is written.

    Args:
        count (int): how many more graphs a frame may hold (>= 0): the number of buckets.

    Returns:
        Any: the block (``ik.ext.Applied``); ``active`` while an undo is still to run.

    Raises (on enter):
        ConcurrentKnobsError: torch < 2.12 and another thread or asyncio task is inside; nothing written.
    """
    import torch._dynamo.config as cfg

    from ..ext import Applied, Claim, ConfigChange

    patches = torch_compat.installed()
    key = patches.recompile_limit_key

    def write(push: Callable[[Callable[[], None]], None]) -> None:
        limit = int(patches.read_config(cfg, key)) + count  # type: ignore[call-overload]
        ConfigChange(patches, [(cfg, key, limit), (cfg, "automatic_dynamic_shapes", False)])(push)

    steps: list[Callable[[Callable[[Callable[[], None]], None]], None]] = [write]
    if not patches.config_is_thread_local:
        why = (
            f"on this torch ({torch_version()}) Dynamo's config is process-global (per thread and task from torch "
            "2.12); run per-bucket warm-ups one at a time (a lock around ik.serving.warmup) or use torch >= 2.12"
        )
        steps.insert(0, Claim(DYNAMO_CONFIG, why, f"ik.serving.warmup(per_bucket=...) over {count} buckets"))
    return Applied(steps)


@dataclass(frozen=True)
class BucketTuning:
    """One bucket of ``ik.serving.warmup(per_bucket=...)``: what its own graph cost and what it gained.

    Attributes:
        bucket: the bucket size (the item passed to ``factory``).
        compile_seconds: the first call's extra seconds over the warm call in ``fn`` (Dynamo compile,
            Inductor lowering, GEMM autotune): the compile-time cost of the bucket's own graph.
        compiles: the Dynamo compilations that first call caused (0: ``fn`` had a graph that covered it).
        per_bucket_ms: ms per call of the bucket's own graph (``fn``): its kernel time replayed from a CUDA graph
            (:func:`kernel_ms`) where that was measured for both graphs, else a warm call's wall time.
        dynamic_ms: the same of ``dynamic_fn``'s one graph at this size, or None (not given).
        gain: ``dynamic_ms / per_bucket_ms`` (above 1: the bucket's own graph is faster), or None.
        kept: whether traffic at this bucket runs the bucket's own graph (``per_bucket=True``: always;
            ``"auto"``: where ``gain`` is at least ``1 + MIN_GAIN``).
    """

    bucket: Any
    compile_seconds: float
    compiles: int
    per_bucket_ms: float
    dynamic_ms: float | None
    gain: float | None
    kept: bool

    def to_dict(self) -> dict[str, Any]:
        return dict(vars(self))


#: Rounds of :func:`kernel_ms`: each graph is replayed this many times, alternating with the other.
KERNEL_ROUNDS = 3

#: One :func:`kernel_ms` at a time in the process: torch's recompile stance is process-global (two threads setting and
#: restoring it in overlapping order would leave ``fail_on_recompile`` set), and two GPU timings at once disturb
#: each other.
_TIMING = threading.Lock()


def kernel_ms(
    fns: Sequence[Callable[..., Any]], args: tuple[Any, ...], kwargs: dict[str, Any], rounds: int = KERNEL_ROUNDS
) -> list[float] | None:
    """Milliseconds per call of each warmed ``fn(*args, **kwargs)`` replayed from a CUDA graph
    (``triton.testing.do_bench_cudagraph``): its kernels' time without the host's launch cost, as a served bucket's
    CUDA graph runs them, measured side by side.  torch may compile nothing meanwhile
    (``set_stance("fail_on_recompile")``, 2.6+).

    The functions take turns, ``rounds`` times (the order reversed every other round), and each gets the median of
    its rounds: one replay of about 20 ms (``do_bench_cudagraph``'s default) depends on the state the GPU is in then
    (its clocks after an idle compile), which moved one graph's time by 6% between two measurements on an H200
    (torch 2.11, BERT-base at 128 tokens: 0.849 and 0.901 ms for the same graph; its kernels' profiled time was
    0.70 ms both times).

    Args:
        fns (Sequence[Callable]): the warmed callables (e.g. a bucket's own graph and the dynamic graph).
        args (tuple[Any, ...]): the positional inputs of one call, kwargs (dict[str, Any]) the keyword ones.
        rounds (int): turns per callable (below 1 counts as 1).

    Thread-safe: calls from several threads take turns (one process-wide lock), each holding the stance only for its
    own timings.

    Returns:
        list[float] | None: ms per call of each of ``fns``, in their order; None where that cannot be measured (or
        ``fns`` is empty), and
        the caller compares warm calls' wall times: no CUDA tensor among the inputs, no Triton, CUDA graph trees in
        this thread (a compile with ``triton.cudagraphs``, e.g. mode ``"reduce-overhead"``: its own recordings must
        not run under another capture), or a call that cannot be captured or would compile.
    """
    import torch

    if not fns or not any(isinstance(v, torch.Tensor) and v.is_cuda for v in (*args, *kwargs.values())):
        return None
    try:
        from triton.testing import do_bench_cudagraph
    except ImportError:
        return None
    patches = torch_compat.installed(strict=False)
    if patches.cudagraph_trees_in_use():
        return None
    undos: list[Callable[[], None]] = []
    times: list[list[float]] = [[] for _ in fns]
    with _TIMING:
        try:
            patches.refuse_compiles(undos.append)
            for turn in range(max(1, rounds)):
                order = range(len(fns)) if turn % 2 == 0 else reversed(range(len(fns)))
                for index in order:
                    fn = fns[index]
                    times[index].append(float(do_bench_cudagraph(lambda fn=fn: fn(*args, **kwargs))))
        except Exception:  # noqa: BLE001 - not capturable, or it would compile: the wall-time comparison stands
            return None
        finally:
            for undo in reversed(undos):
                undo()
    return [statistics.median(each) for each in times]


def tune(
    mode: bool | str, own: Sequence[Any], dynamic: Sequence[Any] | None, kernels: Sequence[tuple[float, float] | None] = ()
) -> list[BucketTuning]:
    """Per bucket, the cost and gain of its own graph, and whether it is kept.

    Args:
        mode: ``True`` or ``"auto"`` (see :data:`MODES`).
        own: the warm-up steps of ``fn`` (:class:`~inductor_knobs.serving.warm_up_report.WarmupStep`), one per bucket.
        dynamic: the steps of ``dynamic_fn`` at the same buckets, or None.
        kernels: per bucket, ``(fn's, dynamic_fn's)`` kernel ms (:func:`kernel_ms`) where both were measured;
            they then replace the warm calls' wall times.

    Returns:
        One :class:`BucketTuning` per bucket, in bucket order.
    """
    rows = []
    for index, step in enumerate(own):
        own_ms = 1000 * step.last_call_seconds
        dynamic_ms = 1000 * dynamic[index].last_call_seconds if dynamic is not None else None
        measured = kernels[index] if index < len(kernels) else None
        if measured is not None:
            own_ms, dynamic_ms = measured
        gain = dynamic_ms / own_ms if dynamic_ms is not None and own_ms > 0 else None
        kept = mode is True or (gain is not None and gain >= 1 + MIN_GAIN)
        cost = max(0.0, step.first_call_seconds - step.last_call_seconds)
        rows.append(BucketTuning(step.shape, cost, len(step.compiles), own_ms, dynamic_ms, gain, kept))
    return rows


class BucketRouter:
    """Serves each warmed bucket with the graph the warm-up kept for it; made by ``ik.serving.warmup(per_bucket=...,
    dynamic_fn=...)`` as ``report.serving_fn``.

    A call whose input signature (tensor dtypes, shapes, devices) is a bucket kept per bucket goes to ``fn``
    (that bucket's own graph); any other call goes to ``dynamic_fn`` (its one dynamic graph), so ``fn`` never
    meets a new size and never compiles a dynamic graph that would serve the buckets instead.

    Attributes:
        fn: the callable holding a graph per bucket.
        dynamic_fn: the callable with one dynamic graph.
        own: the signatures served by ``fn``.
    """

    __slots__ = ("dynamic_fn", "fn", "own")

    def __init__(self, fn: Callable[..., Any], dynamic_fn: Callable[..., Any], own: frozenset[tuple[Any, ...]]) -> None:
        self.fn = fn
        self.dynamic_fn = dynamic_fn
        self.own = own

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        target = self.fn if input_signature(args, kwargs) in self.own else self.dynamic_fn
        return target(*args, **kwargs)

    def __repr__(self) -> str:
        return f"BucketRouter({len(self.own)} buckets with their own graph, others to dynamic_fn)"


def router(
    fn: Callable[..., Any], dynamic_fn: Callable[..., Any], rows: Sequence[BucketTuning], signatures: Mapping[Any, Any]
) -> BucketRouter:
    """A :class:`BucketRouter` that sends the kept buckets (``signatures``: bucket -> input signature) to ``fn``."""
    return BucketRouter(fn, dynamic_fn, frozenset(signatures[r.bucket] for r in rows if r.kept))
