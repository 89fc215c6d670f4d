"""Startup hook: activate ``INDUCTOR_KNOBS_*`` in processes that never import inductor_knobs.

``inductor_knobs_startup.pth`` imports this module only when a non-empty ``INDUCTOR_KNOBS_*`` other than
``DISABLE`` is set (and ``DISABLE`` is not).  :func:`bootstrap` runs :func:`start_up` once ``site`` has put every
site directory on ``sys.path`` (its ``sitecustomize`` import, or the first ``import torch``), and :func:`activate`
right after ``torch._inductor.compile_fx`` has executed: a process that never compiles imports neither torch nor
wrapt.  Nothing here raises into an ``import``: a bad variable is one stderr line, raised at the first compile.

Inductor's own child processes (its compile workers and autotune subprocess, started as scripts under
``torch/_inductor/``: ``compile_worker/__main__.py`` in 2.4.1 and 2.13.0) inherit the variables and run the hook too;
their parent has said the start-up lines already, so they say nothing (on torch 2.4-2.8 importing Inductor starts
such a pool at once, and a bad variable was said twice).
"""

import sys

TYPE_CHECKING = False  # not typing's: see inductor_knobs/__init__.py
if TYPE_CHECKING:
    from typing import Any

HOOK_MODULE = "torch._inductor.compile_fx"
_registered = False
#: The module whose code has run while activation runs inside its import (core/patching.py initializing).
executed = None


def bootstrap() -> None:
    """Arrange activation right after ``torch._inductor.compile_fx`` is imported; idempotent."""
    global _registered
    if _registered:  # the .pth can run twice when a directory is on sys.path twice
        return
    _registered = True
    sys.meta_path.insert(0, _AtSiteEnd())
    if HOOK_MODULE in sys.modules:
        activate()
    else:
        sys.meta_path.insert(0, _AfterImport())


class _AtSiteEnd:
    """A meta-path finder that finds nothing: it runs :func:`start_up` at the first import of one of ``NAMES``."""

    NAMES = ("sitecustomize", "torch")

    def find_spec(self, name: str, path: "Any", target: "Any" = None) -> "Any":
        if name in self.NAMES:
            sys.meta_path.remove(self)  # one shot
            start_up()
        return None


class _AfterImport:
    """A meta-path finder that finds nothing itself: it wraps the real loader of ``HOOK_MODULE``."""

    def find_spec(self, name: str, path: "Any", target: "Any" = None) -> "Any":
        if name != HOOK_MODULE:
            return None
        sys.meta_path.remove(self)  # one shot, and the search below must not find us again
        for finder in sys.meta_path:
            find = getattr(finder, "find_spec", None)
            spec = find(name, path, target) if find is not None else None
            if spec is not None and spec.loader is not None:
                spec.loader = _ActivatingLoader(spec.loader)
                return spec
        return None


class _ActivatingLoader:
    """The real loader, plus :func:`activate` once the module has executed."""

    def __init__(self, loader: "Any") -> None:
        self._loader = loader

    def create_module(self, spec: "Any") -> "Any":
        return self._loader.create_module(spec)

    def exec_module(self, module: "Any") -> None:
        global executed
        self._loader.exec_module(module)
        # importlib marks it as importing until this returns: patching.initializing() reads `executed`, so
        # activation's hooks install now.  Other importers wait on the import lock: no compile starts before the end.
        executed = module
        try:
            activate()
        finally:
            executed = None

    def __getattr__(self, name: str) -> "Any":  # get_source, get_filename, … for tracebacks and tools
        return getattr(self._loader, name)


def start_up() -> None:
    """Run :func:`inductor_knobs.env.start_up`; its lines, or why it failed, go to stderr; never raises."""
    try:
        from .env import start_up as env_start_up

        try:
            lines = env_start_up()
        except Exception as err:  # noqa: BLE001 - a bad variable: said now, nothing set, the first compile raises it
            lines = [f"{err} (nothing applied)"]
    except Exception as err:  # noqa: BLE001 - the last resort: one line, and the process goes on
        lines = [f"INDUCTOR_KNOBS_* not checked at start-up: {err} (INDUCTOR_KNOBS_DISABLE=1 turns this off)"]
    if _inductor_child():  # its parent said them
        return
    for line in lines:
        try:
            print(f"inductor_knobs: {line}", file=sys.stderr)
        except Exception:  # noqa: BLE001 - no usable stderr
            pass


def _inductor_child() -> bool:
    """Whether this interpreter runs a script of torch's Inductor (``python .../torch/_inductor/...``): one of its child
    processes, whose parent has said the start-up lines."""
    script = (sys.argv[0] if getattr(sys, "argv", None) else "").replace("\\", "/")
    return "/torch/_inductor/" in script


def activate() -> None:
    """Apply the variables (``activate_from_env``); an error is deferred to the first compile, never raised here."""
    try:
        from .env import activate_from_env

        try:
            activate_from_env()
        except Exception as err:  # noqa: BLE001 - surfaced at the first compile instead
            from .core import torch_compat
            from .core.interception import raise_at_first_compile

            raise_at_first_compile(err, torch_compat.installed(strict=False))
    except Exception as err:  # noqa: BLE001 - the last resort: one line, and torch stays usable
        print(f"inductor_knobs: INDUCTOR_KNOBS_* not applied: {err} (INDUCTOR_KNOBS_DISABLE=1 turns this off)", file=sys.stderr)
