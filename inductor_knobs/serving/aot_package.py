"""An AOTInductor package as a serving bundle's payload: the model compiled ahead of time, loaded without Dynamo.

A bundle of torch's cache artifacts still makes the serving process import the model's library, build
the model, let Dynamo trace it and load every compiled graph from the caches: on an H100 that was 23 s
of a 118 s cold start for a 2-layer Llama, most of it fixed costs of ``torch.compile``.  An AOT bundle
(``ik.serving.save_serving_bundle(..., aot=True)``) holds instead the ``.pt2`` package AOTInductor makes of the
exported model (``torch.export.export`` then ``torch._inductor.aoti_compile_and_package``, torch 2.7+):
the wrapper and kernels compiled to one shared library, the weights beside it.  A serving process loads
it with torch's C++ loader (:func:`load_file`): no model code, no Dynamo, no Inductor compile, no Triton
compile and no autotune happen there, by construction, and neither Inductor nor Dynamo is even imported.
It still needs the classes of the model's outputs: the package's output spec names them
(``transformers.modeling_outputs.CausalLMOutputWithPast`` ...), and torch's pytree reads it back only once
the module that registers them is imported.

What the build fixes for good: the weights (the bundle carries them as built), and the range of each
dimension that varies across the warmed shapes (one ``torch.export.Dim`` per distinct set of sizes, from
the smallest to the largest size warmed; dimensions that never varied are fixed).  The Inductor config
is the ``ik.compile`` call's: its mode's and options' keys as ``inductor_configs``, its knobs entered
around the compile as for every other compile (``KnobsContext``), so the SM gate and the GEMM backends
apply to the autotuning AOTInductor runs at build time.
"""

from __future__ import annotations

import concurrent.futures
import contextlib
import contextvars
import inspect
import operator
import os
import re
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any, NamedTuple

from ..errors import InvalidKnobValue, NotSupportedOnThisTorch, torch_version
from ..ext import SAFE_EXIT, SharedPatch, config_values, present, torch_compat, wrap_attribute
from .errors import BundleInputRefused, CompileCacheRefused
from .signature import as_call
from .torch_fixes import torch_fixes

LOAD_CHECK_S = 300  # a fresh process importing torch and loading a package: seconds, minutes on a loaded host
#: The load check's child: ``python -c LOAD_CHECK_CODE path``.
LOAD_CHECK_CODE = "import sys\nfrom inductor_knobs.serving import aot_package\naot_package.load_file(sys.argv[1])"


def require(what: str) -> None:
    """Raise unless this torch has AOTInductor packages (``aoti_compile_and_package``/``aoti_load_package``).

    Raises:
        NotSupportedOnThisTorch: torch < 2.7 (``has_aot_packages`` in ``patches/torch_2_7.py``).
    """
    if not torch_compat.installed().has_aot_packages:
        raise NotSupportedOnThisTorch(
            f"{what} needs torch._inductor.aoti_compile_and_package/aoti_load_package (torch 2.7+); torch "
            f"{torch_version()} lacks them. Save a bundle of torch's cache artifacts instead (aot=False, torch 2.7+)"
        )


#: AOTInductor's switch for kernels that load on other GPU architectures (a fatbin of PTX and SASS per CUDA kernel,
#: packaged as a file beside the library or embedded with ``embed_kernel_binary``: ``codecache.py`` 2.13 :2387, :3182;
#: ``cpp_wrapper_gpu.py`` :265); None (off) by default (``config.py`` 2.13 :2339).
MULTI_ARCH = "aot_inductor.emit_multi_arch_kernel"


#: AOTInductor's precompiled header for its C++ wrapper (``config.py`` 2.13 :2329, on by default outside fbcode), made
#: once per host (``default_cache_dir()/precompiled_headers``) the first time a wrapper compiles.  Measured on an H200
#: host (torch 2.11.0, the Llama's first AOT build after the warm-up): making the header took 4.3-5.0 s and the wrapper
#: compile after it 4.5 s, the wrapper compile without it 5.5 s; with the header made the wrapper compiled in 4.9 s,
#: without it in 6.1 s.
PRECOMPILED_HEADERS = "aot_inductor.precompile_headers"


def build(
    label: str,
    compiled: Any,
    factory: Callable[[Any], Any],
    shapes: Sequence[Any],
    portable: bool = False,
    tuned: Sequence[Sequence[Any]] = (),
    options: Mapping[str, Any] | None = None,
) -> tuple[bytes, dict[str, Any]]:
    """Export the model inside ``compiled`` over ``shapes`` and compile it with AOTInductor.

    The warm-up's GEMM choices are reused, not tuned again: the export's example inputs are the last warmed
    shape that autotuned (so the program's size hints are the ones the warm-up benchmarked at), and, where
    this torch has the GEMM lookup table (``lookup_table.table``, 2.10+) and the knobs do not set one, the
    fastest choice per recorded op (``table_from_records(top=1)``) is pinned with the ``lookup_table`` knob
    around the compile.  An op the table does not hold (another key, a CPU GEMM) is autotuned as usual.

    After the export and before the compile, the exported program must serve what was warmed: every
    warmed call runs through ``program.module()`` (whose pre-hook checks the inputs against the
    program's range constraints and fixed sizes), and every size that varies must have stayed one plain
    symbol whose range covers the warmed sizes.  ``Dim.AUTO`` lets export narrow a range or fix a size
    where the model branches on it; such a package would serve the other sizes wrongly, so it is refused.

    The package is built with Inductor's C++ compiler first (``cpp.cxx`` left as Inductor has it) and, where a
    fresh process cannot load what it built (:func:`load_failure`: it died, or raised), again with each of
    :func:`cpp_compilers`' others, set as Inductor's ``cpp.cxx`` in the compile's ``inductor_configs`` (torch's
    ``config.patch`` around it).  Inductor's compiler goes last instead when it links libstdc++ statically into shared
    libraries (:func:`links_libstdcxx_statically`): its packages crash at load, and each build is a whole compile of
    the model.

    Where the installed torch has :data:`PRECOMPILED_HEADERS` and neither the ``ik.compile`` options, the knobs nor
    ``options`` set it, it is True in ``inductor_configs`` where the thread that probes the CPU's vector ISAs beside the
    build also makes the headers (:func:`headers_beside`: a model on a GPU, on a torch whose build asks for them as
    ``patches/aot_headers.py`` makes them), so that the wrapper's compile finds them made; else False: made on the
    build's own path, the header costs more than it saves in a build made once (the package's code is the same either
    way).  A process-wide True is not told from the default (torch's ``config.patch`` leaves an entry overridden with
    its prior value when it exits, 2.13), so a build that wants the header says so in ``options``; the thread then
    makes it beside the build too.

    With ``portable``, where the installed torch has :data:`MULTI_ARCH` and neither the ``ik.compile`` options nor
    the knobs set it, it is True in ``inductor_configs``: each CUDA kernel is packaged as a fatbin of PTX and SASS
    (made with CUDA's ``fatbinary`` or ``nvcc`` at build time), which loads on other GPU architectures.

    Args:
        label (str): who asks, starting every message.
        compiled (Any): an ``ik.compile`` result of an ``nn.Module`` (its ``_orig_mod`` is exported).
        factory (Callable[[Any], Any]): shape -> a call's inputs, as for ``ik.serving.warmup``.
        shapes (Sequence[Any]): the warmed shapes; the dimensions that vary across them become dynamic.
        portable (bool): turn :data:`MULTI_ARCH` on as above (False: leave it as the user's config has it).
        tuned (Sequence[Sequence[AutotuneRecord]]): per shape, the autotune records its warm-up call made
            (``WarmupStep.autotune``; empty: export at the last shape and pin nothing).
        options (Mapping[str, Any] | None): Inductor config keys for this compile only, over the ``ik.compile`` mode
            and options (``save_serving_bundle(aot_options=...)``); checked as the ``config`` knob checks them, before
            anything is exported.

    Returns:
        tuple[bytes, dict[str, Any]]: the package, and what the bundle records of it: ``"inputs"``, what it
        accepts (:func:`accepted`), which :class:`ShapeCheckedPackage` checks at every call, ``"cxx"``,
        the C++ compiler that built it, ``"multi_arch"``, whether :data:`MULTI_ARCH` was on (False where absent),
        ``"pinned"``, the number of GEMM lookup keys pinned from the warm-up, ``"options"``, ``options`` as checked
        (key -> ``repr`` of the value), ``"output_modules"``, the modules
        that define the outputs' classes (:func:`output_modules`), and ``"seconds"``, the build's steps
        (``export``, ``compile`` and ``load_check`` per compiler tried, summed).

    Raises:
        InvalidKnobValue: ``compiled`` does not hold an ``nn.Module``, ``factory`` is not callable, its
            calls differ in anything but tensor sizes or pass a non-tensor :func:`accepted` cannot record,
            export narrowed or fixed a size the warmed shapes vary in, ``torch.export``/AOTInductor failed on
            the model (torch's message included), or no C++ compiler tried made a package a fresh process
            loads (each one named with how its package failed), or an ``options`` value its key does not allow, or
            a key the compiled model's knobs set (a knob wins over options).
        UnknownKnob: an ``options`` key that is not an Inductor config key of this torch.

    Relies on ``torch.export.export(mod, args, kwargs, dynamic_shapes=..., strict=False)``,
    ``ExportedProgram.module()``/``range_constraints``/``graph_signature.user_inputs``,
    ``torch.export.Dim``, ``torch._inductor.aoti_compile_and_package(ep, package_path=...,
    inductor_configs=...)`` (the same keywords in torch 2.7.0, 2.13.0 and 2.15.0) and Inductor's
    ``cpp.cxx`` config (a tuple of compilers, the first that runs wins: ``cpp_builder.get_cpp_compiler``, 2.13).
    """
    import torch

    from .. import KnobsContext

    module = getattr(compiled, "_orig_mod", None)
    if not isinstance(module, torch.nn.Module):
        raise _invalid(label, "served", compiled, "an ik.compile result of an nn.Module (torch.export needs a module)")
    if not callable(factory):
        raise _invalid(label, "factory", factory, "a callable: shape -> a call's inputs, as for ik.serving.warmup")
    calls = [as_call(factory(shape)) for shape in shapes]
    # The size hints of the warm-up's last autotuning compile, else the last warmed shape (bucket lists grow, so its
    # sizes are least likely to equal a fixed one).
    if tuned and len(tuned) != len(calls):
        raise _invalid(label, "tuned", f"{len(tuned)} entries", f"one list of autotune records per shape ({len(calls)})")
    example = max((i for i, records in enumerate(tuned) if records), default=len(calls) - 1)
    args, kwargs = calls[example]
    dynamic = dynamic_shapes(label, module, calls)
    names = list(inspect.signature(module.forward).bind(*args, **kwargs).arguments)  # dynamic_shapes bound them
    backend = compiled._inductor_knobs_backend
    own = set(config_values(backend.own_knobs))
    configs = {key: value for key, value in backend.config_patches.items() if key not in own}
    extra = _build_options(label, options, own, portable)
    configs.update(extra)
    from torch._inductor import config as inductor_config

    patches = torch_compat.installed()
    knobs, pinned = _pin_warmed_choices(backend.own_knobs, tuned[example] if tuned else [], configs)
    seconds = {"export": 0.0, "compile": 0.0, "load_check": 0.0}
    has_multi_arch = MULTI_ARCH in patches.config_keys(inductor_config)
    ours = portable and has_multi_arch and MULTI_ARCH not in configs and MULTI_ARCH not in own
    if ours:
        configs[MULTI_ARCH] = True
    scratch = tempfile.mkdtemp(prefix="inductor_knobs-aot-")
    checks: list[LoadCheck] = []  # each one closed below; the first imports torch while the model compiles
    try:
        path = os.path.join(scratch, "model.pt2")
        tried: list[tuple[str, LoadFailure]] = []
        with KnobsContext(knobs, source=label):
            LoadCheck(scratch, checks)  # in the knobs: the child sees the environment they set
            # cpp.cxx in the ik.compile options is the user's choice: built with it alone, as torch would; so is a
            # host where no compiler is found (torch's compile then says so).
            compilers: list[str | None] = [] if "cpp.cxx" in configs else list(cpp_compilers())
            passed_over = len(compilers) > 1 and links_libstdcxx_statically(str(compilers[0]))
            if passed_over:  # its packages crash at load
                compilers = [*compilers[1:], compilers[0]]
            # The first compile's config; its cpp.cxx named only where Inductor would not pick that compiler itself.
            named = bool(compilers) and not _is_inductors_compiler(str(compilers[0]))
            first = {**configs, **({"cpp.cxx": (compilers[0],)} if named else {})}
            reads = probe_reads(first, own)
            headers = None if reads is None else headers_beside(module, calls[example], configs, own)
            if PRECOMPILED_HEADERS in patches.config_keys(inductor_config) and PRECOMPILED_HEADERS not in {*configs, *own}:
                configs[PRECOMPILED_HEADERS] = headers is not None  # made beside, or not at all (see the docstring)
            with ProbesBeside(reads, headers):
                started = time.perf_counter()
                try:
                    program = torch.export.export(module, tuple(args), dict(kwargs), dynamic_shapes=dynamic, strict=False)
                except Exception as err:  # torch.export's many error types: the user needs torch's words
                    raise _invalid(label, "aot", True, f"a model torch.export accepts; torch said: {err}") from err
                seconds["export"] = time.perf_counter() - started
                _check_export(label, program, calls, dynamic)
                contract = accepted(label, program, calls, names)
                outputs = output_modules(program.call_spec.out_spec)
                multi_arch = has_multi_arch and bool(configs.get(MULTI_ARCH, patches.read_value(inductor_config, MULTI_ARCH)))
                for cxx in compilers or [None]:
                    # Inductor's own compiler, first, as Inductor spells it: the probe thread's commands and headers,
                    # keyed on the command line, are then the compile's.
                    patch = {} if cxx is None or (cxx == compilers[0] and not named) else {"cpp.cxx": (cxx,)}
                    name = cxx if cxx is not None else str(configs.get("cpp.cxx", "(Inductor's)"))
                    started = time.perf_counter()
                    try:
                        torch._inductor.aoti_compile_and_package(
                            program, package_path=path, inductor_configs={**configs, **patch}
                        )
                    except Exception as err:  # AOTInductor's many error types
                        if not tried:  # Inductor's own compiler: the model's fault, as for any compile
                            said = f"a model AOTInductor compiles; torch said: {err}"
                            if ours:
                                said += f" (portable=True turned {MULTI_ARCH} on, whose fatbins need nvcc or fatbinary: "
                                said += "portable=False builds without it)"
                            raise _invalid(label, "aot", True, said) from err
                        said = " ".join(str(err).split()[-60:])
                        tried.append((name, LoadFailure("did not compile the model", said, crashed=False, retry=True)))
                        continue
                    finally:
                        seconds["compile"] += time.perf_counter() - started
                    started = time.perf_counter()
                    if checks[-1].sent:  # one package per child: the next compiler's gets a new one
                        LoadCheck(scratch, checks)
                    failure = checks[-1].failure(path)
                    seconds["load_check"] += time.perf_counter() - started
                    if failure is None:
                        with open(path, "rb") as src:
                            built = {"inputs": contract, "cxx": name, "multi_arch": multi_arch, "pinned": pinned}
                            built["options"] = {key: repr(value) for key, value in extra.items()}
                            built["output_modules"] = outputs
                            return src.read(), {**built, "seconds": {k: round(v, 3) for k, v in seconds.items()}}
                    tried.append((name, failure))
                    if not failure.retry:
                        break
        raise _invalid(label, "aot", True, _load_message(tried))
    finally:
        try:
            _close_all(checks)
        finally:
            shutil.rmtree(scratch, ignore_errors=True)


#: Inductor's list of the CPU's usable vector ISAs, cached for the process (torch 2.5-2.15 ``cpu_vec_isa.py``).
VALID_ISAS = "torch._inductor.cpu_vec_isa:valid_vec_isa_list"
#: The name of the thread that probes them beside a build.
PROBE_THREAD = "inductor_knobs ISA probes"


def probe_reads(first: Mapping[str, Any], knob_keys: Iterable[str]) -> dict[str, Any] | None:
    """What a thread beside an AOT build applies so that the CPU vector-ISA probes it runs (:class:`ProbesBeside`)
    read what the build's own call would, or None where no thread may probe.

    The probes' C++ compile reads ``cpp.*``, ``cpp_cache_precompile_headers`` and ``aot_inductor.*`` keys
    (``cpp_builder.py``, torch 2.13; not :data:`PRECOMPILED_HEADERS` nor :data:`MULTI_ARCH`, which the wrapper's
    compile and the packaging read); the returned mapping is those of ``first`` (the build's first compile's
    ``inductor_configs``, its ``cpp.cxx`` named where the build's first compiler is not the one Inductor picks
    itself).  None where torch has no list (:data:`VALID_ISAS`, 2.5+), or where the model's knobs set such a key
    (``knob_keys``: knobs act inside Inductor's compile, which the thread is not in).

    Where Inductor's config is process-wide (torch < 2.12) the thread sets no config key: every key but ``cpp.cxx``
    must hold its live value (else None), and ``cpp.cxx`` reaches the thread's probes alone through
    :data:`CPP_COMPILER` (:func:`_compiler_for_probes`), where it names one compiler found on ``PATH`` (else None),
    returned as that name, and where ``get_cpp_compiler`` reads ``cpp.cxx`` at all (not on Windows, under fbcode or
    with ``aot_inductor.cross_target_platform`` set, torch 2.11 ``cpp_builder.py``; else None).

    Returns:
        dict[str, Any] | None: the keys and values for the thread (:func:`_probe_isas`), or None.
    """
    if any(_read_by_probes(key) for key in knob_keys) or not present(VALID_ISAS):
        return None
    reads = {key: value for key, value in first.items() if _read_by_probes(key)}
    patches = torch_compat.installed()
    if patches.config_is_thread_local or not reads:
        return reads
    from torch._inductor import config

    compiler = reads.pop("cpp.cxx", None)
    if any(patches.read_value(config, key) != value for key, value in reads.items()):
        return None
    if compiler is None or compiler == patches.read_value(config, "cpp.cxx"):
        return {}
    one = _one_compiler(compiler)
    if one is None or not present(CPP_COMPILER) or not _compiler_from_cxx(config):
        return None
    return {"cpp.cxx": one}


def headers_beside(
    module: Any, call: tuple[Sequence[Any], dict[str, Any]], configs: Mapping[str, Any], knob_keys: Iterable[str]
) -> tuple[str, int] | None:
    """What a probe thread beside an AOT build makes AOTInductor's precompiled headers for, or None.

    None unless this torch's build asks for its headers as ``patches/aot_headers.py`` makes them
    (``makes_aot_headers_as_torch``: listed for this release, on Linux outside fbcode), where the model's knobs leave
    :data:`PRECOMPILED_HEADERS` alone, and where the build's compile turns the headers on: ``configs`` sets it True, or
    leaves it unset for a model on one GPU type.  A CPU model's build is short, and its wrapper's compile would wait
    for the header; its build leaves the headers off unless asked.  The device type is that of the model's parameters,
    buffers and ``call``'s tensors (``AotCodeCompiler.compile`` is given the graph's one non-CPU device type, else
    ``"cpu"``).  The bytes of constants are counted as torch counts them for its mmap flags
    (``aot_constants_nbytes``), and None where that count is unsure.  A header made for other flags than the build's
    is never used, and the build then makes its own on its path: a model whose lowered graph keeps other constants
    than its parameters and buffers (an unused parameter, a plain tensor attribute, constants folded by freezing) by
    gigabytes.

    Args:
        module (Any): the ``nn.Module`` the build exports.
        call (tuple[Sequence[Any], dict[str, Any]]): the export's example call, ``(args, kwargs)``.
        configs (Mapping[str, Any]): the build's ``inductor_configs`` (key -> value).
        knob_keys (Iterable[str]): the Inductor config keys the model's knobs set inside its compile.

    Returns:
        tuple[str, int] | None: the device type (``"cuda"``, ``"cpu"`` ...) and the bytes of constants, for
        ``make_aot_headers``; or None (no headers beside the build).
    """
    import torch
    from torch._inductor import config
    from torch.utils import _pytree

    patches = torch_compat.installed()
    keys = patches.config_keys(config)
    if PRECOMPILED_HEADERS not in keys or PRECOMPILED_HEADERS in set(knob_keys):
        return None
    if not patches.makes_aot_headers_as_torch(torch_compat.release_of(torch.__version__)):
        return None
    weights = [*module.parameters(), *module.buffers()]
    tensors = [*weights, *(leaf for leaf in _pytree.tree_leaves(call) if isinstance(leaf, torch.Tensor))]
    gpus = {tensor.device.type for tensor in tensors} - {"cpu", "meta"}
    if len(gpus) > 1 or configs.get(PRECOMPILED_HEADERS, bool(gpus)) is not True:
        return None

    def setting(key: str) -> Any:
        return configs[key] if key in configs else patches.read_value(config, key) if key in keys else None

    nbytes = patches.aot_constants_nbytes(weights, setting)  # as torch counts them (patches/aot_headers.py)
    return None if nbytes is None else (gpus.pop() if gpus else "cpu", nbytes)


def _compiler_from_cxx(config: Any) -> bool:
    """Whether Inductor's compiler comes from ``cpp.cxx``: ``get_cpp_compiler`` answers otherwise for a Windows
    cross-compile (``aot_inductor.cross_target_platform``), under fbcode and on Windows (torch 2.11-2.13)."""
    cross = getattr(getattr(config, "aot_inductor", None), "cross_target_platform", None)
    fbcode = getattr(config, "is_fbcode", lambda: False)
    return sys.platform != "win32" and cross != "windows" and not fbcode()


def _one_compiler(value: Any) -> str | None:
    """The compiler a ``cpp.cxx`` value names where it names one found on ``PATH`` (a str or a 1-tuple), else None."""
    if isinstance(value, (tuple, list)) and len(value) == 1:
        value = value[0]
    return value if isinstance(value, str) and shutil.which(value) is not None else None


def _read_by_probes(key: str) -> bool:
    """The C++ keys (``cpp_builder.py``, 2.13), less those only the wrapper's and the package's steps read."""
    return key.startswith(("cpp.", "cpp_cache_precompile_headers", "aot_inductor.")) and key not in _WRAPPER_ONLY


#: Keys the build sets that AOTInductor's wrapper compile and packaging read (``codecache.py``), not the probes'.
_WRAPPER_ONLY = (PRECOMPILED_HEADERS, MULTI_ARCH)


class ProbesBeside:
    """Hold :data:`ISA_LIST_AT_ONCE` for the block (an AOT build's export and compiles) and, unless ``reads`` is None,
    compute Inductor's CPU vector-ISA list on a thread beside it, under ``reads`` (:func:`probe_reads`).

    AOTInductor's C++ wrapper asks for the list (``pick_vec_isa``) only when it compiles, after the model's kernels;
    on an empty Inductor cache the list takes, one ISA after another, a C++ dry compile and a child load per ISA the
    CPU lists (``VecISA.check_build``; each verdict cached per ISA), and torch caches the list for the process
    (``functools.cache``) whichever call comes first.  The thread applies ``reads`` in its own context
    (``config.patch``, per thread on torch 2.12+; on older torch ``reads`` holds at most a ``cpp.cxx``, which
    :data:`CPP_COMPILER` gives the thread's probes alone) and asks for the list, which :data:`ISA_LIST_AT_ONCE`
    computes with every verdict at once; a call from another thread waits for it and reads torch's cache.  The
    thread holds torch's fixes (:mod:`.torch_fixes`); what it raises is dropped, and the build's own call raises what
    torch raises.  With ``headers`` (:func:`headers_beside`), the thread then makes AOTInductor's precompiled headers
    for the build's wrapper (``make_aot_headers``, ``patches/aot_headers.py``) under the same config and compiler,
    unless the block has failed already; callers of the list wait only until the thread has it, and the build's own
    call of torch's ``_precompile_header`` finds the header made, or waits on torch's file lock for it.

    The exit joins the thread and releases the wrappers; every step of it is idempotent, so an exit an interrupt cut
    short finishes when run again (as a second ``with`` unwinding runs it).  After a block that failed, or whose exit
    was interrupted, torch's ISA verdicts are forgotten (:func:`_forget_isa_verdicts`), also by the thread itself
    where it ends after the block: a Ctrl-C reaches the probes' children too, and torch counts a killed probe as an
    ISA the CPU lacks.  Where ``reads`` names a compiler, torch's per-process answers about Inductor's compiler are
    cleared before the thread starts and at the exit (:func:`_forget_compiler_answers`).  Measured: docs/serving.md
    ("The CPU's vector-ISA probes").

    Args:
        reads (Mapping[str, Any] | None): Inductor config keys -> values for the thread, or None (no thread).
        headers (tuple[str, int] | None): the device type and the bytes of the model's constants to make the
            headers for, or None (no headers).

    Raises:
        On enter, a failure to install the wrappers (nothing is left installed then).
    """

    def __init__(self, reads: Mapping[str, Any] | None, headers: tuple[str, int] | None = None) -> None:
        self.reads = None if reads is None else dict(reads)
        self.headers = headers
        self.holder = object()
        self.ended, self.kept = threading.Event(), threading.Event()  # the block ended; it succeeded
        self.prober: threading.Thread | None = None
        self.failed = False  # the block raised, or an interrupt cut its enter or exit short
        self.active = False

    def __enter__(self) -> ProbesBeside:
        self.active = True  # first: an interrupt after it leaves an exit to run
        try:
            ISA_LIST_AT_ONCE.acquire(self.holder)
            if self.reads and "cpp.cxx" in self.reads:
                _forget_compiler_answers()  # what the thread asks of its compiler, it asks anew
            if self.reads is not None:
                run = contextvars.copy_context().run
                args = (_probe_isas, self.reads, self.headers, self.ended, self.kept)
                self.prober = threading.Thread(target=run, args=args, name=PROBE_THREAD, daemon=True)
                with _LISTING, SAFE_EXIT:
                    _PROBERS.add(self.prober)  # the thread also discards itself once it has the list
                self.prober.start()
            return self  # inside: an interrupt at this line still finds the exit
        except BaseException:
            self.__exit__(*sys.exc_info())
            raise

    def __exit__(self, exc_type: Any, exc: Any, tb: Any) -> None:
        """Run the exit to its end, again after an interrupt inside it (each step is idempotent), then re-raise
        the first such interrupt (as the knobs' blocks unwind: ``core/blocks.py``)."""
        interrupted: BaseException | None = None
        for _ in range(8):
            try:
                self.failed = self.failed or exc_type is not None or interrupted is not None
                self._exit()
                break
            except BaseException as err:  # noqa: BLE001 - finished, then re-raised below
                interrupted = interrupted or err
        if interrupted is not None:
            raise interrupted

    def _exit(self) -> None:
        if self.failed:
            self.ended.set()  # the thread forgets the verdicts itself if it ends after this
        prober = self.prober
        if prober is not None:
            if prober.ident is not None:  # started; had it not, it never runs
                with contextlib.suppress(RuntimeError):  # interrupted inside start(), before it said it started
                    prober.join()
            _listed(prober)
        if self.failed:
            _forget_isa_verdicts()
        else:
            self.kept.set()  # after the join: an exit cut short in it forgets them when run again
        if self.reads and "cpp.cxx" in self.reads:
            _forget_compiler_answers()  # the thread's compiler answered torch's per-process questions
        self.ended.set()
        ISA_LIST_AT_ONCE.release(self.holder)
        self.active = False


#: The probe threads still computing the list (:class:`ProbesBeside`), which a call of :data:`VALID_ISAS` from elsewhere
#: waits for (:func:`_still_listing`); guarded by :data:`_LISTING`, a C lock (``with _LISTING, SAFE_EXIT:``).
_PROBERS: set[threading.Thread] = set()
_LISTING = threading.Lock()
#: One computation of the ISA verdicts at a time (:func:`_at_once`, :func:`_forget_isa_verdicts`): torch's
#: ``VecAVX512.__bool__`` changes the instance's flags for its bf16 check, so two callers must not probe one ISA at once.
_VERDICTS = threading.RLock()


def _listed(prober: threading.Thread) -> None:
    """``prober`` no longer computes the list: off :data:`_PROBERS`."""
    with _LISTING, SAFE_EXIT:
        _PROBERS.discard(prober)


def _still_listing() -> list[threading.Thread]:
    """The probe threads that are alive and still computing the list (a thread that died unlisted is not)."""
    with _LISTING, SAFE_EXIT:
        return [prober for prober in _PROBERS if prober.is_alive()]


def _at_once(wrapped: Callable[[], Any], instance: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
    """:data:`VALID_ISAS` with every ISA's verdict computed at once (:func:`_verdicts_at_once`) before torch's list
    reads them, one caller at a time; a caller that is not a probe thread first waits for the probe threads."""
    if not threading.current_thread().name.startswith(PROBE_THREAD):  # a probe thread (or its pool) goes on
        while waiting := _still_listing():  # no lock held while waiting: a Ctrl-C leaves nothing held
            waiting[0].join(0.1)  # at once where it ends; else a look again whether it has the list
    with _VERDICTS, SAFE_EXIT:
        cache_info = getattr(wrapped, "cache_info", None)
        if cache_info is None or cache_info().currsize == 0:  # not computed yet
            _verdicts_at_once()
        return wrapped(*args, **kwargs)


def _verdicts_at_once() -> None:
    """Each ISA of :func:`_listed_isas`'s verdict (``bool(isa)``, cached by torch) on a pool thread in a copy of the
    caller's context (torch gives each ISA's dry compile its own file lock).  Interrupted, it waits for the pool (the
    probes' children got the Ctrl-C too) and forgets the verdicts: torch counts a killed probe as an ISA the CPU lacks.
    A verdict that raises is torch's list's to raise."""
    from torch._inductor import cpu_vec_isa

    isas = _listed_isas(cpu_vec_isa)
    if len(isas) < 2:
        return
    pool = concurrent.futures.ThreadPoolExecutor(min(len(isas), os.cpu_count() or 1), PROBE_THREAD)
    try:
        for isa in isas:
            pool.submit(contextvars.copy_context().run, bool, isa)
        pool.shutdown(wait=True)
    except BaseException:
        for _ in range(8):
            with contextlib.suppress(KeyboardInterrupt):
                pool.shutdown(wait=True)
                break
        _forget_isa_verdicts()
        raise


#: Inductor's ISA list while an AOT build runs: every verdict at once, after the probe threads; and Inductor's compiler
#: as a probe thread's context names it (:func:`_compiler_for_probes`). Module globals bound by name are rebound too.
ISA_LIST_AT_ONCE = SharedPatch(
    "Inductor's CPU vector-ISA list, every ISA at once, after the AOT build's probes (serving/aot_package.py)",
    lambda: (
        *((wrap_attribute(VALID_ISAS, _at_once, sweep=True),) if present(VALID_ISAS) else ()),
        *((wrap_attribute(CPP_COMPILER, _compiler_for_probes, sweep=True),) if present(CPP_COMPILER) else ()),
    ),
)


def _listed_isas(cpu_vec_isa: Any) -> list[Any]:
    """The ISAs ``valid_vec_isa_list`` checks on this CPU: on x86, each of ``supported_vec_isa_list`` whose flags
    ``x86_isa_checker`` lists (torch 2.5-2.15 ``cpu_vec_isa.py``); [] elsewhere (one ISA, from torch's capabilities)."""
    import platform

    listed = getattr(cpu_vec_isa, "supported_vec_isa_list", None)
    checker = getattr(cpu_vec_isa, "x86_isa_checker", None)
    if sys.platform not in ("linux", "win32") or platform.machine() not in ("x86_64", "AMD64"):
        return []
    if listed is None or checker is None:
        return []
    flags = checker()
    return [isa for isa in listed if all(flag in flags for flag in str(isa).split())]


def _probe_isas(reads: dict[str, Any], headers: tuple[str, int] | None, ended: threading.Event, kept: threading.Event) -> None:
    try:
        from torch._inductor import config, cpu_vec_isa

        reads = dict(reads)
        patches = torch_compat.installed()
        if not patches.config_is_thread_local:  # process-wide config: only the compiler, see probe_reads
            _PROBE_CXX.set(reads.pop("cpp.cxx", None))  # this thread's context, and its pool's copies
        with torch_fixes(), config.patch(reads):  # this thread's own context (reads is empty before 2.12)
            cpu_vec_isa.valid_vec_isa_list()
            _listed(threading.current_thread())  # the list is cached: its callers go on while the headers are made
            if headers is not None and not ended.is_set():  # not for a block that has failed already
                patches.make_aot_headers(*headers)
    except Exception:  # noqa: BLE001 - see ProbesBeside
        pass
    finally:
        _listed(threading.current_thread())
        if ended.is_set() and not kept.is_set():  # the block failed and may have stopped waiting for this thread
            _forget_isa_verdicts()


def _forget_compiler_answers() -> None:
    """Clear torch's per-process answers about Inductor's compiler (``cpp_builder.is_gcc`` ... ``is_msvc_cl``, each a
    ``functools.cache`` without arguments, torch 2.11-2.13): a probe thread given the build's compiler may have asked
    first, and Inductor's later compiles ask of the compiler ``cpp.cxx`` names then."""
    from torch._inductor import cpp_builder

    for name in ("is_gcc", "is_clang", "is_intel_compiler", "is_apple_clang", "is_msvc_cl"):
        getattr(getattr(cpp_builder, name, None), "cache_clear", lambda: None)()


#: Inductor's choice of C++ compiler (torch 2.5-2.15 ``cpp_builder.py``), which every C++ compile of Inductor's asks for.
CPP_COMPILER = "torch._inductor.cpp_builder:get_cpp_compiler"
#: The compiler of a probe thread's context where Inductor's config is process-wide (:func:`probe_reads`), else None.
_PROBE_CXX: contextvars.ContextVar[str | None] = contextvars.ContextVar("inductor_knobs_probe_cxx", default=None)


def _compiler_for_probes(wrapped: Callable[[], Any], instance: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
    """:data:`CPP_COMPILER`: in a probe thread's context the build's compiler (:data:`_PROBE_CXX`), else torch's."""
    cxx = _PROBE_CXX.get()
    return cxx if cxx is not None else wrapped(*args, **kwargs)


def _forget_isa_verdicts() -> None:
    """Clear torch's caches of ISA verdicts: ``valid_vec_isa_list`` and each ``VecISA`` class's cached
    ``__bool__`` (``functools.cache`` on the methods, torch 2.5-2.15 ``cpu_vec_isa.py``)."""
    from torch._inductor import cpu_vec_isa

    with _VERDICTS, SAFE_EXIT:  # not while a caller of the list computes them
        classes = [cpu_vec_isa.VecISA]
        while classes:
            cls = classes.pop()
            classes.extend(cls.__subclasses__())
            for member in list(vars(cls).values()):
                getattr(member, "cache_clear", lambda: None)()
        getattr(cpu_vec_isa.valid_vec_isa_list, "cache_clear", lambda: None)()


#: Inductor keys the build itself owns: ``aoti_compile_and_package`` forces ``aot_inductor.package`` and refuses an
#: ``aot_inductor.output_path`` (torch 2.13 ``_inductor/__init__.py``), and a C++-only package has no library to load
#: (a standalone build forces one: ``utils.py:maybe_aoti_standalone_config``, 2.10-2.15).
BUILD_OWNS = (
    "aot_inductor.package",
    "aot_inductor.output_path",
    "aot_inductor.package_cpp_only",
    "aot_inductor_mode.compile_standalone",
)


def _build_options(label: str, options: Mapping[str, Any] | None, own: set[str], portable: bool) -> dict[str, Any]:
    """``options`` checked as the ``config`` knob checks a mapping (keys spelled as torch does, values by their
    knob's check, every key known to this torch), none of ``own`` (the keys the compiled model's knobs set) or
    :data:`BUILD_OWNS`, no callable (the header records each value's ``repr``), and not :data:`MULTI_ARCH` beside
    ``portable=True`` (two answers to one question)."""
    if not options:
        return {}
    from .. import Knobs
    from ..errors import UnknownKnob
    from ..ext import plan

    try:
        checked = Knobs(config=dict(options))  # InvalidKnobValue: a value its key does not allow
        plan(checked)  # UnknownKnob: a key this torch does not have; InvalidKnobValue: a value of the wrong type
    except (InvalidKnobValue, UnknownKnob) as err:
        raise type(err)(f"{label}: aot_options: {err}") from err
    extra = config_values(checked)
    refused = {
        "keys the compiled model's knobs do not set (a knob wins)": sorted(set(extra) & own),
        f"none of the keys the build owns ({', '.join(BUILD_OWNS)})": sorted(set(extra) & set(BUILD_OWNS)),
        "values that are not callables (custom passes cannot be recorded in the header)": sorted(
            k for k, v in extra.items() if callable(v)
        ),
        f"no {MULTI_ARCH} beside portable=True (give one of the two)": [MULTI_ARCH] if portable and MULTI_ARCH in extra else [],
    }
    for allowed, keys in refused.items():
        if keys:
            raise _invalid(label, "aot_options", dict(options), f"{allowed}; got {', '.join(keys)}")
    return extra


#: A module name an AOT bundle may ask its loader to import: dotted Python identifiers.
MODULE_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z_][A-Za-z0-9_]*)*")


def output_modules(spec: Any) -> list[str]:
    """The modules that define the classes in an output spec (a pytree ``TreeSpec``), builtins left out: torch's
    pytree rebuilds such a class only once its module, which registers it, is imported (``transformers.modeling_outputs``
    for ``CausalLMOutputWithPast``).  A namedtuple node's class is its context (its type is ``collections.namedtuple``).
    Children come from ``TreeSpec.children()`` where present (2.13 deprecates ``children_specs``), else ``children_specs``."""
    import warnings

    found: set[str] = set()
    pending = [spec]
    while pending:
        node = pending.pop()
        for owner in (getattr(node, "type", None), getattr(node, "context", None)):
            module = getattr(owner, "__module__", None) if isinstance(owner, type) else None
            if isinstance(module, str) and module not in ("builtins", "collections") and MODULE_NAME.fullmatch(module):
                found.add(module)
        children = getattr(node, "children", None)
        if callable(children):
            pending.extend(children())
        else:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore", FutureWarning)
                pending.extend(getattr(node, "children_specs", ()))
    return sorted(found)


def import_outputs(modules: Any) -> None:
    """Import ``modules`` (a header's ``output_modules``), so that the classes the package's outputs name are registered
    with torch's pytree when :class:`ShapeCheckedPackage` reads its output spec: a serving process need not import the
    model's library itself.  Anything but a list of module names imports nothing; an import that fails is left to the
    loader, whose refusal names the class and the import to add."""
    import importlib

    if not isinstance(modules, list) or not all(isinstance(m, str) and MODULE_NAME.fullmatch(m) for m in modules):
        return
    for module in modules:
        try:
            importlib.import_module(module)
        except Exception:  # noqa: BLE001 - the loader names the missing class and the import to add
            pass


def _pin_warmed_choices(knobs: Any, records: Sequence[Any], configs: dict[str, Any]) -> tuple[Any, int]:
    """``knobs`` with ``lookup_table`` set to the fastest choice per op of ``records`` (the warm-up's, at the export's
    example shape: torch keys the table by the size hints), and the number of keys pinned.  ``knobs`` unchanged (0)
    where this torch has no lookup table, a table is set already (knobs, options or the config), the choices handler
    is not torch's own (``inductor_choices_class`` or ``V.set_choices_handler``: the knob needs
    ``LookupTableChoices``), or no CUDA op was tuned."""
    from torch._inductor import config as inductor_config

    from .. import Knobs
    from ..ext import table_from_records

    patches = torch_compat.installed()
    # CUDA ops only (a choice with a GPU key): torch reads the table for nothing else, and warns where it is set for CPU.
    records = [record for record in records if any(c.lookup_device_key for c in record.choices)]
    if not records or "lookup_table.table" not in patches.config_keys(inductor_config):
        return knobs, 0
    if {"lookup_table.table", "inductor_choices_class"} & {*configs, *config_values(knobs)}:
        return knobs, 0
    if patches.read_value(inductor_config, "lookup_table.table") or not patches.lookup_handler_fits():
        return knobs, 0
    table = table_from_records(records, top=1, device=True)
    if not table:
        return knobs, 0
    return knobs.merged(Knobs(lookup_table=table)), len(table)


#: The C++ compilers an AOT build tries, in order, after Inductor's own (:func:`cpp_compilers`): the system's g++
#: and c++ (dynamic libstdc++ on the Linux distributions seen), then clang++ on ``PATH``.
FALLBACK_CXX = ("/usr/bin/g++", "/usr/bin/c++", "clang++")


def cpp_compilers() -> list[str]:
    """The C++ compilers an AOT build tries: Inductor's own choice first (``cpp_builder.get_cpp_compiler``:
    ``cpp.cxx``, whose default is ``$CXX`` else ``g++``, torch 2.13 ``_inductor/config.py`` ``class cpp``), then
    each of :data:`FALLBACK_CXX` found (``shutil.which``), one per executable (``os.path.realpath``).

    Returns:
        list[str]: the path of each compiler (``shutil.which``'s; ``g++`` -> ``/usr/bin/g++``); empty when there is none.
    """
    own = _inductors_compiler()
    found: dict[str, str] = {}
    for cxx in (*([own] if own else []), *FALLBACK_CXX):
        where = shutil.which(cxx)
        if where is not None:
            found.setdefault(os.path.realpath(where), where)
    return list(found.values())


def _inductors_compiler() -> str | None:
    """The C++ compiler Inductor picks itself (``cpp_builder.get_cpp_compiler``, from ``cpp.cxx``), as named there,
    or None where it finds none (torch's ``InvalidCxxCompiler``) or this torch lacks the function."""
    from torch._inductor import cpp_builder

    try:
        return str(cpp_builder.get_cpp_compiler())
    except Exception:  # noqa: BLE001 - torch's no-compiler error or no such function
        return None


def _is_inductors_compiler(cxx: str) -> bool:
    """Whether ``cxx`` is the executable Inductor's own choice (:func:`_inductors_compiler`) resolves to."""
    own = _inductors_compiler()
    where = shutil.which(own) if own else None
    return where is not None and os.path.realpath(cxx) == os.path.realpath(where)


#: A probe library: one function that returns a ``std::string`` (libstdc++'s code, linked as the compiler links it).
_PROBE_SOURCE = "#include <string>\nstd::string inductor_knobs_probe() { return std::string(64, 'x'); }\n"


def links_libstdcxx_statically(cxx: str) -> bool | None:
    """Whether the C++ compiler ``cxx`` links its C++ runtime statically into a shared library.

    Such a compiler's AOTInductor packages crash when a process that holds torch's own libstdc++ loads them (the
    two copies share GNU-unique symbols; ``/opt/gcc/bin/g++`` on our GPU host, see ``docs/serving.md``), so an AOT
    build tries it after the others instead of compiling the model with it first.  The probe compiles
    :data:`_PROBE_SOURCE` with ``cxx -shared -fPIC`` in a private temporary directory and reads the library's
    ``NEEDED`` entries with ``readelf -d`` (binutils): statically linked when neither ``libstdc++.so`` nor
    ``libc++.so`` is among them.  A fraction of a second.

    Returns:
        bool | None: True (static) or False (dynamic); None when the probe cannot tell (no ``readelf``, the compile
        or the read failed or ran past 60 s).
    """
    readelf = shutil.which("readelf")
    if readelf is None:
        return None
    with tempfile.TemporaryDirectory(prefix="inductor_knobs-cxx-") as scratch:
        source, library = os.path.join(scratch, "probe.cpp"), os.path.join(scratch, "probe.so")
        with open(source, "w", encoding="utf-8") as out:
            out.write(_PROBE_SOURCE)
        try:
            subprocess.run([cxx, "-shared", "-fPIC", "-O0", source, "-o", library], capture_output=True, timeout=60, check=True)
            env = {**os.environ, "LC_ALL": "C"}  # readelf translates its labels
            read = subprocess.run([readelf, "-d", library], capture_output=True, text=True, timeout=60, check=True, env=env)
        except (OSError, subprocess.SubprocessError):
            return None
    needed = re.findall(r"\(NEEDED\)\s+Shared library: \[([^\]]+)\]", read.stdout)
    if not needed:  # every shared library needs libc: this output was not understood
        return None
    return not any(name.startswith(("libstdc++.so", "libc++.so")) for name in needed)


#: ``/proc/cpuinfo`` flags of x86-64 instruction-set extensions that code built with ``-march=native`` may use.
ISA_FLAG_PREFIXES = (
    "sse", "ssse", "avx", "fma", "f16c", "bmi", "amx", "vaes", "vpclmulqdq", "gfni", "sha_ni", "adx", "popcnt",
    "movbe", "abm", "lzcnt", "aes", "pclmulqdq",
)  # fmt: skip


def cpu_isa_flags(cpuinfo: str = "/proc/cpuinfo") -> list[str] | None:
    """The instruction-set extensions this CPU reports: the ``flags`` of the first processor in ``cpuinfo``
    that start with one of :data:`ISA_FLAG_PREFIXES`, sorted; None where the file cannot be read or has no flags
    (not Linux, not x86-64).

    Why: AOTInductor compiles the package's wrapper (and a CPU package's kernels) with ``-march=native``
    (``cpp_builder``, torch 2.11 and 2.13 command lines), so a host whose CPU lacks one of the build host's
    extensions may die of SIGILL running it, and torch's loader at most logs the difference (2.13
    ``_load_aoti``; 2.7 compares nothing).
    """
    try:
        with open(cpuinfo) as src:
            for line in src:
                if line.startswith("flags"):
                    return sorted(f for f in line.partition(":")[2].split() if f.startswith(ISA_FLAG_PREFIXES))
    except OSError:
        return None
    return None


def check_cpu(label: str, built: list[str] | None) -> None:
    """Refuse a package built on a CPU with an instruction-set extension this one lacks (see :func:`cpu_isa_flags`).

    Args:
        label (str): who asks, starting the message.
        built (list[str] | None): the build host's :func:`cpu_isa_flags`, as the bundle recorded them (None:
            not recorded or not known there, nothing to compare).

    Raises:
        CompileCacheRefused: naming the extensions this CPU lacks; nothing is loaded.
    """
    here = cpu_isa_flags()
    if built is None or here is None:
        return
    missing = sorted(set(built) - set(here))
    if missing:
        raise CompileCacheRefused(
            f"{label} refused: built on a CPU with {', '.join(missing)}, which this CPU lacks; the package's code is "
            "compiled for the build host's CPU (-march=native) and may die of an illegal instruction here. Rebuild "
            "the bundle on a host with this host's CPU"
        )


class LoadFailure(NamedTuple):
    """How loading a freshly built package failed (:func:`load_failure`).

    Attributes:
        how: ``"died of signal 11"``, ``"exited with status 1"``, ``"did not finish in 300 s"`` ...
        said: the loading process's last words (its stderr's last 60 words).
        crashed: it died of a signal.
        retry: another C++ compiler may make a package that loads (it died or raised; not a timeout, not
            out of memory).
    """

    how: str
    said: str
    crashed: bool
    retry: bool


def load_failure(path: str) -> LoadFailure | None:
    """Load the package at ``path`` in a fresh process, so that a package that crashes its loader is never saved.

    Seen on an H100 host (torch 2.11.0+cu130): Inductor's C++ compiler there, ``/opt/gcc/bin/g++``, linked
    libstdc++ statically into the package's wrapper library; loading it into a process that already has
    torch's dynamic libstdc++ died of SIGSEGV in ``std::regex`` (``parse_device_str``, the
    ``AOTInductorModel`` constructor), for a package torch alone built as much as for ours.  The same
    package built with ``CXX=/usr/bin/g++`` (dynamic libstdc++) loaded.  A crash cannot be caught in the
    process that loads, so the check runs in a child that loads it as a serving process does (:func:`load_file`):
    a :class:`LoadCheck` started now (:func:`build` starts its first one before the export, so that the child's
    imports overlap the compile).

    Returns:
        LoadFailure | None: None when the child loaded the package, else how it failed (died of a signal,
        raised, or ran past ``LOAD_CHECK_S`` seconds) and its last words.
    """
    checks: list[LoadCheck] = []
    try:
        LoadCheck(os.path.dirname(path), checks)
        return checks[0].failure(path)
    finally:
        _close_all(checks)


#: What the load check's child imports before it is sent a package's path (the seconds of a fresh process).
LOAD_CHECK_PRELOAD: tuple[str, ...] = ("torch", "inductor_knobs.serving.aot_package")
#: The load check's child: imports ``argv[2:]``, reads a path from stdin, then runs ``argv[1]`` (LOAD_CHECK_CODE)
#: as ``python -c LOAD_CHECK_CODE path`` would.
_LOAD_CHECK_RUNNER = (
    "import importlib, os, sys\n"
    "code, preload = sys.argv[1], sys.argv[2:]\n"
    "for name in preload:\n"
    "    importlib.import_module(name)\n"
    "path = os.fsdecode(sys.stdin.buffer.readline().rstrip(b'\\n'))\n"
    "if not path:\n"  # the build's process went away before it sent one
    "    sys.exit(0)\n"
    "sys.argv[1:] = [path]\n"
    "exec(compile(code, '<load check>', 'exec'), {'__name__': '__main__'})\n"
)


class LoadCheck:
    """A fresh process that loads one package (:data:`LOAD_CHECK_CODE`), started before the package exists.

    It imports :data:`LOAD_CHECK_PRELOAD` at once and then waits for the package's path on stdin, so that its
    imports (4-5 s on the H200 host) run beside the build's compile.  The child runs in ``scratch`` with its
    temporary directory there (the loader unpacks into it, and a crash leaves what it unpacked: the build's
    scratch directory is removed after), and its weights take GPU memory beside this process's, whose cached
    free blocks are released first (``torch.cuda.empty_cache``).  It is appended to ``into`` as soon as it
    exists, so that the caller's cleanup closes it (:meth:`close` kills a child not yet done); a child whose
    caller went away exits by itself once its stdin closes.

    Args:
        scratch (str): the directory the package will be written to.
        into (list[LoadCheck]): the caller's checks, each closed by the caller.
    """

    def __init__(self, scratch: str, into: list[LoadCheck]) -> None:
        env = {**os.environ, **dict.fromkeys(("TMPDIR", "TEMP", "TMP"), scratch)}
        # The child imports this package (LOAD_CHECK_CODE) from wherever this process found it, also when that was
        # a sys.path entry this process added itself rather than an installed package.
        here = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
        env["PYTHONPATH"] = os.pathsep.join(p for p in (here, os.environ.get("PYTHONPATH", "")) if p)
        command = [sys.executable, "-c", _LOAD_CHECK_RUNNER, LOAD_CHECK_CODE, *LOAD_CHECK_PRELOAD]
        self.sent = False  # a path was sent: the child is used
        pipe = subprocess.PIPE
        self.process = subprocess.Popen(command, stdin=pipe, stdout=subprocess.DEVNULL, stderr=pipe, cwd=scratch, env=env)
        into.append(self)

    def failure(self, path: str) -> LoadFailure | None:
        """Send ``path`` and wait (at most ``LOAD_CHECK_S`` seconds) for the child to load it.

        Returns:
            LoadFailure | None: as :func:`load_failure`.
        """
        import torch

        if torch.cuda.is_initialized():
            torch.cuda.empty_cache()
        self.sent = True
        try:
            _, said = self.process.communicate(os.fsencode(path) + b"\n", timeout=LOAD_CHECK_S)
        except subprocess.TimeoutExpired:
            self.process.kill()
            try:  # what it wrote so far; a grandchild holding its stderr open does not hold this up
                _, said = self.process.communicate(timeout=5)
            except subprocess.TimeoutExpired:
                said = b""
            return LoadFailure(f"did not finish in {LOAD_CHECK_S} s", _last_words(said), crashed=False, retry=False)
        code = self.process.returncode
        if code == 0:
            return None
        crashed = code < 0
        how = f"died of signal {-code}" if crashed else f"exited with status {code}"
        words = _last_words(said)
        return LoadFailure(how, words, crashed=crashed, retry="out of memory" not in words.lower())

    def close(self) -> None:
        """Kill the child unless it has exited, reap it and close its pipes."""
        try:
            if self.process.poll() is None:
                self.process.kill()
            self.process.wait()
        finally:
            for pipe in (self.process.stdin, self.process.stderr):
                if pipe is not None:
                    pipe.close()


def _last_words(said: bytes | None) -> str:
    return " ".join((said or b"").decode(errors="replace").split()[-60:])


def _close_all(checks: Sequence[LoadCheck]) -> None:
    """Close every check, the later ones also where closing one is interrupted or raises."""
    if checks:
        try:
            checks[0].close()
        finally:
            _close_all(checks[1:])


def check_loads(label: str, path: str) -> None:
    """Refuse the package at ``path`` unless a fresh process loads it (:func:`load_failure`).

    Raises:
        InvalidKnobValue: the child did not load the package; naming how and the child's last words, and for
            a death by a signal Inductor's C++ compiler and what to set ``CXX`` to.
    """
    failure = load_failure(path)
    if failure is not None:
        raise _invalid(label, "aot", True, _load_message([(_cpp_compiler(), failure)]))


def _load_message(tried: Sequence[tuple[str, LoadFailure]]) -> str:
    """What a refused build allows and what happened: how the last package failed, each compiler tried, the fix."""
    last = tried[-1][1]
    allowed = f"a package a fresh process can load; loading the one just built {last.how}"
    if len(tried) > 1:
        allowed += f" (C++ compilers tried: {'; '.join(f'{cxx}: {failure.how}' for cxx, failure in tried)})"
    if any(failure.crashed for _, failure in tried):
        allowed += (
            f". Inductor's C++ compiler is {_cpp_compiler()}: one that links libstdc++ statically into the package "
            "makes packages that crash at load (seen with /opt/gcc/bin/g++ on torch 2.11); set CXX to a g++ that "
            "links it dynamically (CXX=/usr/bin/g++ there) and build again"
        )
    elif "out of memory" in last.said.lower():
        allowed += ": the GPU had no room for a second copy of the weights beside this process; free GPU memory and build again"
    return f"{allowed}. The loading process said: {last.said or '(nothing)'}"


def _cpp_compiler() -> str:
    """The C++ compiler Inductor builds with (``cpp_builder.get_cpp_compiler`` in torch 2.13; ``CXX`` sets it), or
    "unknown (why)" where this torch lacks that function or finds no compiler."""
    from torch._inductor import cpp_builder

    try:
        return str(cpp_builder.get_cpp_compiler())
    except Exception as err:  # noqa: BLE001 - a message part: AttributeError (no such function) or torch's no-compiler error
        return f"unknown ({err})"


#: The non-tensor argument types a package's contract records (AOTInductor compiles their value in).
PLAIN_VALUES = (type(None), bool, int, float, str)


def accepted(
    label: str, program: Any, calls: Sequence[tuple[Sequence[Any], dict[str, Any]]], names: Sequence[str]
) -> dict[str, Any]:
    """What a package exported as ``program`` over ``calls`` serves, per argument: the bundle's input contract.

    ``{"positional": [entry, ...], "keywords": {name: entry}}``, an entry per argument of the calls:

    - a tensor: ``{"name", "dtype", "device", "ndim", "sizes", "symbols", "strides"}``: its dtype (``"float32"``)
      and device type (``"cuda"``) as the program's input (the placeholder's ``meta["val"]``); each size's
      ``[low, high]`` over the warmed calls (low == high: a fixed size); each size's symbol in the program (a
      ``str`` such as ``"s17"``; the same symbol on two inputs: export tied those sizes, and a call must give
      them one value) or None (a fixed size); and ``"contiguous"`` where the example was contiguous, else each
      stride the program fixed (an int) or None (a symbolic one, not checked, as torch's own check does);
    - anything else: ``{"name", "value"}``: the value export saw, which AOTInductor compiled in.

    Args:
        label (str): who asks, starting every message.
        program (Any): the ``ExportedProgram`` of ``calls[-1]``.
        calls (Sequence): the warmed calls, ``(args, kwargs)`` each.
        names (Sequence[str]): the ``forward`` parameter each argument of ``calls[-1]`` binds to, positional first.

    Raises:
        InvalidKnobValue: a non-tensor argument that is not one of :data:`PLAIN_VALUES` (a float: finite), or an
            export whose user inputs are not the call's leaves (``graph_signature.input_specs`` of kind
            ``InputKind.USER_INPUT``, a ``TensorArgument`` naming each tensor's placeholder: torch 2.7-2.15).
    """
    import math

    import torch
    from torch.export.graph_signature import InputKind, TensorArgument
    from torch.utils import _pytree

    args, kwargs = calls[-1]
    leaves = _pytree.tree_leaves((tuple(args), dict(kwargs)))
    inputs = [spec.arg for spec in program.graph_signature.input_specs if spec.kind == InputKind.USER_INPUT]
    if len(leaves) != len(inputs):
        raise _invalid(label, "aot", True, f"an export with one input per leaf of the call ({len(leaves)}); it has {len(inputs)}")
    placeholders = {n.name: n for n in program.graph.nodes if n.op == "placeholder"}
    exported = {
        id(leaf): placeholders[arg.name].meta.get("val") for leaf, arg in zip(leaves, inputs) if isinstance(arg, TensorArgument)
    }

    def symbol(size: Any) -> str | None:
        expr = getattr(getattr(size, "node", None), "expr", None)
        return str(expr) if expr is not None and expr.is_Symbol else None

    def entry(name: str, values: list[Any]) -> dict[str, Any]:
        value = values[-1]
        if not isinstance(value, torch.Tensor):
            if type(value) not in PLAIN_VALUES or (type(value) is float and not math.isfinite(value)):
                allowed = (
                    "non-tensor arguments that are None, a bool, an int, a finite float or a string (the package fixes them)"
                )
                raise _invalid(label, "factory", name, allowed)
            return {"name": name, "value": value}
        fake = exported.get(id(value))
        if not isinstance(fake, torch.Tensor):
            raise _invalid(label, "aot", True, f"an export with a tensor input for {name!r}; it has {fake!r}")
        return {
            "name": name,
            "dtype": str(fake.dtype).removeprefix("torch."),
            "device": fake.device.type,
            "ndim": fake.dim(),
            "sizes": [[min(int(v.shape[a]) for v in values), max(int(v.shape[a]) for v in values)] for a in range(fake.dim())],
            "symbols": [symbol(size) for size in fake.shape],
            "strides": "contiguous" if value.is_contiguous() else [s if isinstance(s, int) else None for s in fake.stride()],
        }

    return {
        "positional": [entry(names[i], [c[0][i] for c in calls]) for i in range(len(args))],
        "keywords": {name: entry(name, [c[1][name] for c in calls]) for name in kwargs},
    }


def _check_export(label: str, program: Any, calls: Sequence[tuple[Sequence[Any], dict[str, Any]]], dynamic: Any) -> None:
    """Refuse a program that does not serve every warmed call, or whose varying sizes export narrowed or fixed."""
    import torch

    exported = program.module()
    for args, kwargs in calls:
        try:
            exported(*args, **kwargs)
        except Exception as err:  # export's input checks raise AssertionError, RuntimeError, ValueError ...
            raise _invalid(label, "aot", True, f"a model whose export serves every warmed shape; torch said: {err}") from err
    if not dynamic:
        return
    placeholders = {n.name: n for n in program.graph.nodes if n.op == "placeholder"}
    for name, axes in dynamic.items():
        node = placeholders.get(name) if name in program.graph_signature.user_inputs else None
        value = node.meta.get("val") if node is not None else None
        if not isinstance(value, torch.Tensor) or not axes:
            continue  # an input export named otherwise: the warmed calls above still checked it
        for axis, dim in axes.items():
            size = value.shape[axis]
            expr = getattr(getattr(size, "node", None), "expr", None)
            bounds = program.range_constraints.get(expr) if expr is not None and expr.is_Symbol else None
            if bounds is None or int(bounds.lower) > dim.min or bounds.upper < dim.max:
                raise _invalid(
                    label, "aot", True,
                    f"a model whose export keeps {name}[{axis}] dynamic over {dim.min}..{dim.max} (the warmed sizes); "
                    f"export made it {size} with range {bounds}: the model branches on that size, so the package "
                    "would serve other sizes with the wrong branch. Warm only sizes on one side of the branch",
                )  # fmt: skip


def dynamic_shapes(label: str, module: Any, calls: Sequence[tuple[Sequence[Any], dict[str, Any]]]) -> dict[str, Any] | None:
    """``torch.export``'s ``dynamic_shapes`` for ``module`` called with each of ``calls``: one ``Dim`` per varying size set.

    Two dimensions whose sizes were equal in every call share one ``Dim`` (``input_ids`` and
    ``attention_mask``'s sequence), as export demands of sizes it finds equal.  Keys are the
    ``forward`` parameter names the calls bind to (``inspect.Signature.bind``), as export reads them.
    Where this torch takes a range on them (``Dim.AUTO(min=, max=)``: 2.13.0 does, 2.7.0's hints are a
    plain enum; the releases between were not checked, so it is probed), the dimensions are ``AUTO`` hints with
    that range: export then keeps a guard it cannot prove over the range (a 2-layer Llama of
    transformers 5.17 under torch 2.11 made ``min(128*s, 256*s) == 128*s``) as a runtime check instead
    of refusing the range; :func:`build` then checks that each stayed dynamic over the warmed sizes.

    Returns:
        dict[str, Any] | None: the spec; None when no size varies (a static export).

    Raises:
        InvalidKnobValue: the calls bind to different parameters, or differ in a non-tensor value,
            a tensor's number of dimensions or dtype.
    """
    import torch

    signature = inspect.signature(module.forward)
    try:
        bound = [signature.bind(*args, **kwargs).arguments for args, kwargs in calls]
    except TypeError as err:
        allowed = f"calls that bind to {type(module).__name__}.forward{signature} ({err})"
        raise _invalid(label, "factory", calls[0], allowed) from err
    first = bound[0]
    if any(list(b) != list(first) for b in bound):
        raise _invalid(label, "factory", "...", "calls that pass the same arguments at every shape")
    dims: dict[tuple[int, ...], Any] = {}
    spec: dict[str, Any] = {}
    for name, value in first.items():
        if signature.parameters[name].kind in (inspect.Parameter.VAR_POSITIONAL, inspect.Parameter.VAR_KEYWORD):
            raise _invalid(label, "factory", name, "inputs passed as named parameters of forward (not through *args or **kwargs)")
        values = [b[name] for b in bound]
        if not isinstance(value, torch.Tensor):
            if any(isinstance(leaf, torch.Tensor) for v in values for leaf in torch.utils._pytree.tree_leaves(v)):
                raise _invalid(label, "factory", name, "each tensor passed as its own argument of forward, not in a container")
            if any(v != value for v in values):
                raise _invalid(label, "factory", name, "non-tensor arguments equal at every shape (AOTInductor fixes them)")
            spec[name] = None
            continue
        if any(not isinstance(v, torch.Tensor) or v.dim() != value.dim() or v.dtype != value.dtype for v in values):
            raise _invalid(label, "factory", name, "tensors of one dtype and number of dimensions at every shape")
        entry = {}
        for axis in range(value.dim()):
            sizes = tuple(int(v.shape[axis]) for v in values)
            if len(set(sizes)) > 1:
                if sizes not in dims:
                    dims[sizes] = _dimension(len(dims), min(sizes), max(sizes))
                entry[axis] = dims[sizes]
        spec[name] = entry or None
    return spec if dims else None


def _dimension(index: int, low: int, high: int) -> Any:
    """``Dim.AUTO(min=low, max=high)`` where torch takes a range on the hint, else ``Dim(f"d{index}", ...)``."""
    import torch

    auto = getattr(torch.export.Dim, "AUTO", None)
    try:
        return auto(min=low, max=high)  # type: ignore[misc]
    except TypeError:  # no hint, or a hint without a range (2.7): a named dimension, as strict as Dim always was
        return torch.export.Dim(f"d{index}", min=low, max=high)


def load_file(path: str) -> Any:
    """torch's C++ loader of the package at ``path`` (``torch._C._aoti.AOTIModelPackageLoader``), single-threaded.

    The loader itself, not ``torch._inductor.aoti_load_package``: that one imports Inductor and Dynamo (seconds
    of a serving process's start, 1,400 modules) and, from 2.10, compares the package's CPU ISA with this
    host's (``_load_aoti`` -> ``get_device_information`` -> ``pick_vec_isa``), which on an empty Inductor
    cache compiles one C++ probe per ISA and loads each in a child Python, only to log a difference
    (:func:`check_cpu` has refused a CPU lacking an extension of the build host's already).  The
    arguments are torch's own ``load_package``'s, per release (``aot_loader_args`` in ``patches/``).

    Single-threaded: the runner's own thread synchronisation (a pool of model instances handed out under a
    lock, waiting on CUDA events) conflicts with capturing a CUDA graph of a call (``aoti_load_package``'s
    docstring, 2.7.0 to 2.15.0); :class:`ShapeCheckedPackage` serialises the calls instead.

    Returns:
        Any: the ``AOTIModelPackageLoader``.

    Raises:
        Exception: whatever AOTInductor's loader raises (RuntimeError and others from C++).
    """
    import torch

    return torch._C._aoti.AOTIModelPackageLoader(*torch_compat.installed().aot_loader_args(path))


def load(label: str, package: bytes, contract: dict[str, Any]) -> ShapeCheckedPackage:
    """Load a package :func:`build` made; the callable AOTInductor runs (nothing compiles), checked per call.

    The bytes go to a file in a fresh private directory (``mkdtemp``: 0700, a new name, so no other user's
    file or link can stand in for it), which is removed once loaded: AOTInductor has unpacked it by then.

    Args:
        label (str): who asks, starting every message.
        package (bytes): the ``.pt2`` package.
        contract (dict[str, Any]): what it accepts (:func:`accepted`, as the bundle recorded it).

    Raises:
        CompileCacheRefused: AOTInductor could not load the package, or this process lacks a class its
            input or output spec names (the message names the module to import).
    """

    scratch = tempfile.mkdtemp(prefix="inductor_knobs-aot-")
    try:
        path = os.path.join(scratch, "model.pt2")
        descriptor = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600)
        try:
            out = os.fdopen(descriptor, "wb")
        except BaseException:
            os.close(descriptor)
            raise
        with out:
            out.write(package)
        try:
            return ShapeCheckedPackage(load_file(path), contract)
        except Exception as err:  # AOTInductor's loader raises RuntimeError and others from C++
            raise CompileCacheRefused(f"{label} refused: AOTInductor could not load the package: {err}{_hint(err)}") from err
    finally:
        shutil.rmtree(scratch, ignore_errors=True)


class ShapeCheckedPackage:
    """An AOTInductor model that refuses a call its package was not compiled for, before running it.

    AOTInductor's generated wrapper holds a check of each input tensor's dtype, sizes (each within its range),
    fixed strides and device type (``generate_input_output_runtime_checks``, torch 2.13
    ``codegen/cpp_wrapper_cpu.py:687``, generated into every package, ``:894``) and ``assert_size_stride`` calls
    that catch a size export tied to another's (``:2156``, an error that does not name the input), but runs them
    only where ``AOTI_RUNTIME_CHECK_INPUTS`` is set in the serving process's environment (read once per process,
    ``:822``); the non-tensor values compiled in are never checked.  Unchecked, a call of another dtype, layout
    or size runs on memory that does not fit it, and another value is ignored.  This checks every call against
    the bundle's contract (:func:`accepted`): each tensor's dtype, device type, number of dimensions, sizes
    (within the warmed range, and equal where the export ties them), contiguity or fixed strides; each
    non-tensor's value (type and ``==``).  A handful of attribute compares per input, in Python.  Where torch's
    own check is on and refuses an input (its ``RuntimeError`` names ``input_handles[i]``), the refusal is
    raised as this check's, naming the input.  Calls from several threads run one at a time: :func:`load` loads
    the package single-threaded, so that a CUDA graph can be captured of a call.

    A call is torch's ``AOTICompiledModel.__call__`` (2.7 ``_inductor/package/package.py:245``, 2.15
    ``export/pt2_archive/_package.py:739``) with the package's input and output specs read once, here, rather
    than at every call: flatten ``(args, kwargs)`` by the input spec (``torch.export._tree_utils.reorder_kwargs``
    puts the keywords in its order), pass the tensors to ``loader.boxed_run``, rebuild the outputs by the
    output spec.  Reading them here also makes an output class this process lacks fail the load, not a request.

    Args:
        loader: what :func:`load_file` returned.
        contract (dict[str, Any]): :func:`accepted`'s record.

    Raises (on a call):
        BundleInputRefused: another number of positional arguments or other keywords than the build's, or an
            input the package was not compiled for; naming the input, what the package expects and what came.
            Nothing ran.
    """

    def __init__(self, loader: Any, contract: dict[str, Any]) -> None:
        import torch
        from torch.export._tree_utils import reorder_kwargs
        from torch.utils import _pytree

        self.loader = loader
        self.contract = contract
        in_spec, out_spec = loader.get_call_spec()
        self._in_spec, self._out_spec = _pytree.treespec_loads(in_spec), _pytree.treespec_loads(out_spec)
        self._flatten, self._unflatten, self._reorder = _pytree.tree_flatten, _pytree.tree_unflatten, reorder_kwargs
        self._tensor = torch.Tensor
        self._one_at_a_time = threading.Lock()  # a runner loaded single-threaded serves one call at a time
        positional, keywords = contract["positional"], contract["keywords"]
        entries = [*positional, *keywords.values()]
        # Sizes export tied: a symbol on more than one dimension, and where each of them is.
        places: dict[str, list[str]] = {}
        for e in entries:
            for axis, symbol in enumerate(e.get("symbols", ())):
                if symbol is not None:
                    places.setdefault(symbol, []).append(f"input {e['name']!r} dimension {axis}")
        tied = {symbol: " and ".join(where) for symbol, where in places.items() if len(where) > 1}
        self._count, self._keys = len(positional), set(keywords)
        self._positional = [_checker(e, tied) for e in positional]
        self._keywords = {name: _checker(e, tied) for name, e in keywords.items()}
        # The tensors boxed_run takes, in order (torch's own check names them input_handles[i]).
        ordered = [*positional, *self._reorder(dict(keywords), self._in_spec).values()]
        self._tensor_names = [e["name"] for e in ordered if "value" not in e]

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        self.check(*args, **kwargs)
        return self.run(*args, **kwargs)

    def check(self, *args: Any, **kwargs: Any) -> None:
        """Refuse a call the package was not compiled for (see the class); runs nothing.

        Raises:
            BundleInputRefused: naming the input, what the package expects and what came.
        """
        if len(args) != self._count or kwargs.keys() != self._keys:
            given = f"{len(args)} positional, keywords {sorted(kwargs)}"
            allowed = f"{self._count} positional, keywords {sorted(self._keys)} (as the build's factory)"
            raise _refused("arguments", given, allowed)
        sizes: dict[str, int] = {}  # tied symbol -> the size the call gave it
        for check, value in zip(self._positional, args):
            check(value, sizes)
        for name, value in kwargs.items():
            self._keywords[name](value, sizes)

    def run(self, *args: Any, **kwargs: Any) -> Any:
        """Run the package on a call without :meth:`check` (what torch's ``AOTICompiledModel`` does): the call must
        be one :meth:`check` accepts, else the package reads and writes memory that does not fit it.

        Raises:
            BundleInputRefused: AOTInductor's own input check (``AOTI_RUNTIME_CHECK_INPUTS``) refused an input.
        """
        flat = self._flatten((args, self._reorder(kwargs, self._in_spec)))[0]
        tensors = [x for x in flat if isinstance(x, self._tensor)]
        with self._one_at_a_time:
            try:
                outputs = self.loader.boxed_run(tensors)
            except RuntimeError as err:
                match = _TORCH_CHECK.search(str(err))
                if match is None:
                    raise
                index = int(match.group(1))
                name = self._tensor_names[index] if index < len(self._tensor_names) else f"tensor {index}"
                raise BundleInputRefused(
                    f"AOT bundle call: input {name!r} is not served by this package on torch {torch_version()}: "
                    f"AOTInductor's own input check said: {match.group(2).strip()}"
                ) from err
        return self._unflatten(outputs, self._out_spec)


#: How AOTInductor's generated input check names what it refuses (``cpp_wrapper_cpu.py``, torch 2.13).
_TORCH_CHECK = re.compile(r"input_handles\[(\d+)\]: ([^\n]*)")


def _checker(entry: dict[str, Any], tied: dict[str, str]) -> Callable[[Any, dict[str, int]], None]:
    """The check of one argument against its contract ``entry`` (:func:`accepted`): ``check(value, sizes)`` raises
    :class:`BundleInputRefused` or returns, recording in ``sizes`` each size of ``tied`` (symbol -> where) it gave."""
    where = f"input {entry['name']!r}"
    if "value" in entry:
        expected = entry["value"]
        kind = type(expected)

        def check_value(value: Any, sizes: dict[str, int]) -> None:
            if type(value) is not kind or value != expected:
                shown = repr(value) if type(value) in PLAIN_VALUES else type(value).__name__
                raise _refused(where, shown, f"{expected!r}, the value the package was exported with (it is compiled in)")

        return check_value

    import torch

    tensor = torch.Tensor
    dtype, device, ndim = getattr(torch, entry["dtype"]), entry["device"], entry["ndim"]
    dims = [
        (axis, low, high, symbol if symbol in tied else None)
        for axis, ((low, high), symbol) in enumerate(zip(entry["sizes"], entry["symbols"]))
    ]
    # Tensor.is_cuda and its kin: a tenth of the time of Tensor.device.type (a device object, then its type).
    on_device: Callable[[Any], Any]
    if inspect.isgetsetdescriptor(getattr(tensor, f"is_{device}", None)):
        on_device = operator.attrgetter(f"is_{device}")
    else:
        on_device = lambda value: value.device.type == device  # noqa: E731 - one expression, as the attrgetter
    contiguous = entry["strides"] == "contiguous"
    strides = [] if contiguous else [(axis, s) for axis, s in enumerate(entry["strides"]) if s is not None]

    def check_tensor(value: Any, sizes: dict[str, int]) -> None:
        if not isinstance(value, tensor):
            raise _refused(where, type(value).__name__, f"a tensor of {dtype} on {device}")
        if value.dtype is not dtype:
            raise _refused(f"{where} dtype", value.dtype, f"{dtype}, the dtype the package was compiled for")
        if not on_device(value):
            raise _refused(f"{where} device", value.device, f"a {device} device, where the package runs")
        shape = value.shape
        if len(shape) != ndim:
            raise _refused(where, shape, f"a tensor of {ndim} dimensions")
        for size, (axis, low, high, symbol) in zip(shape, dims):
            if not low <= size <= high:
                raise _refused(
                    f"{where} dimension {axis}", size, f"{low}" if low == high else f"{low}..{high} (the warmed sizes' range)"
                )
            if symbol is not None and sizes.setdefault(symbol, size) != size:
                raise _refused(
                    f"{where} dimension {axis}", size, f"{sizes[symbol]}: {tied[symbol]} are one size in the export ({symbol})"
                )
        if contiguous:
            if not value.is_contiguous():
                raise _refused(f"{where} strides", value.stride(), "contiguous strides, the layout the package was compiled for")
        elif strides:
            got = value.stride()
            for axis, stride in strides:
                if got[axis] != stride:
                    allowed = f"stride {stride} at dimension {axis}, the layout the package was compiled for ({entry['strides']})"
                    raise _refused(f"{where} strides", got, allowed)

    return check_tensor


def _refused(where: str, value: object, allowed: str) -> BundleInputRefused:
    return BundleInputRefused(
        f"AOT bundle call: {where} = {value} is not served by this package on torch {torch_version()}: allowed {allowed}"
    )


def _hint(err: Exception) -> str:
    """What to do about a class torch's pytree cannot read back (``_pytree.py``: "Deserializing <class> in pytree
    is not registered"): import its module, which registers it (transformers registers its ``ModelOutput`` s so)."""
    match = re.search(r"Deserializing (\S+)\.\w+ in pytree is not registered", str(err))
    if match is None:
        return ""
    return f". The model's outputs are of a class this process has not registered: `import {match.group(1)}` before loading"


def _invalid(label: str, name: str, value: object, allowed: str) -> InvalidKnobValue:
    return InvalidKnobValue(f"{label}: {name}={value!r} is invalid on torch {torch_version()}: allowed {allowed}")
