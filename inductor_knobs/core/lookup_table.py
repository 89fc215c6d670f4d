"""torch's GEMM lookup table (``torch._inductor.config.lookup_table.table``, 2.10+): read, check and write it.

The format is torch's (``torch/_inductor/lookup_table/choices.py``, ``LookupTableChoices``): a JSON object of
``"[device+]input_key+op_name"`` keys (``make_lookup_key``) to lists of ``{"template_id": ..., <template
parameters>...}``.  Torch uses an entry only on CUDA, for a template in use for that op, while
``LookupTableChoices`` is the choices handler (set inside each compile by the ``lookup_table`` knob).
One entry per key pins the choice; several are autotuned among.
"""

from __future__ import annotations

import importlib
import json
import os
import warnings
from collections.abc import Iterable, Mapping
from typing import Any

from ..errors import InvalidKnobValue, LookupTableUnusedWarning, torch_version

TRITON_PREFIX = "triton"  # template_id prefix of Inductor's Triton templates (``triton::mm``)
_SCALARS = (bool, int, float, str, type(None))


def load_table(label: str, value: object) -> dict[str, list[dict[str, Any]]]:
    """The ``lookup_table`` knob's value (a mapping in torch's format, or a JSON file path), checked and copied;
    InvalidKnobValue naming ``label`` for an unreadable file, bad JSON, or anything not torch's format."""
    table: object = value
    if isinstance(value, (str, os.PathLike)):
        try:
            with open(value, encoding="utf-8") as f:
                table = json.load(f)
        except (OSError, ValueError, RecursionError) as err:
            raise _fail(label, value, f"a readable JSON file of torch's lookup table ({type(err).__name__}: {err})") from None
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


def table_from_records(records: Iterable[Any], *, top: int = 1, device: bool = True) -> dict[str, list[dict[str, Any]]]:
    """A lookup table in torch's format from ``AutotuneRecord`` s: per key, the ``top`` (int >= 1, else
    InvalidKnobValue) fastest choices; ``device`` keys by GPU too (``make_lookup_key(include_device=True)``).
    Choices without a ``KernelTemplateChoice`` key (torch < 2.10, the C++ GEMM template) are left out."""
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
    """Write ``table`` as JSON (what ``lookup_table=path`` loads); returns the number of keys."""
    from .files import write_json

    write_json(path, table, indent=2, sort_keys=True)
    return len(table)


def warn_unused_table(snapshot: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> None:
    """Inside a graph's compile: warn where torch cannot use the asked table.  Torch needs a CUDA input, and for
    Triton entries ``_inductor/utils.py:use_triton_template`` (2.10-2.15): max_autotune(_gemm), TRITON, ``is_big_gpu``."""
    import torch

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
    triton = sum(str(e.get("template_id", "")).startswith(TRITON_PREFIX) for es in asked.value.values() for e in es)
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
