"""Shape buckets: pad a varying length up to one of a few declared sizes, so serving meets only warmed shapes.

Per-shape first-call costs (a cuDNN SDPA plan per exact sequence length, a CUDA graph per shape, a
cuBLAS heuristic query, a Dynamo recompile outside a guard's range) are paid once per *distinct*
shape.  Padding every request up to the next of a few bucket sizes, and warming those sizes with
``ik.serving.warmup``, bounds them, as vLLM's CUDA graph capture sizes do.  Padding positions must not
change the result: right-padding is exact for causal attention; bidirectional models need an
attention mask that hides the padding.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from ..errors import InvalidKnobValue, torch_version


def check_buckets(buckets: Iterable[int], *, name: str = "buckets") -> tuple[int, ...]:
    """Validate bucket sizes.

    Args:
        buckets: sizes (ints > 0), strictly increasing.
        name: the argument's name, for the message.

    Returns:
        The sizes as a tuple.

    Raises:
        InvalidKnobValue: empty, not strictly increasing, or holding something other than positive ints.
    """
    try:
        sizes = tuple(buckets)
    except TypeError:
        sizes = None
    bad = (
        not sizes
        or any(isinstance(b, bool) or not isinstance(b, int) or b <= 0 for b in sizes)
        or any(a >= b for a, b in zip(sizes, sizes[1:]))
    )
    if bad:
        raise InvalidKnobValue(
            f"{name}={buckets!r} is invalid on torch {torch_version()}: allowed a non-empty, strictly increasing "
            "sequence of positive ints, e.g. [128, 256, 512, 1024, 2048]"
        )
    return sizes  # type: ignore[return-value]


def bucket_for(length: int, buckets: Iterable[int]) -> int:
    """The smallest bucket that holds ``length``.

    Args:
        length: the size to serve (int > 0).
        buckets: declared sizes (see :func:`check_buckets`).

    Returns:
        The bucket size (int).

    Raises:
        InvalidKnobValue: bad buckets, a length that is not a positive int, or one above the largest bucket.
    """
    sizes = check_buckets(buckets)
    if isinstance(length, bool) or not isinstance(length, int) or length <= 0:
        raise InvalidKnobValue(f"length={length!r} is invalid on torch {torch_version()}: allowed a positive int")
    for size in sizes:
        if length <= size:
            return size
    raise InvalidKnobValue(
        f"length={length} is invalid on torch {torch_version()}: allowed at most the largest bucket, {sizes[-1]} "
        "(add a larger bucket, or split the request)"
    )


def pad_to_bucket(x: Any, buckets: Iterable[int], *, dim: int = -1, value: float = 0) -> Any:
    """``x`` padded along ``dim`` with ``value`` up to the bucket of its size (``torch.nn.functional.pad``).

    Args:
        x: a tensor.
        buckets: declared sizes (see :func:`check_buckets`).
        dim: the varying dimension (default: the last).
        value: the padding value (a pad token id, 0 for an attention mask).

    Returns:
        A new tensor of size ``bucket_for(x.shape[dim], buckets)`` along ``dim`` (``x`` itself when it fits exactly).
        Slice the output back to the request's length where it has that dimension.

    Raises:
        InvalidKnobValue: as :func:`bucket_for`.
    """
    import torch.nn.functional as F

    length = int(x.shape[dim])
    size = bucket_for(length, buckets)
    if size == length:
        return x
    dim = dim % x.dim()
    widths = [0, 0] * (x.dim() - 1 - dim) + [0, size - length]  # F.pad lists dimensions last first
    return F.pad(x, widths, value=value)


def suggest_buckets(low: int, high: int, *, count: int = 16) -> tuple[int, ...]:
    """About ``count`` evenly spaced buckets that cover ``[low, high]``, each a multiple of 8 but the last.

    Evenly spaced buckets pad a request by at most one step (``(high - low) / count``); a multiple of
    8 keeps GEMM and attention kernels on their aligned paths.  ``high`` is the largest size the model
    accepts (its context length, the largest request warmed): the last bucket is ``high`` itself, so no
    request is padded beyond it.

    Returns:
        Strictly increasing sizes, each in ``[low, high]`` but the first (``low`` rounded up to a multiple
        of 8, at most ``high``).

    Raises:
        InvalidKnobValue: ``low``/``high`` not positive ints with ``low <= high``, or ``count`` < 1.
    """
    if any(isinstance(v, bool) or not isinstance(v, int) or v <= 0 for v in (low, high, count)) or low > high:
        raise InvalidKnobValue(
            f"suggest_buckets(low={low!r}, high={high!r}, count={count!r}) is invalid on torch {torch_version()}: "
            "allowed positive ints with low <= high"
        )

    def up8(n: int) -> int:
        return -(-n // 8) * 8

    step = max(8, up8(-(-(high - low + 1) // count)))
    sizes = [min(up8(low), high)]
    while sizes[-1] < high:
        sizes.append(min(sizes[-1] + step, high))
    return tuple(sizes)
