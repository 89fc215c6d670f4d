"""Coordinate descent's candidate configs compiled ahead, side by side, in Inductor's compile workers.

Facts (``torch/`` relative; 2.11.0 and 2.13.0 wheels):
- ``_inductor/runtime/triton_heuristics.py:CachingAutotuner._coordinate_descent_tuning(launcher, *args, **kwargs)``
  (2.9+; the public ``coordinate_descent_tuning`` checks eligibility around it) benchmarks one candidate config at a
  time, and compiles each first in the calling process, one after another (``_precompile_config(config)
  .make_launcher()`` under ``self.lock``): a Triton compile and a ``ptxas`` run per candidate, about 0.3 s apiece, 64 of
  them and 20.8 s of a 41.4 s AOT build of the Llama (H200, 2.11.0).
- ``_inductor/runtime/coordinate_descent_tuner.py:CoordescTuner``: ``tunable_fields``, ``get_neighbour_values(name,
  value)`` (one step each way), ``is_valid_config``; ``get_field``/``set_field``.  Its ``autotune`` walks one field at a
  time from the starting config (Gauss-Seidel), so the first sweep tries the start's one-step neighbours.
- ``_inductor/async_compile.py:AsyncCompile.use_process_pool()`` (the pool started and ready) and ``process_pool()
  .submit(fn, *args)``.  A worker compiles a kernel's configs with ``precompile(warm_cache_only=True)`` on the kernel
  ``getattr(PyCodeCache.load(source), name)`` (``_load_triton_kernel_from_source``: ``async_compile.py`` in 2.11,
  ``runtime/compile_tasks.py`` in 2.13), after ``runtime/compile_tasks.py:_worker_compile_triton`` sets torch's
  ``ptxas`` and the calling process's ``TORCHINDUCTOR_CACHE_DIR``, ``TRITON_CACHE_DIR`` and ``TRITON_LIBDEVICE_PATH``
  (its signature differs by release: 2.11 ``(load_kernel, extra_env, extra_config)``, later a streaming address too);
  the calling process's own compile of the same config then loads Triton's cache entry.

:func:`compile_ahead` compiles the start's one-step neighbours and their own one-step neighbours in the workers
before the descent begins, so that the descent's compiles are Triton cache hits; it changes nothing the descent
measures or chooses, and a failure of any of it leaves the descent to compile as it would have.
"""

from __future__ import annotations

import concurrent.futures
import contextlib
import copy
import logging
import os
from collections.abc import Iterator
from typing import Any, ClassVar

from .release_tables import by_release

log = logging.getLogger(__name__)

#: The descent's own method (``module:Class.attr`` for :func:`inductor_knobs.core.patching.wrap_attribute`).
DESCENT_PATH = "torch._inductor.runtime.triton_heuristics:CachingAutotuner._coordinate_descent_tuning"
#: The variables a worker's compile needs to write where the calling process looks (as ``AsyncCompile.triton``).
WORKER_ENV = ("TORCHINDUCTOR_CACHE_DIR", "TRITON_CACHE_DIR", "TRITON_LIBDEVICE_PATH")
#: Triton's ``ptxas`` variable: a worker sets it to torch's ``ptxas`` (``compile_tasks._set_triton_ptxas_path``), the
#: calling process may not, and the ``ptxas`` version is part of Triton's cache key (the NVIDIA backend's hash).
PTXAS_VARIABLE = "TRITON_PTXAS_PATH"
#: Seconds the descent waits for the compiles it asked for, at most; then it goes on and compiles what it lacks.
WAIT_S = 120.0


class TorchDescent:
    """Which releases compile coordinate descent's candidates ahead."""

    #: Per minor release: whether :func:`compile_ahead` applies (the facts above hold).
    descent_ahead_by_release: ClassVar[dict[str, bool]]

    def descent_ahead(self, release: str) -> bool:
        """Whether torch ``release`` (``"2.11"``) gets :func:`compile_ahead` around its descent."""
        return bool(by_release(self.descent_ahead_by_release, release))


def compile_ahead(wrapped: Any, instance: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
    """A wrapt wrapper of ``CachingAutotuner._coordinate_descent_tuning(launcher, ...)``: compile the candidates the
    descent is likely to try (:func:`candidates`) in Inductor's compile workers and wait for them (at most
    :data:`WAIT_S`), then run the descent.  Where there is no ready worker pool, or anything of it fails, the descent
    runs as torch's own."""
    launcher = args[0] if args else kwargs["launcher"]
    try:
        futures = _submit(instance, launcher.config)
    except Exception as err:  # noqa: BLE001 - the descent compiles what it lacks: a compile ahead never fails it
        log.debug("coordinate descent: no compiles ahead (%s)", err)
        futures = []
    if futures:
        from torch._dynamo.utils import counters

        done, late = concurrent.futures.wait(futures, timeout=WAIT_S)
        failed = [future.exception() for future in done if future.exception() is not None]
        counters["inductor"]["coordesc_ahead_compiles"] += len(futures)
        counters["inductor"]["coordesc_ahead_failed"] += len(failed)
        counters["inductor"]["coordesc_ahead_late"] += len(late)
        if failed:  # a config that does not compile fails the descent's own try of it the same way
            log.debug("coordinate descent: %d of %d compiles ahead failed, the first: %r", len(failed), len(futures), failed[0])
    return wrapped(*args, **kwargs)


def candidates(tuner: Any, start: Any) -> list[Any]:
    """The configs a ``CoordescTuner`` ``tuner`` starting from config ``start`` tries in its first sweep (each tunable
    field one step each way) and those one step from each of them: distinct, valid, ``start`` left out."""
    from torch._inductor.runtime.coordinate_descent_tuner import get_field
    from torch._inductor.runtime.runtime_utils import triton_config_to_hashable

    seen = {triton_config_to_hashable(start)}
    found: list[Any] = []

    def neighbours(config: Any) -> list[Any]:
        out = []
        for field in tuner.tunable_fields:
            value = get_field(config, field)
            if value is None:
                continue
            for step in tuner.get_neighbour_values(field, value):
                candidate = _with(config, field, step)
                key = triton_config_to_hashable(candidate)
                if key in seen or not tuner.is_valid_config(candidate):
                    continue
                seen.add(key)
                out.append(candidate)
        return out

    first = neighbours(start)
    found.extend(first)
    for config in first:
        found.extend(neighbours(config))
    return found


def _with(config: Any, field: str, value: Any) -> Any:
    from torch._inductor.runtime.coordinate_descent_tuner import set_field

    candidate = copy.deepcopy(config)
    set_field(candidate, field, value)
    return candidate


def _submit(instance: Any, start: Any) -> list[Any]:
    """Submit one worker compile per candidate of ``instance`` (a ``CachingAutotuner``) from ``start``; none where
    Inductor's process pool is not started and ready, or the kernel's source file is not there."""
    import torch
    from torch._inductor.async_compile import AsyncCompile

    if not AsyncCompile.use_process_pool():
        return []
    name = instance.inductor_meta.get("kernel_name")
    if not name or not instance.filename or not os.path.isfile(instance.filename):
        return []
    with open(instance.filename, encoding="utf-8") as source_file:
        source = source_file.read()
    env = {variable: os.environ[variable] for variable in (*WORKER_ENV, PTXAS_VARIABLE) if variable in os.environ}
    extra_config = {"use_static_triton_launcher": torch._inductor.config.use_static_triton_launcher}
    pool = AsyncCompile.process_pool()
    wanted = candidates(instance.coordesc_tuner, start)
    backend_hash = _own_backend_hash(instance)
    return [pool.submit(compile_config, name, source, config, env, extra_config, backend_hash) for config in wanted]


def _own_backend_hash(instance: Any) -> tuple[Any, str] | None:
    """This process's Triton backend hash for ``instance``'s target, with the target (``_precompile_config``'s
    ``GPUTarget(type, cc, warp size)``); None where it cannot be had (the worker then computes its own)."""
    try:
        from triton.backends.compiler import GPUTarget
        from triton.compiler.compiler import make_backend

        props = instance.device_props
        warp_size = getattr(props, "warp_size_or_default", None) or getattr(props, "warp_size", None) or 32
        target = GPUTarget(props.type, props.cc, warp_size)
        return target, make_backend(target).hash()
    except Exception as err:  # noqa: BLE001 - older Triton or torch: no substitute hash
        log.debug("coordinate descent: no backend hash to give the workers (%r)", err)
        return None


def compile_config(
    name: str, source: str, config: Any, env: dict[str, str], extra_config: dict[str, Any], backend_hash: tuple[Any, str] | None
) -> None:
    """In a compile worker: compile kernel ``name`` of module text ``source`` for one ``config`` into Triton's cache,
    in the worker's setting for a kernel's own configs (``_worker_compile_triton``: torch's ``ptxas``, the calling
    process's cache and libdevice variables, ``extra_config`` patched in)."""
    from torch._inductor import config as inductor_config
    from torch._inductor.codecache import PyCodeCache
    from torch._inductor.runtime import compile_tasks

    getattr(compile_tasks, "_set_triton_ptxas_path", lambda: None)()  # as the worker's own compiles find it
    os.environ.update({key: value for key, value in env.items() if key in WORKER_ENV})
    if "TRITON_LIBDEVICE_PATH" in env:
        from triton import knobs

        knobs.nvidia.libdevice_path = env["TRITON_LIBDEVICE_PATH"]
    # The calling process's ptxas, not the worker's (torch's own): its version is part of Triton's cache key.
    kept = os.environ.get(PTXAS_VARIABLE)
    _set_variable(PTXAS_VARIABLE, env.get(PTXAS_VARIABLE))
    try:
        with inductor_config.patch(extra_config), _backend_hash(backend_hash):
            kernel = getattr(PyCodeCache.load(source), name)
            kernel.configs = [config]
            kernel.compile_results = []
            kernel.precompile(warm_cache_only=True)
    finally:
        _set_variable(PTXAS_VARIABLE, kept)


@contextlib.contextmanager
def _backend_hash(wanted: tuple[Any, str] | None) -> Iterator[None]:
    """Triton's backend hash, part of its cache key, as the calling process computes it for the kernel's target
    (``wanted``: the target and that hash).  The NVIDIA backend's hash holds the ``ptxas`` version it found at its
    first compile in the process (cached), which in a process that compiled before torch set ``TRITON_PTXAS_PATH``
    is the version of Triton's own ``ptxas``, not of the one its compiles now run; the worker set torch's before its
    first.  The calling process's ``ptxas`` (the variable, set above) builds the same binary either way."""
    if wanted is None:
        yield
        return
    from triton.compiler.compiler import make_backend

    target, value = wanted
    backend_class = type(make_backend(target))
    original = backend_class.hash
    backend_class.hash = lambda self: value if self.target == target else original(self)  # type: ignore[method-assign]
    try:
        yield
    finally:
        backend_class.hash = original  # type: ignore[method-assign]


def _set_variable(name: str, value: str | None) -> None:
    if value is None:
        os.environ.pop(name, None)
    else:
        os.environ[name] = value
