"""The serving section of a bundle's header: how to compile, which shapes to warm and capture, and the guard's baselines.

A serving bundle is a compile-cache file (:mod:`inductor_knobs.serving.compile_cache`: ``MAGIC``, one
JSON header line, torch's cache artifacts) whose header also holds ``"serving"``: plain JSON, never
pickled, covered by the header's own sha256.  :func:`encode` makes it from what the build process
served and its ``ik.serving.warmup`` report; :func:`decode` reads it back as a :class:`BundleSpec`, refusing
anything else.  The model and its weights are the user's: no section holds them.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from .. import Knobs
from ..errors import InvalidKnobValue, KnobsError, torch_version
from ..ext import canonical_json as _canonical
from .buckets import check_buckets
from .errors import CompileCacheRefused
from .graphs import OUTPUTS, CapturedGraphs
from .signature import from_json, to_json
from .warm_up_report import WarmupReport

#: The serving section's layout written; 2 adds ``"triton_kernels"`` and their bytes after torch's artifacts
#: (:mod:`inductor_knobs.serving.triton_kernels`); 3 adds ``"aot"``: the payload is an AOTInductor package
#: (:mod:`inductor_knobs.serving.aot_package`) instead of torch's artifacts, or None; 4: ``"aot"``'s input contract
#: holds each tensor's dtype, device type, tied sizes and layout and each non-tensor value, and ``"cxx"``.
VERSION = 4
#: The layouts a reader accepts (1: no Triton kernels, the whole payload is torch's; 3: only without ``"aot"``,
#: whose contract held sizes alone); it refuses another.
READS = (1, 2, 3, 4)


@dataclass(frozen=True)
class BundleSpec:
    """A bundle's serving section, decoded.

    Attributes:
        knobs: the knobs ``ik.compile`` was given (the mode's keys are not in them).
        mode, options, torch_compile: the rest of the ``ik.compile`` call (``torch_compile``: ``dynamic``, ``fullgraph`` ...).
        shapes: the items the build's ``ik.serving.warmup`` passed to its factory, in order.
        buckets: the bucket sizes to pad requests to, or None.
        graphs: ``{"shapes": [...], "warmup_calls": n, "outputs": "copy"}`` when the build served CUDA graphs.
        report: the build's per-shape baselines, as a :class:`WarmupReport` without steps (``ik.serving.no_stalls(warmup=...)``).
        triton_kernels: the Triton kernels carried, as written (``triton_kernels.pack``; checked by
            ``triton_kernels.unpack``), or None (a bundle written before them).
        aot: ``{"bytes": n, "inputs": ..., "cpu_flags": [...], "cxx": "g++", "multi_arch": True}`` when the payload
            is an AOTInductor package of the model (``aot=True``; ``inputs``: what it accepts, its input contract,
            :func:`~inductor_knobs.serving.aot_package.accepted`; ``cxx``: the C++ compiler that built it;
            ``multi_arch``: ``aot_inductor.emit_multi_arch_kernel`` was on; ``pinned``: GEMM lookup keys pinned from the
            warm-up; ``seconds``: the build's steps; ``output_modules``: what the load imports for the outputs' classes),
            else None.
    """

    knobs: Knobs
    mode: str | None
    options: dict[str, Any] | None
    torch_compile: dict[str, Any]
    shapes: list[Any]
    buckets: tuple[int, ...] | None
    graphs: dict[str, Any] | None
    report: WarmupReport
    triton_kernels: Any = None
    aot: dict[str, Any] | None = None


def encode(served: Any, report: Any, buckets: Any) -> tuple[dict[str, Any], Any]:
    """The serving section for ``served`` warmed by ``report``, and the ``ik.compile`` result inside ``served``.

    Raises:
        InvalidKnobValue: ``served`` is not an ``ik.compile`` result (or ``ik.serving.capture_cuda_graphs`` of
            one), ``report`` is not an ``ik.serving.warmup(shapes=..., factory=...)`` report, or a shape,
            bucket or ``ik.compile`` argument is not plain data (JSON) that reads back the same.
    """
    graphs = served if isinstance(served, CapturedGraphs) else None
    compiled = graphs.fn if graphs is not None else served
    backend = getattr(compiled, "_inductor_knobs_backend", None)
    recipe = getattr(backend, "recipe", None)
    if backend is None or recipe is None:
        raise _invalid(
            "served", served, "an ik.compile result, or ik.serving.capture_cuda_graphs of one (the callable you serve)"
        )
    if not isinstance(report, WarmupReport) or not report.steps or any(s.shape is None for s in report.steps):
        raise _invalid(
            "report", report, "the report of ik.serving.warmup(served, shapes=..., factory=...): it names the shapes to warm"
        )
    shapes = [s.shape for s in report.steps]
    if buckets is None:
        ints = sorted(set(shapes)) if all(isinstance(s, int) and not isinstance(s, bool) and s > 0 for s in shapes) else None
        buckets = tuple(ints) if ints else None
    else:
        buckets = check_buckets(buckets)
    signatures = [sig for sig in (to_json(s) for s in report.signatures) if sig is not None]
    seconds = [[sig, value] for sig, value in ((to_json(s), v) for s, v in report.shape_seconds.items()) if sig is not None]
    section = {
        "version": VERSION,
        "compile": {
            "knobs": _plain("knobs", backend.own_knobs.to_dict()),
            "mode": recipe["mode"],
            "options": _plain("options", recipe["options"]),
            "torch_compile": _plain("torch.compile arguments", recipe["torch_compile"]),
        },
        "shapes": [_plain("shape", _item(s)) for s in shapes],
        "buckets": list(buckets) if buckets else None,
        "graphs": None,
        "aot": None,
        "baselines": {
            "signatures": signatures,
            "shape_seconds": seconds,
            "profiler_seconds": report.profiler_seconds,
            "steady_state_ms": report.steady_state_ms,
            "host_share": report.host_share,
        },
    }
    if graphs is not None:
        section["graphs"] = {
            "shapes": [_plain("capture shape", _item(s)) for s in graphs.capture_shapes],
            "warmup_calls": graphs.warmup_calls,
            "outputs": graphs.outputs,
        }
    return section, compiled


def decode(label: str, header: dict[str, Any]) -> BundleSpec:
    """The :class:`BundleSpec` of a bundle's header (read by :func:`~inductor_knobs.serving.compile_cache.read_file`).

    Raises:
        CompileCacheRefused: no serving section (a compile cache, not a bundle), another layout
            version, no header sha256, or a section that does not read back (the message says which part).
    """
    section = header.get("serving")
    if not isinstance(section, dict):
        raise CompileCacheRefused(
            f"{label} refused: a compile cache without a serving section, not a serving bundle (load it with "
            "ik.serving.load_compile_cache, or write a bundle with ik.serving.save_serving_bundle)"
        )
    if section.get("version") not in READS or "header_sha256" not in header:
        raise CompileCacheRefused(
            f"{label} refused: serving section version {section.get('version')!r} (this inductor_knobs reads "
            f"{' or '.join(map(str, READS))}, with a header sha256); rebuild the bundle with ik.serving.save_serving_bundle"
        )
    try:
        recipe = section["compile"]
        baselines = section["baselines"]
        signatures = frozenset(from_json(s) for s in baselines["signatures"])
        shape_seconds = {from_json(s): float(v) for s, v in baselines["shape_seconds"]}
        report = WarmupReport(
            [],
            steady_state_ms=baselines["steady_state_ms"],
            signatures=signatures | frozenset(shape_seconds),
            shape_seconds=shape_seconds,
            host_share=baselines["host_share"],
            profiler_seconds=baselines["profiler_seconds"],
        )
        graphs = section["graphs"]
        if graphs is not None:
            graphs = {**graphs, "shapes": [_unitem(s) for s in graphs["shapes"]]}
            if graphs["outputs"] not in OUTPUTS or not isinstance(graphs["warmup_calls"], int) or graphs["warmup_calls"] < 1:
                raise ValueError(f"graphs {graphs!r}")
        buckets = check_buckets(section["buckets"]) if section["buckets"] is not None else None
        aot = section["aot"] if section["version"] >= 3 else None
        if aot is not None and section["version"] == 3:
            raise CompileCacheRefused(
                f"{label} refused: an AOT bundle whose input contract holds sizes alone (serving section 3), so its "
                "calls could not be checked for dtype, device, layout, tied sizes and non-tensor values; rebuild it "
                "with ik.serving.save_serving_bundle(..., aot=True)"
            )
        if aot is not None and not _aot_section(aot):
            raise ValueError(f"aot {aot!r}")
        return BundleSpec(
            Knobs(**recipe["knobs"]),
            recipe["mode"],
            recipe["options"],
            dict(recipe["torch_compile"]),
            [_unitem(s) for s in section["shapes"]],
            buckets,
            graphs,
            report,
            section.get("triton_kernels") if section["version"] != 1 else None,
            aot,
        )
    except CompileCacheRefused:
        raise
    except (KeyError, TypeError, ValueError, KnobsError) as err:
        raise CompileCacheRefused(
            f"{label} refused: its serving section does not read back ({err!r}); "
            "rebuild the bundle with ik.serving.save_serving_bundle"
        ) from err


def _aot_section(aot: Any) -> bool:
    """Whether ``aot`` is ``{"bytes": n >= 1, "inputs": {"positional": [entry, ...], "keywords": {name: entry}},
    "cpu_flags": [str, ...] or None, "cxx": str, "multi_arch": bool, "pinned": int, "seconds": {step: s},
    "output_modules": [str, ...], "options": {key: str}}`` (the last seven may be absent), each entry as
    :func:`~inductor_knobs.serving.aot_package.accepted` writes it: a tensor's ``name``, ``dtype`` (a torch dtype's
    name), ``device``, ``ndim``, ``sizes`` (``[low, high]`` ints, ``0 <= low <= high``), ``symbols`` (str or None)
    and ``strides`` (``"contiguous"`` or ints or None), one per dimension; or a non-tensor's ``name`` and ``value``."""
    import torch

    from .aot_package import PLAIN_VALUES

    def integer(value: Any) -> bool:
        return type(value) is int and value >= 0

    def per_dimension(values: Any, ndim: int, item: Any) -> bool:
        return isinstance(values, list) and len(values) == ndim and all(item(v) for v in values)

    def entry(value: Any) -> bool:
        if not isinstance(value, dict) or not isinstance(value.get("name"), str):
            return False
        if set(value) == {"name", "value"}:
            return type(value["value"]) in PLAIN_VALUES
        if set(value) != {"name", "dtype", "device", "ndim", "sizes", "symbols", "strides"} or not integer(value["ndim"]):
            return False
        ndim, strides = value["ndim"], value["strides"]
        return (
            isinstance(value["dtype"], str)
            and isinstance(getattr(torch, value["dtype"], None), torch.dtype)
            and isinstance(value["device"], str)
            and per_dimension(
                value["sizes"],
                ndim,
                lambda r: isinstance(r, list) and len(r) == 2 and integer(r[0]) and integer(r[1]) and r[0] <= r[1],
            )
            and per_dimension(value["symbols"], ndim, lambda s: s is None or isinstance(s, str))
            and (strides == "contiguous" or per_dimension(strides, ndim, lambda s: s is None or type(s) is int))
        )

    if (
        not isinstance(aot, dict)
        or set(aot) - {"cpu_flags", "cxx", "multi_arch", "pinned", "seconds", "output_modules", "options"} != {"bytes", "inputs"}
        or not integer(aot["bytes"])
        or aot["bytes"] < 1
        or not isinstance(aot.get("cxx", ""), str)
        or not isinstance(aot.get("multi_arch", False), bool)
        or not integer(aot.get("pinned", 0))
        or not isinstance(aot.get("seconds", {}), dict)
        or not isinstance(aot.get("output_modules", []), list)
        or not all(isinstance(m, str) for m in aot.get("output_modules", []))
        or not isinstance(aot.get("options", {}), dict)
        or not all(isinstance(k, str) and isinstance(v, str) for k, v in aot.get("options", {}).items())
    ):
        return False
    flags = aot.get("cpu_flags")  # absent in a bundle saved before it was recorded: nothing to compare then
    if flags is not None and not (isinstance(flags, list) and all(isinstance(f, str) for f in flags)):
        return False
    inputs = aot["inputs"]
    return (
        isinstance(inputs, dict)
        and set(inputs) == {"positional", "keywords"}
        and isinstance(inputs["positional"], list)
        and isinstance(inputs["keywords"], dict)
        and all(entry(e) for e in (*inputs["positional"], *inputs["keywords"].values()))
    )


def _item(value: Any) -> Any:
    """A warm-up shape as JSON data: a tuple is tagged (``{"tuple": [...]}``) so that it reads back as a tuple."""
    if isinstance(value, tuple):
        return {"tuple": [_item(v) for v in value]}
    if isinstance(value, list):
        return [_item(v) for v in value]
    return value


def _unitem(value: Any) -> Any:
    if isinstance(value, dict) and set(value) == {"tuple"}:
        return tuple(_unitem(v) for v in value["tuple"])
    if isinstance(value, list):
        return [_unitem(v) for v in value]
    return value


def _plain(name: str, value: Any) -> Any:
    """``value`` if it is JSON data that reads back the same, type for type (``Knobs.identity``'s rule)."""
    try:
        back = json.loads(json.dumps(value, allow_nan=False))
    except (TypeError, ValueError):
        back = _UNREADABLE
    if back is _UNREADABLE or _canonical(back) != _canonical(value):
        raise _invalid(name, value, "plain data that JSON writes and reads back the same (numbers, strings, lists, dicts)")
    return value


_UNREADABLE = object()


def _invalid(name: str, value: object, allowed: str) -> InvalidKnobValue:
    return InvalidKnobValue(f"save_serving_bundle({name}={value!r}) is invalid on torch {torch_version()}: allowed {allowed}")
