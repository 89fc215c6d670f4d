"""A served call's input signature: its tensors' dtypes, shapes and devices (its "shape" for per-shape costs)."""

from __future__ import annotations

import operator
import sys
from collections.abc import Mapping
from typing import Any


def input_signature(args: tuple[Any, ...], kwargs: dict[str, Any]) -> tuple[Any, ...]:
    """The call's tensor shapes, dtypes and devices (its "shape" for per-shape costs); other arguments by type.

    ``(dtype, shape, device)`` per tensor, ``(name, (dtype, shape, device))`` per keyword tensor.  The
    common case (every argument has the three attributes, as tensors do) runs in C (``attrgetter``,
    ``map``, ``zip``): on a real model every Python frame here costs microseconds per request.
    """
    try:
        return (*map(_TENSOR_KEY, args), *zip(kwargs, map(_TENSOR_KEY, kwargs.values())))
    except AttributeError:  # an argument that is not a tensor: keyed by its type
        torch = sys.modules.get("torch")
        tensor = torch.Tensor if torch is not None else ()

        def part(value: Any) -> Any:
            return _TENSOR_KEY(value) if isinstance(value, tensor) else type(value)

        return (*map(part, args), *((name, part(value)) for name, value in kwargs.items()))


_TENSOR_KEY = operator.attrgetter("dtype", "shape", "device")


def _tensors(signature: tuple[Any, ...]) -> list[tuple[str, tuple[Any, ...]]]:
    """``(keyword or "", (dtype, shape, device))`` for each tensor of a :func:`input_signature`."""
    out = []
    for part in signature:
        name, part = (f"{part[0]}=", part[1]) if isinstance(part, tuple) and isinstance(part[0], str) else ("", part)
        if isinstance(part, tuple):
            out.append((name, part))
    return out


def on_cuda(signature: tuple[Any, ...]) -> bool:
    return any(getattr(part[2], "type", part[2]) == "cuda" for _, part in _tensors(signature))


def describe_inputs(signature: tuple[Any, ...]) -> list[str]:
    """``["torch.int64[1, 901]", "attention_mask=torch.int64[1, 901]"]`` for the tensors of a signature."""
    return [f"{name}{part[0]}{list(part[1])}" for name, part in _tensors(signature)]


#: Non-tensor argument types a signature can name in a file (a JSON name -> the type); others are left out.
_PLAIN_TYPES = {t.__name__: t for t in (int, float, bool, str, type(None))}


def to_json(signature: tuple[Any, ...]) -> list[Any] | None:
    """A :func:`input_signature` as JSON data (``ik.serving.save_serving_bundle``), or None when it names a type JSON cannot.

    A tensor part is ``{"dtype": "torch.bfloat16", "shape": [1, 128], "device": "cuda:0"}``, a keyword
    part ``{"name": "input_ids", "tensor": {...}}``, another argument ``{"type": "int"}``.
    """

    def part(value: Any) -> Any:
        if isinstance(value, tuple) and len(value) == 3 and not isinstance(value[0], str):
            dtype, shape, device = value
            return {"dtype": str(dtype), "shape": [int(d) for d in shape], "device": str(device)}
        if isinstance(value, type) and value in _PLAIN_TYPES.values():
            return {"type": value.__name__}
        raise TypeError(value)

    def keyword(p: Any) -> bool:
        return isinstance(p, tuple) and isinstance(p[0], str)

    try:
        return [{"name": p[0], "tensor": part(p[1])} if keyword(p) else part(p) for p in signature]
    except (TypeError, ValueError):
        return None


def from_json(data: Any) -> tuple[Any, ...]:
    """The :func:`input_signature` that :func:`to_json` wrote, with torch's own dtype, ``Size`` and device objects.

    Raises:
        ValueError: ``data`` is not what :func:`to_json` writes (an unknown dtype, device or type).
    """
    import torch

    def part(value: Any) -> Any:
        if not isinstance(value, dict):
            raise ValueError(f"{value!r} is not a signature part")
        if "type" in value:
            return _PLAIN_TYPES[value["type"]]
        dtype = getattr(torch, str(value["dtype"]).rpartition(".")[2], None)
        if not isinstance(dtype, torch.dtype):
            raise ValueError(f"{value['dtype']!r} is not a torch dtype")
        return (dtype, torch.Size(int(d) for d in value["shape"]), torch.device(value["device"]))

    if not isinstance(data, list):
        raise ValueError(f"{data!r} is not a signature")
    try:
        return tuple((p["name"], part(p["tensor"])) if isinstance(p, dict) and "name" in p else part(p) for p in data)
    except (KeyError, TypeError, RuntimeError) as err:
        raise ValueError(f"{data!r} is not a signature: {err!r}") from err


def as_call(item: Any) -> tuple[tuple[Any, ...], dict[str, Any]]:
    """A factory's item as a call's ``(args, kwargs)``: a mapping is keywords, a tuple or list is positional
    arguments, anything else is the one positional argument (what ``ik.serving.warmup``'s ``factory`` may return).

    Args:
        item (Any): what the factory returned for one shape.

    Returns:
        tuple[tuple[Any, ...], dict[str, Any]]: the positional and keyword arguments.
    """
    if isinstance(item, Mapping):
        return (), dict(item)
    if isinstance(item, (tuple, list)):
        return tuple(item), {}
    return (item,), {}
