"""An AOTInductor package as a serving bundle's payload: the model compiled ahead of time, loaded without Dynamo.

A bundle of torch's cache artifacts still makes the serving process import the model's library, build
the model, let Dynamo trace it and load every compiled graph from the caches: on an H100 that was 23 s
of a 118 s cold start for a 2-layer Llama, most of it fixed costs of ``torch.compile``.  An AOT bundle
(``ik.save_serving_bundle(..., aot=True)``) holds instead the ``.pt2`` package AOTInductor makes of the
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

import inspect
import os
import re
import shutil
import subprocess
import sys
import tempfile
import threading
from collections.abc import Callable, Sequence
from typing import Any

from ..core import torch_compat
from ..core.messages import torch_version
from ..core.plan import config_values
from ..errors import CompileCacheRefused, InvalidKnobValue, NotSupportedOnThisTorch
from .signature import as_call

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


def build(label: str, compiled: Any, factory: Callable[[Any], Any], shapes: Sequence[Any]) -> tuple[bytes, dict[str, Any]]:
    """Export the model inside ``compiled`` over ``shapes`` and compile it with AOTInductor.

    After the export and before the compile, the exported program must serve what was warmed: every
    warmed call runs through ``program.module()`` (whose pre-hook checks the inputs against the
    program's range constraints and fixed sizes), and every size that varies must have stayed one plain
    symbol whose range covers the warmed sizes.  ``Dim.AUTO`` lets export narrow a range or fix a size
    where the model branches on it; such a package would serve the other sizes wrongly (AOTInductor
    checks its inputs only under ``AOTI_RUNTIME_CHECK_INPUTS=1``), so it is refused.

    Args:
        label (str): who asks, starting every message.
        compiled (Any): an ``ik.compile`` result of an ``nn.Module`` (its ``_orig_mod`` is exported).
        factory (Callable[[Any], Any]): shape -> a call's inputs, as for ``ik.warmup``.
        shapes (Sequence[Any]): the warmed shapes; the dimensions that vary across them become dynamic.

    Returns:
        tuple[bytes, dict[str, Any]]: the package, and what it accepts (:func:`accepted`: per input its
        number of dimensions and each size's ``[low, high]``), which :func:`load` checks at every call.

    Raises:
        InvalidKnobValue: ``compiled`` does not hold an ``nn.Module``, ``factory`` is not callable, its
            calls differ in anything but tensor sizes, export narrowed or fixed a size the warmed
            shapes vary in, or ``torch.export``/AOTInductor failed on the model (torch's message included).

    Relies on ``torch.export.export(mod, args, kwargs, dynamic_shapes=..., strict=False)``,
    ``ExportedProgram.module()``/``range_constraints``/``graph_signature.user_inputs``,
    ``torch.export.Dim`` and ``torch._inductor.aoti_compile_and_package(ep, package_path=...,
    inductor_configs=...)`` (the same keywords in torch 2.7.0, 2.13.0 and 2.15.0).
    """
    import torch

    from ..core.knob_blocks import KnobsContext

    module = getattr(compiled, "_orig_mod", None)
    if not isinstance(module, torch.nn.Module):
        raise _invalid(label, "served", compiled, "an ik.compile result of an nn.Module (torch.export needs a module)")
    if not callable(factory):
        raise _invalid(label, "factory", factory, "a callable: shape -> a call's inputs, as for ik.warmup")
    calls = [as_call(factory(shape)) for shape in shapes]
    args, kwargs = calls[-1]  # the last warmed shape: bucket lists grow, so its sizes are least likely to equal a fixed one
    dynamic = dynamic_shapes(label, module, calls)
    contract = accepted(calls)
    backend = compiled._inductor_knobs_backend
    own = set(config_values(backend.own_knobs))
    configs = {key: value for key, value in backend.config_patches.items() if key not in own}
    scratch = tempfile.mkdtemp(prefix="inductor_knobs-aot-")
    try:
        path = os.path.join(scratch, "model.pt2")
        with KnobsContext(backend.own_knobs, source=label):
            try:
                program = torch.export.export(module, tuple(args), dict(kwargs), dynamic_shapes=dynamic, strict=False)
            except Exception as err:  # torch.export's many error types: the user needs torch's words
                raise _invalid(label, "aot", True, f"a model torch.export accepts; torch said: {err}") from err
            _check_export(label, program, calls, dynamic)
            try:
                torch._inductor.aoti_compile_and_package(program, package_path=path, inductor_configs=configs)
            except Exception as err:  # AOTInductor's many error types
                raise _invalid(label, "aot", True, f"a model AOTInductor compiles; torch said: {err}") from err
        check_loads(label, path)
        with open(path, "rb") as src:
            return src.read(), contract
    finally:
        shutil.rmtree(scratch, ignore_errors=True)


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


def check_loads(label: str, path: str) -> None:
    """Load the package at ``path`` in a fresh process, so that a package that crashes its loader is never saved.

    Seen on an H100 host (torch 2.11.0+cu130): Inductor's C++ compiler there, ``/opt/gcc/bin/g++``, linked
    libstdc++ statically into the package's wrapper library; loading it into a process that already has
    torch's dynamic libstdc++ died of SIGSEGV in ``std::regex`` (``parse_device_str``, the
    ``AOTInductorModel`` constructor), for a package torch alone built as much as for ours.  The same
    package built with ``CXX=/usr/bin/g++`` (dynamic libstdc++) loaded.  A crash cannot be caught in the
    process that loads, so the check runs in a child that loads it as a serving process does (:func:`load_file`),
    a few seconds beside the build's minutes.  The child runs in the package's directory with its
    temporary directory there (the loader unpacks into it, and a crash leaves what it unpacked: the
    build's scratch directory is removed after), and its weights take GPU memory beside this process's,
    whose cached free blocks are released first (``torch.cuda.empty_cache``).

    Raises:
        InvalidKnobValue: the child did not load the package (died of a signal, raised, or ran past
            ``LOAD_CHECK_S`` seconds); naming how and the child's last words, and for a death by a signal
            Inductor's C++ compiler and what to set ``CXX`` to.
    """
    import torch

    if torch.cuda.is_initialized():
        torch.cuda.empty_cache()
    scratch = os.path.dirname(path)
    env = {**os.environ, **dict.fromkeys(("TMPDIR", "TEMP", "TMP"), scratch)}
    # The child imports this package (LOAD_CHECK_CODE) from wherever this process found it, also when that was
    # a sys.path entry this process added itself rather than an installed package.
    here = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    env["PYTHONPATH"] = os.pathsep.join(p for p in (here, os.environ.get("PYTHONPATH", "")) if p)
    command = [sys.executable, "-c", LOAD_CHECK_CODE, path]
    try:
        done = subprocess.run(
            command, capture_output=True, text=True, errors="replace", timeout=LOAD_CHECK_S, cwd=scratch, env=env
        )
    except subprocess.TimeoutExpired as err:  # its stderr so far: bytes (or None), not decoded on a timeout
        how, crashed = f"did not finish in {LOAD_CHECK_S} s", False
        said = err.stderr.decode(errors="replace") if isinstance(err.stderr, bytes) else str(err.stderr or "")
    else:
        if done.returncode == 0:
            return
        crashed = done.returncode < 0
        how = f"died of signal {-done.returncode}" if crashed else f"exited with status {done.returncode}"
        said = done.stderr
    words = " ".join(said.split()[-60:]) or "(nothing)"
    allowed = f"a package a fresh process can load; loading the one just built {how}"
    if crashed:
        allowed += (
            f". Inductor's C++ compiler is {_cpp_compiler()}: one that links libstdc++ statically into the package "
            "makes packages that crash at load (seen with /opt/gcc/bin/g++ on torch 2.11); set CXX to a g++ that "
            "links it dynamically (CXX=/usr/bin/g++ there) and build again"
        )
    elif "out of memory" in words.lower():
        allowed += ": the GPU had no room for a second copy of the weights beside this process; free GPU memory and build again"
    raise _invalid(label, "aot", True, f"{allowed}. The loading process said: {words}")


def _cpp_compiler() -> str:
    """The C++ compiler Inductor builds with (``cpp_builder.get_cpp_compiler`` in torch 2.13; ``CXX`` sets it), or
    "unknown (why)" where this torch lacks that function or finds no compiler."""
    from torch._inductor import cpp_builder

    try:
        return str(cpp_builder.get_cpp_compiler())
    except Exception as err:  # noqa: BLE001 - a message part: AttributeError (no such function) or torch's no-compiler error
        return f"unknown ({err})"


def accepted(calls: Sequence[tuple[Sequence[Any], dict[str, Any]]]) -> dict[str, Any]:
    """What a package exported over ``calls`` serves: per positional argument and keyword, None for a
    non-tensor, else ``{"ndim": n, "sizes": [[low, high], ...]}`` over the calls (low == high: a fixed size)."""
    import torch

    def entry(values: list[Any]) -> dict[str, Any] | None:
        if not isinstance(values[0], torch.Tensor):
            return None
        sizes = [[min(int(v.shape[a]) for v in values), max(int(v.shape[a]) for v in values)] for a in range(values[0].dim())]
        return {"ndim": values[0].dim(), "sizes": sizes}

    first_args, first_kwargs = calls[0]
    return {
        "positional": [entry([c[0][i] for c in calls]) for i in range(len(first_args))],
        "keywords": {name: entry([c[1][name] for c in calls]) for name in first_kwargs},
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
    """An AOTInductor model that refuses a call its package was not exported for, before running it.

    AOTInductor's generated code checks its inputs only when ``AOTI_RUNTIME_CHECK_INPUTS`` is set (read
    once per process, ``codegen/cpp_wrapper_cpu.py``), and otherwise runs a call of another rank or an
    out-of-range size on memory that does not fit it.  This checks each tensor's number of dimensions and
    sizes against what the build warmed (:func:`accepted`): a few comparisons per call.  Calls from several
    threads run one at a time: :func:`load` loads the package single-threaded, so that a CUDA graph can be
    captured of a call.

    A call is torch's ``AOTICompiledModel.__call__`` (2.7 ``_inductor/package/package.py:245``, 2.15
    ``export/pt2_archive/_package.py:739``) with the package's input and output specs read once, here, rather
    than at every call: flatten ``(args, kwargs)`` by the input spec (``torch.export._tree_utils.reorder_kwargs``
    puts the keywords in its order), pass the tensors to ``loader.boxed_run``, rebuild the outputs by the
    output spec.  Reading them here also makes an output class this process lacks fail the load, not a request.

    Args:
        loader: what :func:`load_file` returned.
        contract (dict[str, Any]): :func:`accepted`'s record.

    Raises (on a call):
        InvalidKnobValue: another number of positional arguments or other keywords than the build's, a
            tensor of another rank, or a size outside the warmed range; naming the input, the size and the range.
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

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        positional, keywords = self.contract["positional"], self.contract["keywords"]
        if len(args) != len(positional) or set(kwargs) != set(keywords):
            given = f"{len(args)} positional, keywords {sorted(kwargs)}"
            allowed = f"{len(positional)} positional, keywords {sorted(keywords)} (as the build's factory)"
            raise _refused("arguments", given, allowed)
        for where, value, entry in (
            *((f"argument {i}", v, e) for i, (v, e) in enumerate(zip(args, positional))),
            *((repr(k), v, keywords[k]) for k, v in kwargs.items()),
        ):
            if entry is not None:
                _check_tensor(where, value, entry)
        flat = self._flatten((args, self._reorder(kwargs, self._in_spec)))[0]
        tensors = [x for x in flat if isinstance(x, self._tensor)]
        with self._one_at_a_time:
            outputs = self.loader.boxed_run(tensors)
        return self._unflatten(outputs, self._out_spec)


def _check_tensor(where: str, value: Any, entry: dict[str, Any]) -> None:
    shape = getattr(value, "shape", None)
    if shape is None or len(shape) != entry["ndim"]:
        raise _refused(where, getattr(value, "shape", value), f"a tensor of {entry['ndim']} dimensions")
    for axis, (size, (low, high)) in enumerate(zip(shape, entry["sizes"])):
        if not low <= size <= high:
            allowed = f"{low}" if low == high else f"{low}..{high} (the warmed sizes' range)"
            raise _refused(f"{where} dimension {axis}", size, allowed)


def _refused(where: str, value: object, allowed: str) -> InvalidKnobValue:
    return InvalidKnobValue(
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
