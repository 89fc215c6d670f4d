"""Fingerprints of torch functions, so a patch never lands on code it does not recognise.

A fingerprint is the first 16 hex digits of the SHA-256 of a function's source with
decorators, comments and all whitespace runs normalised away.  It therefore ignores
line moves and comment edits (which happen in every release) but changes when the
code does.  It is computed from text, so it is the same on every Python version.
"""

from __future__ import annotations

import ast
import functools
import hashlib
import inspect
import io
import textwrap
import tokenize
from collections.abc import Callable


def fingerprint_source(source: str) -> str:
    """Return the fingerprint of the first function defined in ``source``.

    Args:
        source: Python source text holding a ``def`` (decorators and indentation allowed).

    Returns:
        16 lowercase hex digits.

    Raises:
        ValueError: ``source`` defines no function.
    """
    source = textwrap.dedent(source)
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            lines = source.splitlines()[node.lineno - 1 : node.end_lineno]
            body = "\n".join(lines) + "\n"
            break
    else:
        raise ValueError("no function definition in source")
    kept: list[str] = []
    for tok in tokenize.generate_tokens(io.StringIO(body).readline):
        if tok.type in (tokenize.COMMENT, tokenize.NL, tokenize.NEWLINE, tokenize.INDENT, tokenize.DEDENT):
            continue
        kept.append(tok.string)
    normalised = " ".join(" ".join(kept).split())
    return hashlib.sha256(normalised.encode()).hexdigest()[:16]


def fingerprint(fn: Callable[..., object]) -> str | None:
    """Return the fingerprint of a live function, or ``None`` when its source is unavailable.

    ``functools.cache``/``lru_cache`` and wrapt wrappers are unwrapped through ``__wrapped__``.
    """
    target = inspect.unwrap(fn)
    return _fingerprint_of(getattr(target, "__code__", target))


# Every knobs enter checks the gate; tokenizing its source each time cost ~0.9 ms (H200 bench).
# The code object identifies the source, so the fingerprint is computed once per function.
@functools.cache
def _fingerprint_of(code_or_object: object) -> str | None:
    try:
        return fingerprint_source(inspect.getsource(code_or_object))  # type: ignore[arg-type]
    except (OSError, TypeError):
        return None
