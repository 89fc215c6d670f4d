"""An AOTInductor package as a serving bundle's payload: the model compiled ahead of time, loaded without Dynamo.

A bundle of torch's cache artifacts still makes the serving process import the model's library, build
the model, let Dynamo trace it and load every compiled graph from the caches: on an H100 that was 23 s
of a 118 s cold start for a 2-layer Llama, most of it fixed costs of ``torch.compile``.  An AOT bundle
(``ik.save_serving_bundle(..., aot=True)``) holds instead the ``.pt2`` package AOTInductor makes of the
exported model (``torch.export.export`` then ``torch._inductor.aoti_compile_and_package``, torch 2.7+):
the wrapper and kernels compiled to one shared library, the weights beside it.  A serving process loads
it with ``torch._inductor.aoti_load_package``: no model code, no Dynamo, no Inductor compile, no Triton
compile and no autotune happen there, by construction.  It still needs the classes of the model's outputs:
the package's output spec names them (``transformers.modeling_outputs.CausalLMOutputWithPast`` ...), and
torch's pytree reads it back only once the module that registers them is imported.

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
import tempfile
from collections.abc import Callable, Sequence
from typing import Any

from ..core import torch_compat
from ..core.messages import torch_version
from ..core.plan import config_values
from ..errors import CompileCacheRefused, InvalidKnobValue, NotSupportedOnThisTorch
from .signature import as_call


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


def build(label: str, compiled: Any, factory: Callable[[Any], Any], shapes: Sequence[Any]) -> bytes:
    """Export the model inside ``compiled`` over ``shapes`` and compile it with AOTInductor; the ``.pt2`` bytes.

    Args:
        label (str): who asks, starting every message.
        compiled (Any): an ``ik.compile`` result of an ``nn.Module`` (its ``_orig_mod`` is exported).
        factory (Callable[[Any], Any]): shape -> a call's inputs, as for ``ik.warmup``.
        shapes (Sequence[Any]): the warmed shapes; the dimensions that vary across them become dynamic.

    Returns:
        bytes: the package.

    Raises:
        InvalidKnobValue: ``compiled`` does not hold an ``nn.Module``, ``factory`` is not callable, its
            calls differ in anything but tensor sizes, or ``torch.export``/AOTInductor failed on the
            model (the message holds torch's error).

    Relies on ``torch.export.export(mod, args, kwargs, dynamic_shapes=..., strict=False)``,
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
    backend = compiled._inductor_knobs_backend
    own = set(config_values(backend.own_knobs))
    configs = {key: value for key, value in backend.config_patches.items() if key not in own}
    scratch = tempfile.mkdtemp(prefix="inductor_knobs-aot-")
    try:
        path = os.path.join(scratch, "model.pt2")
        with KnobsContext(backend.own_knobs, source=label):
            try:
                program = torch.export.export(module, tuple(args), dict(kwargs), dynamic_shapes=dynamic, strict=False)
                if dynamic and not _dynamic_inputs(program):
                    raise ValueError(f"export fixed every dimension the shapes vary in ({dynamic}) to the example's size")
                torch._inductor.aoti_compile_and_package(program, package_path=path, inductor_configs=configs)
            except Exception as err:  # torch.export's and AOTInductor's many error types: the user needs torch's words
                raise _invalid(label, "aot", True, f"a model torch.export and AOTInductor accept; torch said: {err}") from err
        with open(path, "rb") as src:
            return src.read()
    finally:
        shutil.rmtree(scratch, ignore_errors=True)


def dynamic_shapes(label: str, module: Any, calls: Sequence[tuple[Sequence[Any], dict[str, Any]]]) -> dict[str, Any] | None:
    """``torch.export``'s ``dynamic_shapes`` for ``module`` called with each of ``calls``: one ``Dim`` per varying size set.

    Two dimensions whose sizes were equal in every call share one ``Dim`` (``input_ids`` and
    ``attention_mask``'s sequence), as export demands of sizes it finds equal.  Keys are the
    ``forward`` parameter names the calls bind to (``inspect.Signature.bind``), as export reads them.
    Where this torch has them (``Dim.AUTO(min=, max=)``, 2.8+), the dimensions are ``AUTO`` hints with
    that range: export then keeps a guard it cannot prove over the range (a 2-layer Llama of
    transformers 5.17 under torch 2.11 made ``min(128*s, 256*s) == 128*s``) as a runtime check instead
    of refusing the range; :func:`build` then checks that each stayed dynamic.

    Returns:
        dict[str, Any] | None: the spec; None when no size varies (a static export).

    Raises:
        InvalidKnobValue: the calls bind to different parameters, or differ in a non-tensor value,
            a tensor's number of dimensions or dtype.
    """
    import torch

    signature = inspect.signature(module.forward)
    bound = [signature.bind(*args, **kwargs).arguments for args, kwargs in calls]
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
    except TypeError:  # no hint or a hint without a range (before 2.8): a named dimension
        return torch.export.Dim(f"d{index}", min=low, max=high)


def _dynamic_inputs(program: Any) -> int:
    """How many dimensions of the exported program's user inputs are symbolic (``ExportedProgram.graph_signature
    .user_inputs`` names their placeholders; each placeholder's ``meta["val"]`` is a fake tensor)."""
    import torch

    user = set(program.graph_signature.user_inputs)
    count = 0
    for node in program.graph.nodes:
        value = node.meta.get("val") if node.op == "placeholder" and node.name in user else None
        if isinstance(value, torch.Tensor):
            count += sum(not isinstance(size, int) for size in value.shape)
    return count


def load(label: str, package: bytes) -> Any:
    """Load a package :func:`build` made; the callable AOTInductor runs (nothing compiles).

    The bytes go to a file in a fresh private directory (``mkdtemp``: 0700, a new name, so no other user's
    file or link can stand in for it), which is removed once loaded: AOTInductor has unpacked it by then.

    Raises:
        CompileCacheRefused: AOTInductor could not load the package (the message holds torch's error).
    """
    import torch

    scratch = tempfile.mkdtemp(prefix="inductor_knobs-aot-")
    try:
        path = os.path.join(scratch, "model.pt2")
        with open(os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600), "wb") as out:
            out.write(package)
        try:
            model = torch._inductor.aoti_load_package(path)
            _read_call_spec(model)
            return model
        except Exception as err:  # AOTInductor's loader raises RuntimeError and others from C++
            raise CompileCacheRefused(f"{label} refused: AOTInductor could not load the package: {err}{_hint(err)}") from err
    finally:
        shutil.rmtree(scratch, ignore_errors=True)


def _read_call_spec(model: Any) -> None:
    """Read the package's input and output specs now, as every call will (``AOTICompiledModel.__call__``:
    ``pytree.treespec_loads(loader.get_call_spec()[i])``, 2.7 ``_inductor/package/package.py:246``, 2.13
    ``export/pt2_archive/_package.py``), so that an output class this process lacks fails the load, not a request."""
    from torch.utils import _pytree

    get_call_spec = getattr(getattr(model, "loader", None), "get_call_spec", None)
    for spec in get_call_spec() if get_call_spec is not None else ():
        _pytree.treespec_loads(spec)


def _hint(err: Exception) -> str:
    """What to do about a class torch's pytree cannot read back (``_pytree.py``: "Deserializing <class> in pytree
    is not registered"): import its module, which registers it (transformers registers its ``ModelOutput`` s so)."""
    match = re.search(r"Deserializing (\S+)\.\w+ in pytree is not registered", str(err))
    if match is None:
        return ""
    return f". The model's outputs are of a class this process has not registered: `import {match.group(1)}` before loading"


def _invalid(label: str, name: str, value: object, allowed: str) -> InvalidKnobValue:
    return InvalidKnobValue(f"{label}: {name}={value!r} is invalid on torch {torch_version()}: allowed {allowed}")
