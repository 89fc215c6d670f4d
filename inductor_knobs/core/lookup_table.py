"""torch's GEMM lookup table (``torch._inductor.config.lookup_table.table``, 2.10+): read, check and write it.

The format is torch's own (``torch/_inductor/lookup_table/choices.py``, ``LookupTableChoices``): a JSON
object whose keys are ``"[device+]input_key+op_name"`` (``make_lookup_key``; ``input_key`` is
``_generate_kernel_inputs_key``: ``str(((dtype, shape, stride), ...))`` with ``+alpha=1&beta=1`` style
scalars) and whose values are lists of ``{"template_id": ..., <template parameters>..., "template_hash":
...}``.  Torch uses an entry only for a template that Inductor has in use for that op, only on CUDA, and
only while ``LookupTableChoices`` is the choices handler (the ``lookup_table`` knob makes it so inside
each compile: :mod:`inductor_knobs.core.interception`).  One entry per key pins the choice (no
benchmarking); several are autotuned among.

:func:`table_from_records` writes one from :class:`~inductor_knobs.core.events.AutotuneRecord` s
(``ik.record_autotune``), whose choices carry their key and entry where torch gave them a
``KernelTemplateChoice`` (2.10+: Triton, ATen and other KTC templates; not the C++ GEMM template).
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterable, Mapping
from typing import Any

from ..errors import InvalidKnobValue, torch_version

#: ``template_id`` prefix of Inductor's Triton templates (``triton::mm``): those need the Triton template in
#: use, which the SM gate and max-autotune decide (:class:`~inductor_knobs.errors.LookupTableUnusedWarning`).
TRITON_PREFIX = "triton"
_SCALARS = (bool, int, float, str, type(None))


def load_table(label: str, value: object) -> dict[str, list[dict[str, Any]]]:
    """A lookup table from a mapping or a JSON file path, checked and copied (the knob's value).

    Args:
        label: the knob or variable name, for messages.
        value: a mapping in torch's format, or a ``str``/``os.PathLike`` path of a JSON file holding one.

    Returns:
        dict: ``{key: [entry, ...]}``, a deep copy with lists for sequences.

    Raises:
        InvalidKnobValue: an unreadable file, invalid JSON, or anything that is not torch's format
            (a key that is not a non-empty string, a value that is not a list of objects each with a
            string ``template_id``, a parameter that is not a JSON scalar); names the knob, the value,
            what is allowed and the torch version.
    """
    table: object = value
    if isinstance(value, (str, os.PathLike)):
        try:
            with open(value, encoding="utf-8") as f:
                table = json.load(f)
        except (OSError, ValueError) as err:
            raise _fail(label, value, f"a readable JSON file of torch's lookup table ({err})") from None
    if not isinstance(table, Mapping) or not table:
        raise _fail(label, value, "a non-empty mapping (or JSON file) of lookup keys to lists of entries")
    checked: dict[str, list[dict[str, Any]]] = {}
    for key, entries in table.items():
        if not isinstance(key, str) or not key or isinstance(entries, (str, bytes)) or not isinstance(entries, Iterable):
            raise _fail(label, value, f"string keys with lists of entries (got {key!r}: {entries!r})")
        checked[key] = [_entry(label, value, key, entry) for entry in entries]
        if not checked[key]:
            raise _fail(label, value, f"at least one entry per key (key {key!r} has none)")
    return checked


def _entry(label: str, value: object, key: str, entry: object) -> dict[str, Any]:
    if not isinstance(entry, Mapping) or not isinstance(entry.get("template_id"), str) or not entry["template_id"]:
        raise _fail(label, value, f"entries with a string 'template_id' (key {key!r} has {entry!r})")
    bad = {k: v for k, v in entry.items() if not isinstance(k, str) or not isinstance(v, _SCALARS)}
    if bad:
        raise _fail(label, value, f"entries of JSON scalars (key {key!r} has {bad!r})")
    return dict(entry)


def _fail(label: str, value: object, allowed: str) -> InvalidKnobValue:
    size = len(value) if isinstance(value, Mapping) else "?"
    shown = os.fspath(value) if isinstance(value, (str, os.PathLike)) else f"<table of {size} keys>"
    return InvalidKnobValue(f"{label}={shown!r} is invalid on torch {torch_version()}: allowed {allowed}")


def triton_entries(table: Mapping[str, list[dict[str, Any]]]) -> int:
    """How many entries are for a Triton template (``template_id`` ``triton::…``)."""
    return sum(str(e.get("template_id", "")).startswith(TRITON_PREFIX) for entries in table.values() for e in entries)


def table_from_records(records: Iterable[Any], *, top: int = 1, device: bool = True) -> dict[str, list[dict[str, Any]]]:
    """A lookup table in torch's format from autotune records: per key, the ``top`` fastest choices.

    Args:
        records: :class:`~inductor_knobs.core.events.AutotuneRecord` s (``ik.record_autotune().records``).
        top: entries per key, fastest first (int >= 1; 1 pins the winner: torch then does not benchmark).
        device: key by the GPU too (``"NVIDIA H100 80GB HBM3+…"``, what ``make_lookup_key(include_device=True)``
            gives; torch tries that key first), else device-agnostic keys only.  A choice recorded on a
            non-CUDA device has only a device-agnostic key (torch never looks a table up there).

    Returns:
        dict: ``{key: [entry, ...]}``; choices without a key (no ``KernelTemplateChoice``, such as the C++
        GEMM template, or torch < 2.10) and failed choices are left out.

    Raises:
        InvalidKnobValue: ``top`` is not an int >= 1.
    """
    if isinstance(top, bool) or not isinstance(top, int) or top < 1:
        raise InvalidKnobValue(f"lookup table top={top!r} is invalid on torch {torch_version()}: allowed an int >= 1")
    timed: dict[str, list[tuple[float, dict[str, Any]]]] = {}
    for record in records:
        for choice in record.choices:
            key = (choice.lookup_device_key if device else None) or choice.lookup_key
            if key is None or choice.lookup_entry is None or choice.time_ms is None:
                continue
            found = timed.setdefault(key, [])
            if all(entry != choice.lookup_entry for _, entry in found):
                found.append((choice.time_ms, dict(choice.lookup_entry)))
    return {key: [entry for _, entry in sorted(found, key=lambda t: t[0])[:top]] for key, found in timed.items()}


def write_table(path: str | os.PathLike[str], table: Mapping[str, list[dict[str, Any]]]) -> int:
    """Write ``table`` as JSON (what ``lookup_table=path`` loads); returns the number of keys written."""
    from .files import write_json

    write_json(path, table, indent=2, sort_keys=True)
    return len(table)


def warn_unused_table(snapshot: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> None:
    """Inside one graph's compile under the ``lookup_table`` knob: warn where torch cannot use the table.

    :class:`~inductor_knobs.errors.LookupTableUnusedWarning` when the graph has no CUDA input (torch's
    ``LookupTableChoices`` answers only on CUDA), or when the table has Triton entries and Inductor's Triton
    GEMM template is not in use for a CUDA device of the graph: ``use_triton_template``
    (``_inductor/utils.py``, 2.10-2.15) needs max_autotune or max_autotune_gemm, TRITON among
    ``max_autotune_gemm_backends``, and ``is_big_gpu`` (the SM gate: 68 SMs, or the ``min_sms`` knob).

    Args:
        snapshot: the interception's snapshot of what this compile was asked (``patches``, ``asked``).
        args: ``compile_fx_inner``'s positional arguments (the graph, its example inputs).
        kwargs: its keyword arguments.
    """
    import importlib
    import warnings

    import torch

    from ..errors import LookupTableUnusedWarning
    from .torch_compat import INDUCTOR_CONFIG

    asked = snapshot.asked.get((INDUCTOR_CONFIG, "lookup_table.table"))
    if asked is None or not asked.value:
        return
    inputs = args[1] if len(args) > 1 else kwargs.get("example_inputs", ())
    devices = sorted({t.device for t in inputs or () if isinstance(t, torch.Tensor) and t.device.type == "cuda"}, key=str)
    if not devices:
        warnings.warn(
            "lookup_table: this graph has no CUDA input, and torch's lookup table is CUDA-only "
            "(LookupTableChoices._get_lookup_table returns {} without CUDA, make_lookup_key gives no key for other "
            "devices): Inductor chooses as it would without the table",
            LookupTableUnusedWarning,
            stacklevel=4,
        )
        return
    triton = triton_entries(asked.value)
    if not triton:
        return
    patches, cfg = snapshot.patches, importlib.import_module(INDUCTOR_CONFIG)
    utils = importlib.import_module("torch._inductor.utils")
    problems = []
    if not (patches.read_value(cfg, "max_autotune") or patches.read_value(cfg, "max_autotune_gemm")):
        problems.append("max_autotune and max_autotune_gemm are off")
    backends = str(patches.read_value(cfg, "max_autotune_gemm_backends")).upper().replace(" ", "").split(",")
    if "TRITON" not in backends:
        problems.append(f"max_autotune_gemm_backends={','.join(backends)} leaves out TRITON")
    small = [str(d) for d in devices if not utils.is_big_gpu(d.index or 0)]
    if small:
        problems.append(f"the SM gate (is_big_gpu) is closed on {', '.join(small)}: lift it with min_sms=<its SM count>")
    if problems:
        warnings.warn(
            f"lookup_table: its {triton} Triton entries apply only where Inductor uses its Triton GEMM template, and "
            f"here {'; '.join(problems)}: those entries are ignored (ATen and other entries still apply)",
            LookupTableUnusedWarning,
            stacklevel=4,
        )
