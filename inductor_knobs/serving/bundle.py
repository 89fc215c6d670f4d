"""A serving bundle: one file with everything a fresh serving process needs to serve without compiling anything cold.

After the recipe (``ik.compile``, ``ik.serving.warmup`` over the buckets, ``ik.serving.capture_cuda_graphs``, a warm-up of
what is served), :func:`save_serving_bundle` writes one file: torch's cache artifacts (FX graph,
AOTAutograd, autotune; ``torch.compiler.save_cache_artifacts``, torch 2.7+), the knobs and the rest of
the ``ik.compile`` call, the warmed shapes and buckets, the shapes to capture as CUDA graphs (graphs
cannot be saved), the guard's per-shape baselines, and Triton's cache entries of the kernels served
(:mod:`inductor_knobs.serving.triton_kernels`: those tuned at their first run are not in torch's
artifacts).  It is a compile-cache file (:mod:`inductor_knobs.serving.compile_cache`: one format, one
safe opener, one identity check) whose header also holds a serving section
(:mod:`inductor_knobs.serving.bundle_format`).

In a fresh process :func:`load_serving_bundle` checks the file and its identity (torch, triton, GPU,
knobs) before anything is loaded, puts the Triton kernels into this process's Triton cache where it
lacks them, loads the artifacts, compiles the user's model the same way
(Dynamo still traces: torch has no way around it; every Inductor compile must then be a cache hit),
captures the graphs, and returns the served callable with a guard seeded from the build's
baselines, plus the proof of what the load compiled, autotuned, Triton-compiled and captured
(:class:`~inductor_knobs.serving.cold_start.ColdStartProof`).
"""

from __future__ import annotations

import contextlib
import os
import time
import warnings
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from .. import Knobs
from ..errors import InvalidKnobValue, KnobsError, torch_version
from . import aot_package, bundle_format, compile_cache, triton_kernels
from .cold_start import ColdStartProof, ColdStartRecorder
from .errors import ColdStartCompiled, ColdStartWarning, CompileCacheRefused
from .torch_fixes import torch_fixes
from .warm_up_report import WarmupReport

#: What :func:`load_serving_bundle` does when the load compiled something cold.
ON_COLD = ("raise", "warn")
#: The clock the load's phases are timed with (tests replace it).
_clock = time.perf_counter


@dataclass
class ServingBundle:
    """What :func:`load_serving_bundle` returns: what to serve, its guard, and the proof of the load.

    Attributes:
        served: the callable to serve: one CUDA graph per bucket (:class:`~inductor_knobs.serving.graphs.CapturedGraphs`)
            where the build served graphs, else the compiled model.
        compiled: the ``ik.compile`` result of the user's model.
        guard: an ``ik.serving.no_stalls`` of ``served`` seeded with the build's per-shape baselines (warmed
            shapes are neither new nor profiled); enter it around traffic (``with bundle.guard as served:``).
        proof: what the load compiled, autotuned, Triton-compiled and captured, with seconds per phase.
        buckets: the bucket sizes to pad requests to (``ik.serving.pad_to_bucket(x, bundle.buckets, dim=...)``), or None.
        report: the build's baselines as a :class:`~inductor_knobs.serving.warm_up_report.WarmupReport` (no steps).
        header: the file's header (identity, artifact counts, serving section).
    """

    served: Any
    compiled: Any
    guard: Any
    proof: ColdStartProof
    buckets: tuple[int, ...] | None
    report: WarmupReport
    header: dict[str, Any] = field(repr=False)


def save_serving_bundle(
    path: str | os.PathLike[str],
    served: Any,
    report: Any,
    *,
    buckets: Any = None,
    aot: bool = False,
    factory: Any = None,
    portable: bool = False,
    aot_options: Mapping[str, Any] | None = None,
) -> dict[str, Any]:
    """Write the serving bundle of this process: torch's cache artifacts and how to serve from them (0600, atomically).

    Call it after the recipe, when everything served has been compiled and warmed: the file holds
    every artifact torch recorded in this process, and Triton's cache entry of every kernel loaded in
    this process (each launcher of each ``CachingAutotuner``; the header's ``serving.triton_kernels``
    counts those carried, their bytes and those not found, which are skipped).  The model and its
    weights are not in it.

    With ``aot=True`` the file holds instead an AOTInductor package of the model
    (:mod:`inductor_knobs.serving.aot_package`): the model exported over the report's shapes (the
    sizes that vary across them become dynamic, from their smallest to their largest) and compiled
    once more, ahead of time, under the same knobs, mode and options, with its weights.  The GEMM choices
    of this process's warm-ups of the model (this report's, and earlier ``ik.serving.warmup`` calls on the
    compiled model) are reused, not tuned again: the export traces at the last warmed shape that autotuned
    and, on torch 2.10+, the fastest choice per op is pinned with the ``lookup_table`` knob (``pinned``
    counts the keys; see :func:`~inductor_knobs.serving.aot_package.build`).  A serving
    process then needs neither the model's code nor Dynamo, and compiles nothing.  The guard's
    baselines are still the report's (the same Inductor config; not measured again).  The header's
    ``serving.aot`` records the package's input contract (``inputs``: each input's dtype, device type,
    size ranges, the sizes export tied, layout, and each non-tensor value;
    :func:`~inductor_knobs.serving.aot_package.accepted`), checked at every call of the loaded bundle, and
    the C++ compiler that built it (``cxx``: Inductor's, or the first of
    :func:`~inductor_knobs.serving.aot_package.cpp_compilers` whose package a fresh process loads), and
    whether its CUDA kernels are fatbins of PTX and SASS that load on other GPU architectures (``multi_arch``:
    ``portable``, on a torch with ``aot_inductor.emit_multi_arch_kernel``, e.g. 2.13).

    Args:
        served: what you serve: an ``ik.compile`` result, or ``ik.serving.capture_cuda_graphs`` of one (its
            captured shapes, warm-up calls and ``outputs`` are recorded, to capture again).
        report (WarmupReport): ``ik.serving.warmup(served, shapes=..., factory=...)``'s report: its shapes are
            warmed again at load, its per-shape medians seed the guard.  Build it under
            ``torch.no_grad()`` as you serve (grad mode is part of what Dynamo and the caches key on).
        buckets (Sequence[int] | None): the bucket sizes requests are padded to (strictly increasing
            positive ints); default: the report's shapes when they are all positive ints, else None.
        aot (bool): write an AOTInductor package of the model instead of torch's cache artifacts
            (torch 2.7+; the build compiles the model again, which takes about as long as its first compile).
        factory (Callable[[Any], Any] | None): with ``aot=True``, the report's factory (shape -> a call's
            inputs): the export's example inputs and the sizes that vary come from its calls.
        portable (bool): with ``aot=True``, where this torch has ``aot_inductor.emit_multi_arch_kernel`` and neither
            the ``ik.compile`` options nor the knobs set it, turn it on for the build (default False: the package
            loads on the build's GPU architecture only; True needs CUDA's ``nvcc`` or ``fatbinary`` for a CUDA
            model and no CUTLASS kernels, torch 2.13 ``codecache.py`` :3161).
        aot_options (Mapping[str, Any] | None): with ``aot=True``, Inductor config keys (as ``ik.compile(options=...)``
            spells them) for the AOT compile only, over the ``ik.compile`` mode and options; the warm-up compiled
            without them.  E.g. ``{"coordinate_descent_tuning": False}`` trades the bundle's kernels for build time: on
            an H200 (torch 2.11, the 2-layer Llama, both builds against one warm-up) the first build took 25.2 s after
            the warm-up, and its kernels ran 1.06-1.25x of the warm-up's, against 0.95-1.00x for a build with it
            (``bench/aot_build.py --also-build``, ``docs/benchmarks.md``).  Recorded as
            ``serving.aot.options`` (key -> ``repr`` of the value).  Refused: a key the compiled model's knobs set (a
            knob wins over options), a key the build owns (``aot_package.BUILD_OWNS``), a callable value, and
            ``aot_inductor.emit_multi_arch_kernel`` beside ``portable=True``.  A ``cpp.cxx`` here is the only C++
            compiler tried, as in the ``ik.compile`` options.

    Returns:
        dict[str, Any]: the header written (identity, artifact counts, sha256s, serving section).

    Raises:
        NotSupportedOnThisTorch: torch < 2.7 (no cache artifacts API; no AOTInductor packages).
        InvalidKnobValue: ``served``, ``report``, ``aot``, ``factory``, ``portable`` or ``aot_options`` is not as
            above (an ``aot_options`` value its key does not allow, or one of the refusals above), or a shape,
            bucket, knob or ``ik.compile`` argument is not plain data that JSON reads back the same; with
            ``aot=True``, ``served`` is not of an ``nn.Module``, the factory's calls differ in more than
            tensor sizes or pass a non-tensor other than None, a bool, an int, a finite float or a string,
            ``torch.export``/AOTInductor failed (torch's message included), or a fresh process could load the
            package built with none of the C++ compilers tried
            (:func:`~inductor_knobs.serving.aot_package.build`: each compiler and how its package failed; nothing written).
        UnknownKnob: an ``aot_options`` key that is not an Inductor config key of this torch.
        CompileCacheRefused: torch recorded no cache artifacts in this process (``aot=False``).
    """

    label = f"save_serving_bundle({os.fspath(path)!r})"
    for name, flag in (("aot", aot), ("portable", portable)):
        if flag is not True and flag is not False:
            raise _invalid(name, flag, "True or False", "save_serving_bundle")
    if aot_options is not None and (not aot or not isinstance(aot_options, Mapping)):
        raise _invalid("aot_options", aot_options, "a mapping of Inductor config keys, with aot=True", "save_serving_bundle")
    if aot:
        aot_package.require(label)
        if not callable(factory):
            raise _invalid("factory", factory, "the report's factory (shape -> its inputs) with aot=True", "save_serving_bundle")
    else:
        compile_cache._require_artifacts_api("save_serving_bundle")
    section, compiled = bundle_format.encode(served, report, buckets)
    knobs = compile_cache._knobs_of(compiled)
    if aot:
        from .warm_up import tuned_steps

        shapes = [step.shape for step in report.steps]
        earlier = [*tuned_steps(compiled), *((step.shape, step.autotune) for step in report.steps)]
        tuned = [[r for shape, records in earlier if _same_shape(shape, wanted) for r in records] for wanted in shapes]
        with torch_fixes():  # AOTInductor's C++ wrapper probes the CPU's vector ISAs (2.5-2.12: patches/fixes.py)
            payload, built = aot_package.build(label, compiled, factory, shapes, portable, tuned, aot_options)
        section["aot"] = {"bytes": len(payload), **built, "cpu_flags": aot_package.cpu_isa_flags()}
        section["triton_kernels"], _ = triton_kernels.pack(triton_kernels.Carried())  # the package holds its kernels
        header = compile_cache.payload_header(knobs, payload, {})
    else:
        section["triton_kernels"], tail = triton_kernels.pack(triton_kernels.collect())
        payload, header = compile_cache.saved_artifacts(label, knobs, tail)
    return compile_cache.write_file(path, {**header, "serving": section}, payload)


def load_serving_bundle(
    path: str | os.PathLike[str],
    model: Callable[..., Any] | None = None,
    *,
    factory: Callable[[Any], Any],
    knobs: Any = None,
    on_cold: str = "raise",
    on: str = "raise",
    allow_unsafe: bool = False,
) -> ServingBundle:
    """Serve ``model`` from a bundle in a fresh process: check, load, compile from the caches, capture, guard.

    Nothing is loaded until the file passed every check: the safe-file rules of
    :func:`~inductor_knobs.serving.compile_cache.load_compile_cache` (opened once without following a
    link; the file and every directory above it yours or root's and not writable by others), the
    header's and the payload's sha256, and the identity: the setup snapshot of the build against this process's
    (:mod:`inductor_knobs.core.setup`: torch, triton and CUDA versions, GPU name, full compute capability and SMs,
    the torch variables, and the knobs in force, those of ``INDUCTOR_KNOBS_*`` variables included, read from the
    environment whether or not a compile has activated them yet), each difference named, and every name of
    the Triton kernels carried (plain names, nothing outside the cache directory).  Then it writes the
    Triton kernels into this process's Triton cache where their key directories do not exist yet
    (:func:`~inductor_knobs.serving.triton_kernels.restore`; never overwriting), loads torch's
    artifacts, compiles ``model`` as the build did (``ik.compile`` with its knobs, mode, options and
    ``torch.compile`` arguments) and calls it once per warmed shape under
    ``torch.no_grad()`` and ``compile_threads=1`` (so every Triton compile happens in this process,
    where Triton's listener hears it; a bundle that covers the model compiles nothing, and no worker
    pool starts), captures one CUDA graph per recorded shape, and seeds a guard.

    An AOT bundle (``save_serving_bundle(..., aot=True)``) carries the model compiled and its weights:
    ``model`` is then None, and instead of restoring caches and compiling, the load hands the package to
    torch's C++ loader (:func:`~inductor_knobs.serving.aot_package.load`); no Dynamo trace, Inductor
    compile, Triton compile or autotune happens, and neither Inductor nor Dynamo is imported.  Its ``served``
    checks every call against the package's input contract and raises
    :class:`~inductor_knobs.serving.errors.BundleInputRefused` (a ``ValueError``) for an input the package was not
    compiled for, naming it, with nothing run (:class:`~inductor_knobs.serving.aot_package.ShapeCheckedPackage`).  The identity
    checks are the same, with the knobs the bundle recorded (they acted at its build; the torch version,
    compared too, fixes its mode's keys).

    Args:
        path (str | os.PathLike[str]): the bundle (:func:`save_serving_bundle`).
        model (Callable | None): your model with its weights (an ``nn.Module`` or function), not yet
            compiled; None for an AOT bundle (it serves the weights it was built with).
        factory (Callable[[Any], Any]): the build's factory: shape -> a call's inputs (a tuple/list of
            positional arguments, a mapping of keywords, or one argument), as for ``ik.serving.warmup``.
        knobs (Knobs | None): the knobs you serve under (what ``ik.compile`` was given, without the mode's keys);
            must equal the bundle's, else refused naming each knob (None: the bundle's).
        on_cold (str): ``"raise"`` (default): :class:`~inductor_knobs.serving.errors.ColdStartCompiled` when the
            load compiled an Inductor graph, autotuned or Triton-compiled anything (the proof names each);
            ``"warn"``: a :class:`~inductor_knobs.serving.errors.ColdStartWarning`, and the bundle is returned.
        on (str): the guard's reaction to a stall during traffic (``ik.serving.no_stalls(on=...)``: raise, warn, record).
        allow_unsafe (bool): skip the ownership, permission and symbolic-link checks (a file you trust).

    Returns:
        ServingBundle: ``served``, ``guard``, ``proof``, ``buckets``, ``compiled``, ``report``, ``header``.

    Raises:
        NotSupportedOnThisTorch: torch < 2.7.
        InvalidKnobValue: ``model`` or ``factory`` not callable, an unknown ``on_cold``/``on``, or ``knobs``
            not a ``Knobs``; a model given for an AOT bundle, or none for another (after the file's checks).
        CompileCacheRefused: missing, unsafe (a symbolic link, another owner, writable by others),
            not a bundle, truncated or edited (the header's or the payload's sha256), a Triton kernel
            entry with a name that is not a plain name (nothing written), or built for
            another torch, triton, GPU or knobs, or under other ``INDUCTOR_KNOBS_*`` variables (each difference
            named, a variable with the build's value and this process's), or an AOT bundle built on a CPU
            with an instruction-set extension this one lacks (:func:`~inductor_knobs.serving.aot_package.check_cpu`),
            with nothing loaded; or torch could not load the artifacts
            (:func:`~inductor_knobs.serving.compile_cache.load_payload`).
        ColdStartCompiled: ``on_cold="raise"`` and the load compiled something cold (after the load:
            the model is compiled; ``err.bundle`` holds it).
        OSError: this process's Triton cache directory cannot be created or written.
        Anything ``factory``, ``model`` or ``ik.serving.capture_cuda_graphs`` raises.

    Relies on ``torch.compiler.load_cache_artifacts`` (2.7+) or ``torch._inductor.aoti_load_package``
    (2.7+: ``has_aot_packages`` in ``patches/torch_2_7.py``), torch's cache counters and, for Triton
    compiles, ``triton.knobs.compilation.listener`` (Triton 3.4+; older: ``proof.triton`` is None).
    """
    from .. import compile as ik_compile
    from .stalls import REACTIONS, no_stalls

    if not (model is None or callable(model)) or not callable(factory):
        raise _invalid("model/factory", (model, factory), "callables (your model, None for an AOT bundle; shape -> its inputs)")
    if on_cold not in ON_COLD:
        raise _invalid("on_cold", on_cold, " or ".join(repr(o) for o in ON_COLD))
    if on not in REACTIONS:
        raise _invalid("on", on, ", ".join(repr(r) for r in REACTIONS))
    if knobs is not None and not isinstance(knobs, Knobs):
        raise _invalid("knobs", knobs, "an ik.Knobs (the knobs ik.compile is given) or None (the bundle's)")
    where = os.fspath(path)
    label = f"load_serving_bundle({where!r})"
    header, payload = compile_cache.read_file(where, allow_unsafe, label)
    spec = bundle_format.decode(label, header)
    if spec.aot is not None:
        aot_package.require(label)
        if model is not None:
            raise _invalid("model", model, "None: this AOT bundle serves the model and weights it was built with")
    else:
        compile_cache._require_artifacts_api("load_serving_bundle")
        if model is None:
            raise _invalid("model", None, "your model: this bundle holds torch's caches, not the model (aot=True bundles do)")
    compile_cache.check_payload(label, header, payload)
    payload, kernels = triton_kernels.unpack(label, spec.triton_kernels, payload)
    if spec.aot is not None:
        if spec.aot["bytes"] != len(payload):
            raise CompileCacheRefused(
                f"{label} refused: the AOT package is {len(payload)} bytes, the header says {spec.aot['bytes']}"
            )
        aot_package.check_cpu(label, spec.aot.get("cpu_flags"))
    if knobs is not None and knobs != spec.knobs:
        raise CompileCacheRefused(
            f"{label} refused: built under other knobs ({_knob_differences(spec.knobs, knobs)}). "
            "Rebuild the bundle under the knobs you serve with"
        )
    # ik.compile only wraps the model and validates the knobs against this torch: nothing compiles yet.  A
    # bundle of another torch may hold knobs or a mode this one lacks: that is one more difference to name.
    # An AOT bundle's knobs acted at its build, and nothing compiles here: the knobs it recorded are checked
    # as recorded (with the torch version, which fixes the mode's keys), without importing Inductor for
    # its mode table.
    try:
        if model is None:
            built = Knobs(**header["knobs"]) if isinstance(header.get("knobs"), dict) else Knobs()
            compiled = None
        else:
            compiled = ik_compile(model, spec.knobs, mode=spec.mode, options=spec.options, **spec.torch_compile)
            built = compile_cache._knobs_of(compiled)
        problem = None
    except KnobsError as err:
        built, problem = spec.knobs, err
    here = {**compile_cache.identity(built)}
    if problem is not None:
        here["knobs_digest"] = f"none: the bundle's ik.compile call does not build here ({problem})"
    compile_cache.refuse_differences(label, header, here)
    if problem is not None:  # the same digest, yet it does not build (only a hand-made header gets here)
        raise CompileCacheRefused(f"{label} refused: the bundle's ik.compile call does not build here: {problem}") from problem
    bundle = _load(label, header, payload, spec, compiled, factory, kernels)
    bundle.guard = no_stalls(bundle.served, on=on, warmup=spec.report)
    cold = bundle.proof.cold()
    if cold:
        message = (
            f"{label}: the load compiled cold: {'; '.join(cold)}. The bundle does not cover this model or these inputs "
            "(another model or config, another grad mode, inputs of other dtypes or shapes): rebuild it with the "
            "model and factory you serve, or pass on_cold='warn'"
        )
        if on_cold == "raise":
            raise ColdStartCompiled(message, bundle.proof, bundle)
        warnings.warn(message, ColdStartWarning, stacklevel=2)
    return bundle


def _load(
    label: str,
    header: dict[str, Any],
    payload: bytes,
    spec: bundle_format.BundleSpec,
    compiled: Any,
    factory: Any,
    kernels: tuple[triton_kernels.Kernel, ...] = (),
) -> ServingBundle:
    """Restore the Triton kernels, load torch's artifacts (``payload``), compile at every warmed shape and capture,
    all inside one :class:`ColdStartRecorder`; for an AOT bundle, load its package instead of the first two
    (``compiled`` is None then, and becomes the package's callable)."""
    import torch

    from .. import KnobsContext
    from .graphs import capture_cuda_graphs
    from .signature import as_call

    seconds: dict[str, float] = {}
    served = compiled
    # An AOT bundle's load compiles nothing: it needs neither torch's fixes nor a config key, so it imports
    # neither Inductor nor Dynamo (the recorder's hooks wait for their import: seconds of a cold start).
    aot = spec.aot is not None
    fixes = contextlib.nullcontext() if aot else torch_fixes()  # cached tuned configs kept (2.8-2.11: patches/fixes.py)
    one_thread = Knobs(config={"compile_threads": 1})
    threads = contextlib.nullcontext() if aot else KnobsContext(one_thread, source="ik.serving.load_serving_bundle")
    with ColdStartRecorder() as recorder, fixes:
        started = _clock()
        if spec.aot is not None:
            aot_package.import_outputs(spec.aot.get("output_modules"))  # the classes its output spec names
            compiled = served = aot_package.load(label, payload, spec.aot["inputs"])
            restored = 0
            seconds["load_package"] = _clock() - started
        else:
            # Before torch's artifacts: an FX graph cache hit's TritonBundler then finds these keys present and
            # leaves them, and recheck_autotune_cache's triton.compile of a tuned config is a Triton cache hit.
            restored = triton_kernels.restore(kernels)
            seconds["restore_triton"] = _clock() - started
            started = _clock()
            compile_cache.load_payload(label, header, payload)
            seconds["load_artifacts"] = _clock() - started
        # compile_threads=1: Inductor then runs every Triton compile (or Triton cache hit) in this
        # process, where Triton's listener reports it; compile_threads is not in Inductor's cache key
        # (_cache_config_ignore_prefix in torch/_inductor/config.py, 2.7-2.15).
        with torch.no_grad(), threads:
            for index, shape in enumerate(spec.shapes):
                args, kwargs = as_call(factory(shape))
                started = _clock()
                compiled(*args, **kwargs)
                if torch.cuda.is_initialized():  # the phase ends when its kernels did (cuDNN plans, first cuBLAS calls)
                    torch.cuda.synchronize()
                phase = "compile" if index == 0 and spec.aot is None else "warmup"
                seconds[phase] = seconds.get(phase, 0.0) + _clock() - started
                del args, kwargs
            if spec.graphs is not None:
                started = _clock()
                served = capture_cuda_graphs(
                    compiled,
                    shapes=spec.graphs["shapes"],
                    factory=factory,
                    warmup_calls=spec.graphs["warmup_calls"],
                    outputs=spec.graphs["outputs"],
                )
                seconds["capture"] = _clock() - started
    proof = recorder.proof(seconds, triton_kernels_restored=restored)
    return ServingBundle(served, compiled, None, proof, spec.buckets, spec.report, header)


def _same_shape(a: Any, b: Any) -> bool:
    """Whether two warm-up shapes (factory items: ints, tuples, lists ...) are one; False where ``==`` fails."""
    try:
        return a == b if isinstance(a, (int, str, tuple, list)) else bool(a == b)
    except Exception:  # noqa: BLE001 - an array's ambiguous truth value, a comparison that raises: not the same
        return False


def _knob_differences(built: Any, here: Any, name: Callable[[str], str] = str) -> str:
    """``"min_sms: bundle 40, here 68; max_autotune: bundle True, here (unset)"`` for two :class:`Knobs` or
    their ``to_dict()``; ``name`` spells each knob (``INDUCTOR_KNOBS_MIN_SMS`` for variables)."""
    a = built if isinstance(built, dict) else built.to_dict()
    b = here if isinstance(here, dict) else here.to_dict()
    keys = sorted(k for k in {*a, *b} if a.get(k, _UNSET) != b.get(k, _UNSET))
    return "; ".join(f"{name(k)}: bundle {a.get(k, '(unset)')!r}, here {b.get(k, '(unset)')!r}" for k in keys)


_UNSET = object()


def _invalid(name: str, value: object, allowed: str, label: str = "load_serving_bundle") -> InvalidKnobValue:
    return InvalidKnobValue(f"{label}({name}={value!r}) is invalid on torch {torch_version()}: allowed {allowed}")
