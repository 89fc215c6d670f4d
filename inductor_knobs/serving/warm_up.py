"""``ik.serving.warmup``: run a compiled callable over representative inputs before traffic, and say what is still cold.

Why a new shape can stall: Dynamo guards on what it specialised (a static size, or the range
and 0/1-specialisation of a dynamic one); a guard failure recompiles the frame, and Inductor then
lowers every GEMM again and autotunes any ``op(shapes)`` whose timings are not in its autotune
cache.  ``warmup`` runs the compiled callable over representative inputs so that all of that
happens before traffic, and reports what each input caused (:mod:`inductor_knobs.serving.warm_up_report`);
probes at shapes it did not warm tell what is still cold, and the standard fixes.  During traffic,
``ik.serving.no_autotune`` (:mod:`inductor_knobs.serving.autotune_guard`) proves it.
"""

from __future__ import annotations

import statistics
import threading
import weakref
from collections.abc import Callable, Iterable
from contextlib import nullcontext
from typing import Any

from ..errors import InvalidKnobValue, torch_version
from ..ext import Collector
from .buckets import check_buckets, suggest_buckets
from .per_bucket import check_per_bucket, graph_per_bucket, kernel_ms, router, tune
from .sdpa_trial import TrialArm, decide, measure
from .signature import as_call, input_signature, on_cuda
from .stalls import no_stalls, profiler_cost
from .torch_fixes import torch_fixes
from .warm_up_report import ColdCause, WarmupReport, WarmupStep

#: A probe whose first call costs more than this multiple of the steady state paid a per-shape cost.
COLD_RATIO = 2.0
#: A steady call whose host part (until the callable returned) is at least this share of it is host-bound.
HOST_BOUND = 0.8
#: Compiled callable -> ``(shape, autotune records)`` of every warm-up step of it that autotuned, in this process: an
#: AOT bundle's build reuses those choices (:func:`tuned_steps`) even when the report it is given is a later
#: warm-up's (of the CUDA graphs captured from the callable), which autotuned nothing.
_TUNED: weakref.WeakKeyDictionary[Any, list[tuple[Any, list[Any]]]] = weakref.WeakKeyDictionary()
_TUNED_LOCK = threading.Lock()  # warm-ups of one model from several threads each add their steps


def remember_tuned(fn: Any, tuned: list[tuple[Any, list[Any]]]) -> None:
    """Add ``tuned`` (``(shape, autotune records)`` of warm-up steps) to what :func:`tuned_steps` returns for ``fn``;
    nothing for a callable without weak references (its report still carries them)."""
    if not tuned:
        return
    try:
        with _TUNED_LOCK:
            _TUNED.setdefault(fn, []).extend(tuned)
    except TypeError:
        pass


def tuned_steps(fn: Any) -> list[tuple[Any, list[Any]]]:
    """The ``(shape, autotune records)`` of every warm-up step of ``fn`` (a compiled callable) in this process that
    autotuned, oldest first; ``[]`` if none (or ``fn`` cannot be weakly referenced)."""
    try:
        with _TUNED_LOCK:
            return list(_TUNED.get(fn, ()))
    except TypeError:
        return []


#: What each per-shape cost is, for the report (``records.CAUSES`` says what the hook is).
PER_SHAPE = {
    "cudnn_sdpa_plan": "cuDNN SDPA builds an execution plan per exact sequence length",
    "dynamo_compile": "Dynamo recompiles for shapes outside its guards",
    "gemm_autotune": "Inductor autotunes GEMMs for shapes it has not benchmarked",
    "cudagraph_recording": "CUDA graph trees record one graph per shape",
    "cublas_first_call": "cuBLAS/cuBLASLt pays a first call per GEMM shape",
    "tunableop": "TunableOp tunes each new GEMM shape",
    "cudnn_conv": "cuDNN searches convolution algorithms per shape",
    "runtime_benchmark": "Inductor benchmarks Triton configs at a kernel's first run",
    "coordinate_descent": "Inductor's coordinate descent tunes at a kernel's first run",
    "triton_compile": "Triton compiles a kernel for a new specialisation",
    "triton_load": "Inductor loads compiled Triton kernels for a new specialisation",
    "aten_first_call": "an ATen op is slow at its first call per shape",
    "unattributed": "a first call at a new shape is slow for a reason no hook names",
}


def warmup(
    fn: Callable[..., Any],
    inputs: Iterable[Any] | None = None,
    *,
    shapes: Iterable[Any] | None = None,
    factory: Callable[[Any], Any] | None = None,
    calls_per_input: int = 2,
    probes: Iterable[Any] | str | None = "auto",
    cudnn_sdpa_trial: str | Callable[[], tuple[TrialArm, TrialArm]] | None = None,
    per_bucket: bool | str = False,
    dynamic_fn: Callable[..., Any] | None = None,
) -> WarmupReport:
    """Run a compiled callable over representative inputs so that traffic pays no first-call cost; say what is still cold.

    Args:
        fn: the compiled callable (``torch.compile``/``ik.compile`` result).
        inputs: one item per call: a tuple/list of positional arguments, a mapping of keyword
            arguments, or a single argument.
        shapes: instead of ``inputs``: one item per call, passed to ``factory``, which returns
            the call's inputs as above (for example ``lambda n: torch.randn(n, 3420, device="cuda")``).
            Inputs are made one at a time, so only one lives at once.
        factory: see ``shapes``.
        calls_per_input: calls per input (default 2: CUDA graph trees record on the second call,
            so ``mode="reduce-overhead"`` is warm too; the last call is the steady state).
        probes: shapes *not* warmed, passed to ``factory`` after warm-up to measure what a first call
            at an unseen shape costs.  ``"auto"`` (default): with int ``shapes``, the midpoints of the
            three largest gaps between warmed shapes; otherwise none.  None or ``[]``: no probes.
        cudnn_sdpa_trial: measure ``TORCH_CUDNN_SDPA_AVOID_RECOMPILE=1`` on this model
            (:mod:`inductor_knobs.serving.sdpa_trial`): a builder ``"module:function"`` returning
            ``(fn, factory)``, run over ``shapes`` and the probes in two fresh processes (torch reads the
            variable once per process), after this warm-up; needs ``shapes`` and probes.  A callable
            returning the two :class:`~inductor_knobs.serving.sdpa_trial.TrialArm` s (off, on) instead
            supplies measurements made elsewhere.  The fix is recommended only where it cut the per-shape
            cost, with its measured steady-state cost beside the gain; ``report.trials`` has both arms.
        per_bucket: give each bucket (``shapes``: ints, strictly increasing) its own graph, with GEMMs
            autotuned at its size (:mod:`inductor_knobs.serving.per_bucket`): ``fn`` must be compiled with
            static shapes (``dynamic=False`` or the default, no ``mark_dynamic`` on the bucketed dimension);
            warm-up calls it at each bucket with Dynamo's ``automatic_dynamic_shapes`` off and its recompile
            limit raised by the number of buckets (all releases 2.4-2.15).  ``True``: every bucket keeps its
            graph.  ``"auto"``: also warms ``dynamic_fn`` at every bucket and keeps a bucket's own graph only
            where it was faster (by ``per_bucket.MIN_GAIN``): by kernel time replayed from a CUDA graph on CUDA
            with Triton (``factory`` is then called once more per bucket), else by a warm call's wall time.
            ``report.buckets`` shows per bucket the compile seconds, ms per call of both, the gain and the
            decision.  False (default): off.
        dynamic_fn: with ``per_bucket``: the same model compiled with one dynamic graph
            (``torch.compile(model, dynamic=True)``, same mode and options), measured beside ``fn`` at every
            bucket; ``report.serving_fn`` then routes each kept bucket to ``fn`` and every other size to it.
            Needed by ``"auto"``.  On torch 2.4 compile it from its own copy of the model (``copy.deepcopy``):
            there one compiled from the module object ``fn`` wraps recompiled at a size neither had seen.

    Returns:
        A :class:`WarmupReport`: with ``per_bucket``, ``buckets`` (one row per bucket) and ``serving_fn``
        (what to serve with: ``fn``, or a :class:`~inductor_knobs.serving.per_bucket.BucketRouter` when
        ``dynamic_fn`` is given); per input, the first and last call's seconds, the autotune
        records, the Dynamo (re)compilations with their reasons and the first call's timed causes
        (see :class:`~inductor_knobs.serving.stalls.no_stalls`); per probe the same; the steady state;
        the per-shape costs still cold and the fixes (pad to buckets with
        :func:`~inductor_knobs.serving.buckets.pad_to_bucket`, warm the whole range, or, for cuDNN SDPA
        plans, an SDPA backend without per-shape plans via ``ik.knobs(sdpa_backends=...)``).
        Autotune records need torch 2.5+; on 2.4 only compilations are reported.

    Raises:
        InvalidKnobValue: neither or both of ``inputs`` and ``shapes``/``factory``, ``calls_per_input``
            < 1, probes without ``factory``, a ``cudnn_sdpa_trial`` builder without shapes and probes, a bad
            ``per_bucket``, ``per_bucket`` without ``shapes``/``factory``, with shapes that are not strictly
            increasing positive ints, with probes but no ``dynamic_fn`` (a probe in ``fn`` would compile a
            dynamic graph there, which then serves every bucket), ``"auto"`` without ``dynamic_fn``, or
            ``dynamic_fn`` without ``per_bucket``, or ``per_bucket`` with ``calls_per_input`` < 2.  Nothing is
            called then.
        ConcurrentKnobsError: ``per_bucket`` on torch < 2.12 while another thread or asyncio task warms with
            ``per_bucket`` (Dynamo's config is process-global there); nothing is called then.
        RuntimeError: a ``cudnn_sdpa_trial`` process failed.
        Anything ``fn`` raises.
    """
    if (inputs is None) == (shapes is None) or (shapes is not None and factory is None):
        raise InvalidKnobValue(
            f"warmup needs either inputs=... or shapes=... with factory=... (got inputs={inputs is not None}, "
            f"shapes={shapes is not None}, factory={factory is not None}) on torch {torch_version()}"
        )
    if isinstance(calls_per_input, bool) or not isinstance(calls_per_input, int) or calls_per_input < 1:
        raise InvalidKnobValue(f"warmup calls_per_input={calls_per_input!r} is invalid: allowed an int >= 1")
    shape_list = list(shapes) if shapes is not None else None
    mode = _check_per_bucket(per_bucket, dynamic_fn, shape_list, probes, calls_per_input)
    probe_list = _probe_shapes(probes, shape_list) if not mode or dynamic_fn is not None else []
    if probe_list and factory is None:
        raise InvalidKnobValue(f"warmup probes={probes!r} needs shapes=... with factory=... on torch {torch_version()}")
    if isinstance(cudnn_sdpa_trial, str) and (shape_list is None or not probe_list):
        raise InvalidKnobValue(
            f"warmup cudnn_sdpa_trial={cudnn_sdpa_trial!r} needs shapes=... and probes (shapes not warmed) on torch "
            f"{torch_version()}: each trial process warms the shapes and pays the per-shape cost at the probes"
        )
    # Warm-up diagnoses every new shape (quiet_after=inf) and keeps every call it makes (history=None).
    guard = no_stalls(on="record", profile="new-shapes", min_calls=10**9, quiet_after=float("inf"), history=None)
    items: Iterable[tuple[Any, Any]] = (
        ((None, item) for item in inputs) if inputs is not None else ((s, factory(s)) for s in shape_list or ())  # type: ignore[misc]
    )
    serving_fn: Callable[..., Any] = fn
    rows = []
    with torch_fixes():  # kernels a cache serves keep their tuned configs (torch 2.8-2.15: patches/fixes.py)
        with graph_per_bucket(len(shape_list or ())) if mode else nullcontext():
            steps = [_warm(guard, fn, index, shape, item, calls_per_input) for index, (shape, item) in enumerate(items)]
        remember_tuned(fn, [(step.shape, step.autotune) for step in steps if step.autotune and step.shape is not None])
        profiler_seconds = guard.profiler_seconds
        if mode:
            dynamic = None
            if dynamic_fn is not None:  # its own guard: the report's per-shape baselines stay fn's
                other = no_stalls(on="record", profile="off", min_calls=10**9, quiet_after=float("inf"), history=None)
                other.profiler_seconds = 0.0  # measured once, on fn
                dynamic = [_warm(other, dynamic_fn, i, s, factory(s), calls_per_input) for i, s in enumerate(shape_list or ())]  # type: ignore[misc]
            kernels = []
            if dynamic_fn is not None and mode == "auto":  # by kernel time where a CUDA graph replay measures it
                for step in dynamic or ():
                    args, kwargs = as_call(factory(step.shape))  # type: ignore[misc]
                    measured = kernel_ms((fn, dynamic_fn), args, kwargs)
                    kernels.append(None if measured is None else (measured[0], measured[1]))
            rows = tune(mode, steps, dynamic, kernels)
            if dynamic_fn is not None:
                serving_fn = router(fn, dynamic_fn, rows, {s.shape: s.signature for s in steps})
        probed = [_warm(guard, serving_fn, index, shape, factory(shape), 2) for index, shape in enumerate(probe_list)]  # type: ignore[misc]
    warm = [s.last_call_seconds for s in steps] if calls_per_input > 1 else []
    steady = 1000 * statistics.median(warm) if warm else None
    cold, fixes, buckets = _cold(steps, probed, steady)
    if any(c.kind == "python_gc" for s in steps + probed for c in s.causes):
        fixes.append(
            "gc.freeze() once warm-up is done: Python's full collections then skip everything the model, "
            "its compile and warm-up allocated (a collection paused a warm-up call; see the python_gc lines)"
        )
    shares = [s.last_call_host_seconds / s.last_call_seconds for s in steps if s.last_call_host_seconds and s.last_call_seconds]
    host_share = statistics.median(shares) if shares and calls_per_input > 1 else None
    if host_share is not None and host_share >= HOST_BOUND and any(on_cuda(sig) for sig in guard.seen_shapes()):
        fixes.append(
            f"capture one CUDA graph per bucket and serve by replay (ik.serving.capture_cuda_graphs(fn, shapes=buckets, "
            f"factory=...), fn compiled without CUDA graphs): {100 * host_share:.0f}% of a steady call is host work "
            "(Python, kernel launches), so the GPU waits for the host and any host slowdown reaches the response"
        )
    trials = []
    if cudnn_sdpa_trial is not None:  # measured on this model, in fresh processes: recommended only with a gain
        arms = cudnn_sdpa_trial() if callable(cudnn_sdpa_trial) else measure(cudnn_sdpa_trial, shape_list or [], probe_list)
        trials.append(decide(*arms))
        fixes += [t.text for t in trials if t.recommended]
    fixes += _per_bucket_fixes(rows, dynamic_fn is not None)
    seen = guard.seen_shapes()
    return WarmupReport(
        steps,
        probed,
        steady,
        cold,
        fixes,
        buckets,
        seen,
        guard.shape_seconds(),
        host_share,
        profiler_seconds,
        trials,
        rows,
        serving_fn,
    )


def _check_per_bucket(per_bucket: object, dynamic_fn: object, shapes: list[Any] | None, probes: object, calls: int) -> bool | str:
    """``per_bucket`` and what it needs, checked before anything is called."""
    mode = check_per_bucket(per_bucket)
    version = torch_version()
    if not mode:
        if dynamic_fn is not None:
            raise InvalidKnobValue(f"warmup dynamic_fn=... needs per_bucket=True or 'auto' on torch {version}")
        return mode
    if shapes is None:
        raise InvalidKnobValue(
            f"warmup per_bucket={mode!r} needs shapes=... (the bucket sizes) with factory=... on torch {version}"
        )
    check_buckets(shapes, name="shapes")
    if calls < 2:
        raise InvalidKnobValue(
            f"warmup per_bucket={mode!r} needs calls_per_input >= 2 on torch {version} (got {calls}): a bucket's warm "
            "call is its time per call, and its first call less that is its compile cost"
        )
    if dynamic_fn is not None and not callable(dynamic_fn):
        raise InvalidKnobValue(f"warmup dynamic_fn={dynamic_fn!r} is invalid on torch {version}: allowed a callable or None")
    if mode == "auto" and dynamic_fn is None:
        raise InvalidKnobValue(
            f"warmup per_bucket='auto' needs dynamic_fn=... on torch {version}: the same model compiled with one dynamic "
            "graph (torch.compile(model, dynamic=True)), which it measures against each bucket's own graph"
        )
    if dynamic_fn is None and probes not in (None, "auto") and list(probes):  # type: ignore[call-overload]
        raise InvalidKnobValue(
            f"warmup probes={probes!r} with per_bucket={mode!r} needs dynamic_fn=... on torch {version}: a probe at an "
            "unwarmed size would compile a dynamic graph in fn, which Dynamo then picks for every bucket"
        )
    return mode


def _per_bucket_fixes(rows: list[Any], routed: bool) -> list[str]:
    """What the per-bucket rows call for: a bucket that got no graph of its own, and how to serve."""
    fixes = []
    shared = [r.bucket for r in rows[1:] if r.compiles == 0]
    if shared:
        fixes.append(
            f"buckets {shared} compiled no graph of their own (fn served them with a graph of another size): compile fn "
            "with static shapes (torch.compile(..., dynamic=False), no mark_dynamic on the bucketed dimension)"
        )
    if rows and not routed:
        fixes.append(
            "serve only warmed bucket sizes through fn (ik.serving.pad_to_bucket): a new size compiles a dynamic graph, "
            "which Dynamo then picks for every bucket; or pass dynamic_fn=... and serve report.serving_fn"
        )
    return fixes


def _warm(guard: no_stalls, fn: Callable[..., Any], index: int, shape: Any, item: Any, calls: int) -> WarmupStep:
    args, kwargs = as_call(item)
    with Collector(need_autotune=False) as seen:  # on torch 2.4 a warmup still reports compilations
        first = guard.call(fn, *args, **kwargs)
        del first
        causes = list(guard.last_causes)
        for _ in range(calls - 1):
            guard.call(fn, *args, **kwargs)
    seconds = guard.seconds[-calls:]
    if index == 0 and guard.profiler_seconds is None and calls > 1:  # at the first warm shape, once
        guard.profiler_seconds = profiler_cost(fn, args, kwargs)
    host = guard.last_host_seconds
    return WarmupStep(
        index,
        _describe(args, kwargs),
        seconds[0],
        seconds[-1],
        seen.records,
        seen.compiles,
        causes,
        shape,
        host,
        input_signature(args, kwargs),
    )


def _describe(args: tuple[Any, ...], kwargs: dict[str, Any]) -> list[str]:
    import torch

    values = [*args, *kwargs.values()]
    return [f"{v.dtype}{list(v.shape)}" for v in values if isinstance(v, torch.Tensor)]


def _probe_shapes(probes: Iterable[Any] | str | None, shapes: list[Any] | None) -> list[Any]:
    if probes is None:
        return []
    if isinstance(probes, str):
        if probes != "auto":
            raise InvalidKnobValue(
                f"warmup probes={probes!r} is invalid on torch {torch_version()}: allowed 'auto', None or shapes"
            )
        ints = sorted({s for s in shapes or () if isinstance(s, int) and not isinstance(s, bool)})
        if len(ints) < 2 or len(ints) != len(shapes or ()):
            return []
        gaps = sorted(zip(ints, ints[1:]), key=lambda g: -(g[1] - g[0]))[:3]
        return sorted({(a + b) // 2 + 1 for a, b in gaps if b - a > 1})
    return list(probes)


def _cold(
    steps: list[WarmupStep], probes: list[WarmupStep], steady_ms: float | None
) -> tuple[list[ColdCause], list[str], tuple[int, ...] | None]:
    """What the probes paid, per cause, and the standard fixes for it."""
    if not probes or not steady_ms:
        return [], [], None
    paid: dict[str, list[tuple[Any, float, float]]] = {}
    for probe in probes:
        # Against the probe's own warm call where there is one: a model whose time grows with the
        # input (BERT) is slower at a long probe without paying any first-call cost.
        warm_ms = 1000 * probe.last_call_seconds if probe.last_call_seconds > 0 else steady_ms
        ratio = 1000 * probe.first_call_seconds / warm_ms
        if ratio < COLD_RATIO:
            continue
        kinds = [c.kind for c in sorted(probe.causes, key=lambda c: -c.seconds)] or ["unattributed"]
        for kind in dict.fromkeys(kinds):
            paid.setdefault(kind, []).append((probe.shape, round(1000 * probe.first_call_seconds, 3), round(ratio, 1)))
    warmed = [s.shape for s in steps if isinstance(s.shape, int) and not isinstance(s.shape, bool)]
    low_high = (min(warmed), max(warmed)) if warmed and len(warmed) == len(steps) else None
    cold_count = None if low_high is None else low_high[1] - low_high[0] + 1 - len(set(warmed))
    cold = []
    for kind, seen in paid.items():
        where = f"{cold_count:,} shapes in [{low_high[0]}, {low_high[1]}] are cold" if low_high else "unseen shapes are cold"  # type: ignore[index]
        at = ", ".join(f"{shape}: {ms:.1f} ms = {ratio:.1f}x" for shape, ms, ratio in seen)
        cold.append(
            ColdCause(
                kind,
                seen,
                cold_count,
                f"{PER_SHAPE.get(kind, kind)}: {where} (first calls at unseen shapes: {at} the second call there)",
            )
        )
    if not cold:
        return [], [], None
    fixes: list[str] = []
    buckets = None
    if low_high is not None:
        buckets = suggest_buckets(*low_high)
        step = buckets[1] - buckets[0] if len(buckets) > 1 else 0
        fixes.append(
            f"pad each request to a bucket (ik.serving.pad_to_bucket(x, buckets, dim=...)) with buckets={list(buckets)} and warm "
            f"those {len(buckets)} shapes: every request then meets a warm shape, with fewer than {step} padded positions"
        )
        fixes.append(f"warm every shape in [{low_high[0]}, {low_high[1]}] ({cold_count:,} more calls of ik.serving.warmup)")
    else:
        fixes.append("pad each request to a few bucket sizes (ik.serving.pad_to_bucket) and warm those sizes")
    kinds = [c.kind for c in cold]
    if "cudnn_sdpa_plan" in kinds:
        fixes.append(
            "an SDPA backend without per-shape plans: compile and warm under "
            "ik.knobs(sdpa_backends='FLASH_ATTENTION,EFFICIENT_ATTENTION,MATH') (torch.compiler.reset() first); "
            "its steady state can be slower than cuDNN's: measure it (for cuDNN's own avoid-recompile, "
            "ik.serving.warmup(cudnn_sdpa_trial='module:builder') measures gain and cost on this model)"
        )
    if "dynamo_compile" in kinds:
        fixes.append("mark the varying dimension dynamic (torch._dynamo.mark_dynamic or torch.compile(dynamic=True))")
    return cold, fixes, buckets
