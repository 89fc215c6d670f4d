"""Lookup in the per-minor-release fact tables (``gemm_backends_by_release`` and the like).

A base module of :mod:`inductor_knobs.patches.torch_2_4` (``_``-prefixed: no ``PATCHES``, so
:func:`inductor_knobs.core.torch_compat.all_patch_modules` skips it).
"""

from __future__ import annotations

from typing import Any


def by_release(table: dict[str, Any], release: str) -> Any:
    """``table[release]``, or the newest release's entry when ``release`` is not listed (lenient mode)."""
    if release in table:
        return table[release]
    return table[max(table, key=lambda r: tuple(int(p) for p in r.split(".")))]
