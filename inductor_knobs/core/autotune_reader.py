"""Read what a feedback saver receives (timings, Inductor IR input nodes, choices) into an :class:`AutotuneRecord`.

Every read of a torch object is guarded: an IR node without a layout, a choice whose ``info_dict``
fails or a size without a hint gives an empty or None field, never an error inside a compile.
Hints come from ``SizeVarAllocator.size_hints`` (torch 2.4-2.11), renamed ``optimization_hints`` (2.11+).
A choice's place in torch's GEMM lookup table comes from its ``KernelTemplateChoice``
(``choice.annotations["ktc"]``, 2.10+: ``kernel_template_choice.py:39``) through the patch module.
"""

from __future__ import annotations

import json
from typing import Any

from .records import CHOICE_KINDS, AutotuneRecord, ChoiceTiming, current_compile_id, finite_or_none


def _record(
    timings: dict[Any, float],
    name: str,
    input_nodes: list[Any],
    precompile_times: dict[Any, float],
    fresh: bool,
    timing: tuple[str, float, float] | None,
) -> AutotuneRecord:
    choices = sorted(
        (_choice(c, t, precompile_times.get(c), name) for c, t in timings.items()),
        key=lambda c: (c.time_ms is None, c.time_ms or 0.0),
    )
    if not fresh:
        seconds: tuple[float | None, float | None] = (0.0, 0.0)
    elif timing is not None and timing[0] == name:
        seconds = (timing[1], timing[2])
    else:
        seconds = (None, None)
    return AutotuneRecord(
        op=name,
        shapes=[_ints_or_text(_call(n, "get_size")) for n in input_nodes],
        shape_hints=_hints([_call(n, "get_size") for n in input_nodes]),
        strides=[_ints_or_text(_call(n, "get_stride")) for n in input_nodes],
        dtypes=[str(_call(n, "get_dtype")) for n in input_nodes],
        choices=choices,
        winner=choices[0].name if choices and choices[0].time_ms is not None else None,
        benchmark_seconds=seconds[0],
        precompile_seconds=seconds[1],
        from_cache=not fresh,
        compile_id=current_compile_id(),
    )


def _choice(choice: Any, time: float, precompile_seconds: float | None, op: str = "") -> ChoiceTiming:
    try:
        info = dict(choice.info_dict())
    except Exception:  # noqa: BLE001 - a choice kind whose info_dict fails; report it without params
        info = {}
    backend = str(info.pop("backend", "")).lower()
    info.pop("kernel_name", None)
    params = {k: v if isinstance(v, (int, float, str, bool, type(None))) else str(v) for k, v in info.items()}
    description = getattr(choice, "description", "")
    if not params and description:
        params = {"description": str(description)}
    return ChoiceTiming(
        name=str(getattr(choice, "name", choice)),
        kind=CHOICE_KINDS.get(backend, backend or type(choice).__name__),
        params=params,
        time_ms=finite_or_none(time),
        precompile_ms=None if precompile_seconds is None else 1000.0 * precompile_seconds,
        **_lookup(choice, op),
    )


def _lookup(choice: Any, op: str) -> dict[str, Any]:
    """The choice's lookup-table key (device-agnostic and per device) and entry, or nothing (see ``ChoiceTiming``)."""
    annotations = getattr(choice, "annotations", None)
    ktc = annotations.get("ktc") if isinstance(annotations, dict) else None
    if ktc is None or not op:
        return {}
    from . import torch_compat

    patches = torch_compat.installed(strict=False)
    try:
        entry = patches.lookup_entry(ktc)
        json.dumps(entry)  # torch's format is JSON: a parameter that is not is no entry
        return {
            "lookup_key": patches.lookup_key(ktc, op, device=False),
            "lookup_device_key": patches.lookup_key(ktc, op, device=True),
            "lookup_entry": entry,
        }
    except Exception:  # noqa: BLE001 - a choice torch cannot key or serialise is simply not in the table
        return {}


def _call(node: Any, method: str) -> Any:
    try:
        return getattr(node, method)()
    except Exception:  # noqa: BLE001 - IR nodes without a layout raise assorted errors
        return None


def _ints_or_text(values: Any) -> list[int | str]:
    if values is None:
        return []
    return [int(v) if getattr(v, "is_number", True) and _is_int(v) else str(v) for v in values]


def _is_int(value: Any) -> bool:
    try:
        int(value)
    except (TypeError, ValueError):
        return False
    return True


def _hints(sizes: list[Any]) -> list[list[int]] | None:
    """Symbolic sizes as the ints torch benchmarked with.

    ``SizeVarAllocator.size_hints`` (2.4–2.11) was renamed ``optimization_hints`` (2.11+).
    """
    try:
        from torch._inductor.virtualized import V

        sizevars = V.graph.sizevars
        hints = getattr(sizevars, "optimization_hints", None) or getattr(sizevars, "size_hints")  # noqa: B009
        return [[int(h) for h in hints(s)] if s is not None else [] for s in sizes]
    except Exception:  # noqa: BLE001 - outside a graph, or a size without a hint
        return None
