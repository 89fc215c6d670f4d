"""Lookup in the per-minor-release fact tables (``gemm_backends_by_release`` and the like)."""

from __future__ import annotations

from typing import Any


def by_release(table: dict[str, Any], release: str) -> Any:
    """``table[release]``, or the newest release's entry when ``release`` is not listed (lenient mode)."""
    if release in table:
        return table[release]
    return table[max(table, key=lambda r: tuple(int(p) for p in r.split(".")))]
