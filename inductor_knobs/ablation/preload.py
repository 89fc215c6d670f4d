"""What the fork server imports (:mod:`.zygote`), and what it must not.

Modules are imported in the order given (``torch`` first), each under a guard that stops any import
of ``torch._dynamo`` or ``torch._inductor`` (:data:`FORBIDDEN`): their config modules read the
environment when they are imported (``torch/_inductor/config.py``: ``compile_threads =
decide_compile_threads()`` reads ``TORCHINDUCTOR_COMPILE_THREADS``; ``torch/utils/_config_module.py``
reads every entry's ``env_name_force``/``env_name_default`` at install), so a run must import them
itself, after its own environment is in place.  The guard raises :class:`Stop`, a ``BaseException``,
so that no library's ``except ImportError`` fallback can take it for "not installed" and remember
that; Python removes every module whose import it interrupted from ``sys.modules``, and the modules
that finished before it stay loaded.  (transformers' BERT modeling module imports ``torch._dynamo``
through ``transformers.masking_utils`` on transformers 5.17: it stops there, after most of
transformers has been imported.)  Every ``os.environ`` read during the imports is recorded, and the
parent refuses a server that read a variable that differs between runs (:data:`PER_RUN`).
Standard library only.
"""

from __future__ import annotations

import os
import sys
import time
from typing import Any

#: Modules a zygote must not import (see the module docstring).
FORBIDDEN = ("torch._dynamo", "torch._inductor")

#: Variables that differ from one run to the next (:func:`.workers.worker_env`): a preloaded module
#: that reads one at import would carry the zygote's value into every run.  The temporary-directory
#: variables are not among them: ``tempfile`` caches its answer, and the child resets that cache.
PER_RUN = (
    "INDUCTOR_KNOBS_",
    "TORCHINDUCTOR_CACHE_DIR",
    "TRITON_CACHE_DIR",
    "TORCHINDUCTOR_COMPILE_THREADS",
    "CUDA_VISIBLE_DEVICES",
)


class Stop(BaseException):
    """An import of a :data:`FORBIDDEN` module while preloading (a ``BaseException``: see the module docstring)."""


def forbidden(name: str) -> bool:
    """Whether ``name`` is, or is inside, a :data:`FORBIDDEN` module.

    Args:
        name (str): a module name.

    Returns:
        bool: True for ``torch._dynamo``, ``torch._inductor.config``, ...
    """
    return any(name == f or name.startswith(f + ".") for f in FORBIDDEN)


class _Guard:
    """A meta-path finder that finds nothing: it raises :class:`Stop` for a forbidden module."""

    def find_spec(self, name: str, path: Any, target: Any = None) -> None:
        if forbidden(name):
            raise Stop(name)


class _Recorder(os._Environ):  # type: ignore[misc,type-arg]
    """``os.environ`` that remembers the keys read through it (the same data: writes stay visible)."""

    def __init__(self, original: Any, seen: set[str]) -> None:
        super().__init__(original._data, original.encodekey, original.decodekey, original.encodevalue, original.decodevalue)
        self.seen = seen

    def __getitem__(self, key: str) -> str:
        self.seen.add(key)
        return super().__getitem__(key)  # type: ignore[no-any-return]

    def __contains__(self, key: object) -> bool:
        self.seen.add(str(key))
        return super().__contains__(key)

    # A scan of every variable (tqdm looks for its ``TQDM_*`` ones) names none: not counted as reads.
    def items(self) -> Any:
        return [(self.decodekey(k), self.decodevalue(v)) for k, v in self._data.items()]  # type: ignore[attr-defined]

    def values(self) -> Any:
        return [self.decodevalue(v) for v in self._data.values()]  # type: ignore[attr-defined]

    def copy(self) -> dict[str, str]:
        return dict(self.items())


def _importer(tb: Any) -> str:
    """The module whose code asked for the forbidden import (the innermost frame outside importlib)."""
    found = "?"
    while tb is not None:
        name = tb.tb_frame.f_globals.get("__name__", "?")
        if not name.startswith(("importlib", __name__)):
            found = name
        tb = tb.tb_next
    return found


def preload(modules: list[str]) -> dict[str, Any]:
    """Import ``modules`` under the guard, recording the environment variables read.

    Args:
        modules (list[str]): module names, in order.

    Returns:
        dict[str, Any]: ``preloaded`` (names), ``stopped`` (name -> why), ``seconds`` (name -> import
        seconds), ``env_read`` (the :data:`PER_RUN` or temporary-directory variables read).
    """
    import importlib

    guard, seen = _Guard(), set()  # type: ignore[var-annotated]
    original = os.environ
    os.environ = _Recorder(original, seen)  # noqa: B003 - the same data, read through a recorder
    sys.meta_path.insert(0, guard)
    out: dict[str, Any] = {"preloaded": [], "stopped": {}, "seconds": {}}
    try:
        for name in modules:
            start = time.perf_counter()
            try:
                importlib.import_module(name)
                out["preloaded"].append(name)
            except Stop as stop:
                out["stopped"][name] = f"imports {stop.args[0]} (from {_importer(stop.__traceback__)})"
            except Exception as err:  # noqa: BLE001 - not installed, or broken: the child imports it itself
                out["stopped"][name] = f"{type(err).__name__}: {err}"
            out["seconds"][name] = round(time.perf_counter() - start, 3)
    finally:
        sys.meta_path.remove(guard)
        os.environ = original  # noqa: B003 - the object every module saw before
    out["env_read"] = sorted(k for k in seen if k.startswith(PER_RUN) or k in ("TMPDIR", "TEMP", "TMP"))
    return out
