"""Startup hook: activate ``INDUCTOR_KNOBS_*`` in processes that never import inductor_knobs.

The installed ``inductor_knobs_startup.pth`` runs one line at interpreter start.  It checks the
environment first and imports this module only when an ``INDUCTOR_KNOBS_*`` variable other than
``INDUCTOR_KNOBS_DISABLE`` has a non-empty value (and ``INDUCTOR_KNOBS_DISABLE`` is not set), so an
unconfigured process pays for one scan of ``os.environ`` and imports nothing.

At interpreter start, once ``site`` has put every site directory on ``sys.path`` (at its import of
``sitecustomize``, which ``site.main`` always tries after the ``.pth`` files; or at the first ``import torch``
if that comes first), :func:`start_up` checks the variables (what can be checked without torch: every
name and value but ``config=`` keys) and sets the environment variables of the process settings torch reads
at or before its first CUDA call (:func:`inductor_knobs.env.start_up`: ``TORCH_CUDNN_SDPA_AVOID_RECOMPILE``
from ``INDUCTOR_KNOBS_CUDNN_SDPA_AVOID_RECOMPILE``), so that a process whose CUDA starts before its first
compile, or that never compiles, runs with them.  (While this ``.pth`` runs, site directories after its own,
such as a virtual environment's system site-packages, are not on ``sys.path`` yet: torch's metadata and
this package's dependencies may not be found.)  :func:`bootstrap` also puts a one-shot finder on
``sys.meta_path`` that runs :func:`activate` right after ``torch._inductor.compile_fx`` (Inductor's compile
entry, which imports ``torch._inductor.utils`` and ``config``) has executed.  A process that never compiles
(pip, a shell tool in a launch script) therefore imports neither torch nor wrapt (only this package's light
modules).

Nothing here ever raises into the user's ``import``: a bad variable is said at start, as one line on stderr
naming the variable, the value, what is allowed, the torch version and ``INDUCTOR_KNOBS_DISABLE=1``, with
nothing applied; it is kept and raised at the first Inductor compile (and by an explicit
``activate_from_env()``), once.
"""

import sys

TYPE_CHECKING = False  # not typing's: see inductor_knobs/__init__.py
if TYPE_CHECKING:
    from typing import Any

HOOK_MODULE = "torch._inductor.compile_fx"
_registered = False
#: The module whose code has run while activation runs inside its import (for core/patching.initializing).
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
        # Its code has run, though importlib still marks it as being imported until this returns: the hooks
        # activation installs on it (core/patching.py on_import reads `executed`) install now.  Other
        # importers keep waiting for the import lock, so no compile starts before activation ends.
        executed = module
        try:
            activate()
        finally:
            executed = None

    def __getattr__(self, name: str) -> "Any":  # get_source, get_filename, … for tracebacks and tools
        return getattr(self._loader, name)


def start_up() -> None:
    """Run :func:`inductor_knobs.env.start_up`; its lines, or why it failed, go to stderr, and nothing is raised."""
    try:
        from .env import start_up as env_start_up

        try:
            lines = env_start_up()
        except Exception as err:  # noqa: BLE001 - a bad variable: said now, nothing set, the first compile raises it
            lines = [f"{err} (nothing applied)"]
    except Exception as err:  # noqa: BLE001 - the last resort: one line, and the process goes on
        lines = [f"INDUCTOR_KNOBS_* not checked at start-up: {err} (INDUCTOR_KNOBS_DISABLE=1 turns this off)"]
    for line in lines:
        try:
            print(f"inductor_knobs: {line}", file=sys.stderr)
        except Exception:  # noqa: BLE001 - no usable stderr
            pass


def activate() -> None:
    """Apply the variables (``activate_from_env``); an error is deferred to the first compile, never raised here."""
    try:
        from .env import activate_from_env, defer_error

        try:
            activate_from_env()
        except Exception as err:  # noqa: BLE001 - surfaced at the first compile instead
            defer_error(err)
    except Exception as err:  # noqa: BLE001 - the last resort: one line, and torch stays usable
        print(f"inductor_knobs: INDUCTOR_KNOBS_* not applied: {err} (INDUCTOR_KNOBS_DISABLE=1 turns this off)", file=sys.stderr)
