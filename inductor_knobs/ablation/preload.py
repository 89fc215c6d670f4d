"""What the fork server imports (:mod:`.zygote`), and how its imports are proven to carry nothing of a run.

Modules are imported in the order given (``torch`` first), Dynamo and Inductor among them (the compiled
arms need them, and they are seconds of every run's start-up).  Three rules make that safe:

- **The environment a run would read at import is the server's.**  Inductor's and Dynamo's config
  modules read the environment when they are imported (``torch/_inductor/config.py``:
  ``compile_threads = decide_compile_threads()`` reads ``TORCHINDUCTOR_COMPILE_THREADS``, and
  ``torch/utils/_config_module.py`` reads every entry's ``env_name_force``/``env_name_default``); every
  ``os.environ`` read during the imports is recorded with the module whose import read it.  The server
  starts with the runs' shared environment (compile threads included: a value of the whole ablation,
  :func:`.workers.base_env`), and :meth:`.forkserver.ForkServer.spawn` refuses a run whose environment
  differs from the server's in any variable read here, except the reads in :data:`NOT_KEPT`.  The
  parent also refuses a server that read a variable that differs between runs by construction
  (:data:`PER_RUN`) at once.
- **The package's startup hook fires in the run.**  ``inductor_knobs/startup.py`` activates a run's
  ``INDUCTOR_KNOBS_*`` right after its trigger module (``torch._inductor.compile_fx``) is imported; a
  forked child whose zygote had imported it would activate at its first instruction, before the worker
  reads the real SM count for its fingerprint (an emulated GPU reports another) and before the worker
  itself chose to initialise CUDA.  So that one module is :data:`FORBIDDEN`: the run imports it at its
  first compile, and the hook fires there, as in a fresh interpreter.  Everything it imports is
  preloaded through other modules (``torch._inductor.graph`` pulls in the lowering, the scheduler and
  the code generators; ``compile_fx`` itself then takes milliseconds).  The guard raises :class:`Stop`,
  a ``BaseException``, so that no library's ``except ImportError`` fallback can take it for "not
  installed" and remember that; Python removes every module whose import it interrupted from
  ``sys.modules``, and the modules that finished before it stay loaded.
- **Nothing else of the server's survives into a run**: no thread (the zygote counts them), no CUDA
  (torch's own flag, and a probe child that initialises CUDA), no cache directory (torch 2.13
  ``torch/_dynamo/package.py`` builds ``DynamoCache`` at import from ``cache_dir()``, which reads
  ``TORCHINDUCTOR_CACHE_DIR`` and makes that directory, but ``DiskDynamoCache.path_prefix()`` asks
  ``cache_dir()`` again at every use: the value read at import is not kept, see :data:`NOT_KEPT`;
  older torch releases kept it in the object, so the zygote's probe child proves it on the installed
  torch, :func:`not_kept_proof`, and a server where it does not hold is refused).
  What Dynamo and Inductor register at import for later is per process and fork-aware
  (``torch/_inductor/async_compile.py``: an ``atexit`` shutdown of compile-worker pools, of which the
  zygote has none, and a ``register_at_fork`` handler that empties the pool set in every child).

Standard library only.
"""

from __future__ import annotations

import os
import sys
import time
from typing import Any

from ..ext import STARTUP_HOOK_MODULE as HOOK_MODULE
from .kernel_share import DIR_VAR, MANAGER_VAR, SHARED_DIR_VAR

#: Modules a zygote must not import (see the module docstring): the package's startup-hook trigger.
FORBIDDEN = (HOOK_MODULE,)

#: Variables that differ from one run to the next (:func:`.workers.worker_env`): a preloaded module
#: that reads one at import would carry the zygote's value into every run.  The temporary-directory
#: variables are not among them: ``tempfile`` caches its answer, and the child resets that cache.
#: ``TORCHINDUCTOR_COMPILE_THREADS`` is not either: it is the ablation's, the server's too.
PER_RUN = (
    "INDUCTOR_KNOBS_",
    "TORCHINDUCTOR_CACHE_DIR",
    DIR_VAR,
    MANAGER_VAR,
    SHARED_DIR_VAR,
    "CUDA_VISIBLE_DEVICES",
)

#: Variables that are read while a module is imported but whose value is not kept: the variable ->
#: the modules (whose import read it) where that was checked in torch's source.
NOT_KEPT: dict[str, tuple[str, ...]] = {
    # torch/_dynamo/package.py: ``DynamoCache = DiskDynamoCache(os.path.join(cache_dir(), "dynamo"))``,
    # whose ``path_prefix()`` is ``os.path.join(cache_dir(), "dynamo")`` again at every use.
    "TORCHINDUCTOR_CACHE_DIR": ("torch._dynamo.package",),
    # torch/_inductor/runtime/benchmarking.py (2.10, 2.11): ``use_experimental_benchmarker = ... and
    # torch.cuda.is_available()``, which with PYTORCH_NVML_BASED_CUDA_CHECK=1 (every process of an
    # ablation, workers.base_env) counts the visible GPUs through NVML and so reads the variable.  What
    # it keeps is whether any GPU is visible: true for the server (the parent's GPUs) and for every run
    # on a GPU (one of them); on CPU runs the variable is the server's own.
    "CUDA_VISIBLE_DEVICES": ("torch._inductor.runtime.benchmarking",),
    # tempfile.gettempdir() caches its answer in ``tempfile.tempdir``, which every child resets.
    "TMPDIR": ("*",),
    "TEMP": ("*",),
    "TMP": ("*",),
}


def not_kept_proof() -> str:
    """In a forked child of the zygote: check :data:`NOT_KEPT`'s claim on the installed torch, by giving
    this child another cache directory and asking torch where its import-time objects now point.

    Returns:
        str: "" when every object keyed on ``TORCHINDUCTOR_CACHE_DIR`` at import follows the new value
        (or is not loaded), else what did not (the parent then refuses the server).
    """
    import shutil
    import tempfile

    package = sys.modules.get("torch._dynamo.package")
    cache = getattr(package, "DynamoCache", None)
    if cache is None or not callable(getattr(cache, "path_prefix", None)):
        return ""
    directory = tempfile.mkdtemp(prefix="ik-probe-cache-")
    try:
        os.environ["TORCHINDUCTOR_CACHE_DIR"] = directory
        where = str(cache.path_prefix())
    finally:
        shutil.rmtree(directory, ignore_errors=True)
    if where.startswith(os.path.realpath(directory)) or where.startswith(directory):
        return ""
    return f"torch._dynamo.package.DynamoCache kept the server's cache directory ({where}) for every run"


class Stop(BaseException):
    """An import of a :data:`FORBIDDEN` module while preloading (a ``BaseException``: see the module docstring)."""


def forbidden(name: str) -> bool:
    """Whether ``name`` is, or is inside, a :data:`FORBIDDEN` module.

    Args:
        name (str): a module name.

    Returns:
        bool: True for ``torch._inductor.compile_fx``.
    """
    return any(name == f or name.startswith(f + ".") for f in FORBIDDEN)


def kept_reads(readers: dict[str, list[str]]) -> list[str]:
    """The variables whose import-time value may live on in the zygote's modules.

    Args:
        readers (dict[str, list[str]]): variable -> the modules whose import read it (``env_readers``
            of :func:`preload`).

    Returns:
        list[str]: every variable read by a module that :data:`NOT_KEPT` does not name for it.
    """
    out = []
    for key, modules in readers.items():
        allowed = NOT_KEPT.get(key, ())
        if "*" not in allowed and any(m not in allowed for m in modules):
            out.append(key)
    return sorted(out)


class _Guard:
    """A meta-path finder that finds nothing: it raises :class:`Stop` for a forbidden module."""

    def find_spec(self, name: str, path: Any, target: Any = None) -> None:
        if forbidden(name):
            raise Stop(name)


def _importing_module() -> str:
    """The module whose top-level code is running (the innermost ``<module>`` frame), or ``?``."""
    frame = sys._getframe(2)
    while frame is not None:
        if frame.f_code.co_name == "<module>":
            return str(frame.f_globals.get("__name__", "?"))
        frame = frame.f_back  # type: ignore[assignment]
    return "?"


class _Recorder(os._Environ):  # type: ignore[misc,type-arg]
    """``os.environ`` that remembers the keys read through it and by which module's import (the same
    data: writes stay visible)."""

    def __init__(self, original: Any, seen: dict[str, set[str]]) -> None:
        super().__init__(original._data, original.encodekey, original.decodekey, original.encodevalue, original.decodevalue)
        self.seen = seen

    def __getitem__(self, key: str) -> str:
        self.seen.setdefault(key, set()).add(_importing_module())
        return super().__getitem__(key)  # type: ignore[no-any-return]

    def __contains__(self, key: object) -> bool:
        self.seen.setdefault(str(key), set()).add(_importing_module())
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
        seconds), ``new_threads`` (name -> OS threads its import started, where it started any),
        ``env_read`` (every variable read, sorted; :meth:`.forkserver.ForkServer.spawn`
        compares them with each run's), ``env_readers`` (the :data:`PER_RUN` or :data:`NOT_KEPT`
        variables read -> the modules whose import read them) and ``env_kept`` (those of them whose
        value may have been kept, :func:`kept_reads`).
    """
    import importlib

    guard, seen = _Guard(), {}  # type: ignore[var-annotated]
    original = os.environ
    os.environ = _Recorder(original, seen)  # noqa: B003 - the same data, read through a recorder
    sys.meta_path.insert(0, guard)
    out: dict[str, Any] = {"preloaded": [], "stopped": {}, "seconds": {}, "new_threads": {}}
    try:
        for name in modules:
            start, threads = time.perf_counter(), thread_count()
            try:
                importlib.import_module(name)
                out["preloaded"].append(name)
            except Stop as stop:
                out["stopped"][name] = f"imports {stop.args[0]} (from {_importer(stop.__traceback__)})"
            except Exception as err:  # noqa: BLE001 - not installed, or broken: the child imports it itself
                out["stopped"][name] = f"{type(err).__name__}: {err}"
            out["seconds"][name] = round(time.perf_counter() - start, 3)
            if threads is not None and (after := thread_count()) is not None and after > threads:
                out["new_threads"][name] = after - threads  # names the import behind a refusal for threads
    finally:
        sys.meta_path.remove(guard)
        os.environ = original  # noqa: B003 - the object every module saw before
    readers = {k: sorted(v) for k, v in seen.items() if k.startswith(PER_RUN) or k in NOT_KEPT}
    out.update(env_read=sorted(seen), env_readers=readers, env_kept=kept_reads(readers))
    return out


def thread_count() -> int | None:
    """This process's OS threads (``/proc/self/task``).

    Returns:
        int | None: the count, or None without ``/proc``.
    """
    try:
        return len(os.listdir("/proc/self/task"))
    except OSError:
        return None
