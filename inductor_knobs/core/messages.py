"""What the package's error messages share: the installed torch's version, and "did you mean" for an unknown name.

Neither imports torch: before torch is imported, its version comes from package metadata.
"""

from __future__ import annotations

import sys
from collections.abc import Iterable
from importlib import metadata


def torch_version() -> str:
    """The installed torch's ``__version__``; read from package metadata if torch is not imported yet.

    Metadata can lack the local tag (``2.11.0`` for ``2.11.0+cu130``), so an imported torch wins.
    """
    if "torch" in sys.modules:
        return str(sys.modules["torch"].__version__)
    try:
        return metadata.version("torch")
    except metadata.PackageNotFoundError:
        return "not installed"


def _unknown_message(kind: str, name: str, known: Iterable[str]) -> str:
    import difflib

    known = list(known)
    close = difflib.get_close_matches(name, known, n=3)
    hint = f"; did you mean {' or '.join(repr(c) for c in close)}?" if close else ""
    return f"unknown {kind} {name!r} on torch {torch_version()}{hint} Known: {', '.join(sorted(known))}"
