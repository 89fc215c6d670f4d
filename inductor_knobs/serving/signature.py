"""A served call's input signature: its tensors' dtypes, shapes and devices (its "shape" for per-shape costs)."""

from __future__ import annotations

import operator
import sys
from typing import Any


def _signature(args: tuple[Any, ...], kwargs: dict[str, Any]) -> tuple[Any, ...]:
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
    """``(keyword or "", (dtype, shape, device))`` for each tensor of a :func:`_signature`."""
    out = []
    for part in signature:
        name, part = (f"{part[0]}=", part[1]) if isinstance(part, tuple) and isinstance(part[0], str) else ("", part)
        if isinstance(part, tuple):
            out.append((name, part))
    return out


def _on_cuda(signature: tuple[Any, ...]) -> bool:
    return any(getattr(part[2], "type", part[2]) == "cuda" for _, part in _tensors(signature))


def _describe(signature: tuple[Any, ...]) -> list[str]:
    """``["torch.int64[1, 901]", "attention_mask=torch.int64[1, 901]"]`` for the tensors of a signature."""
    return [f"{name}{part[0]}{list(part[1])}" for name, part in _tensors(signature)]
