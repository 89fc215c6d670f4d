"""Bugs of some torch releases that a later release fixed, and the fix inductor_knobs applies while it warms.

A base module of :mod:`inductor_knobs.patches.torch_2_4` (``_``-prefixed: no ``PATCHES``, so
:func:`inductor_knobs.core.torch_compat.all_patch_modules` skips it).  Each era module sets the
``*_fix_by_release`` tables; :mod:`inductor_knobs.serving.torch_fixes` holds the steps while
``ik.serving.warmup`` and ``ik.serving.load_serving_bundle`` run.

- **Coordinate-descent results ignored on a warm cache** (pytorch#172819, fixed by pytorch#173391 in
  2.12).  When the FX graph cache serves a graph, its statically launchable Triton kernels come back
  as the compile-time list of configs, and ``CachingAutotuner.recheck_autotune_cache``
  (``_inductor/runtime/triton_heuristics.py``: 2.8.0 :351, 2.9.1 :391, 2.10.0 :386, 2.11.0 :445; called
  from ``codecache.py`` ``StaticAutotunerFuture``, 2.11.0 :4381) asks the autotune cache for the
  winner.  In 2.8-2.11 it ignores a hit when the kernel has one config (``len(configs) > 1``), and
  when the winner is one of the compiled configs it keeps that config without marking it
  ``found_by_coordesc``; ``CachingAutotuner.run`` then tunes the kernel again by coordinate descent
  (benchmarks and a Triton compile per candidate) on every warm load.  Measured on an H100 (torch
  2.11.0, triton 3.6.0): 5 kernels of a 2-layer Llama tuned again in a process on warm caches and in
  one loading a serving bundle.  2.12.0 and 2.14.1 have the fix (2.12.0 :471-479); 2.7 and older
  have no ``recheck_autotune_cache``.  The replacement is 2.12's body.
"""

from __future__ import annotations

from typing import Any, ClassVar

from .release_tables import by_release

#: Where the method lives (a ``module:Class.attr`` path for :func:`inductor_knobs.core.patching.wrap_attribute`).
RECHECK_PATH = "torch._inductor.runtime.triton_heuristics:CachingAutotuner.recheck_autotune_cache"


class TorchFixes:
    """Which releases need which fix, and the fix itself (see the module docstring)."""

    #: Per minor release: whether ``recheck_autotune_cache`` needs 2.12's fix.
    coordesc_recheck_fix_by_release: ClassVar[dict[str, bool]]

    def fixes(self, release: str) -> tuple[tuple[str, Any], ...]:
        """The fixes torch ``release`` (``"2.11"``) needs: ``(module:Class.attr path, wrapt wrapper)`` pairs."""
        if by_release(self.coordesc_recheck_fix_by_release, release):
            return ((RECHECK_PATH, recheck_autotune_cache),)
        return ()


def recheck_autotune_cache(wrapped: Any, instance: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> None:
    """torch 2.12's ``CachingAutotuner.recheck_autotune_cache`` in place of 2.8-2.11's (a wrapt wrapper; the
    original is not called).  Keeps the cached winner, marked ``found_by_coordesc`` as the cache says, even
    for a kernel with one config; compiles the winner only when coordinate descent found it and it is not
    among the compiled configs (as 2.11 does)."""
    from torch._inductor.runtime.triton_heuristics import check_autotune_cache, triton_config_to_hashable

    reload_kernel_from_src = args[0] if args else kwargs["reload_kernel_from_src"]
    configs = [result.config for result in instance.compile_results]
    cached, _, info = check_autotune_cache(configs, instance.filename, instance.inductor_meta)
    instance.autotune_cache_info = info
    if len(cached) != 1 or info.get("autotune_cache_state") != "hit":
        return
    best = cached[0]
    found_by_coordesc = getattr(best, "found_by_coordesc", False)
    key = triton_config_to_hashable(best)
    for result in instance.compile_results:
        if triton_config_to_hashable(result.config) == key:
            result.config.found_by_coordesc = found_by_coordesc
            instance.compile_results = [result]
            return
    if found_by_coordesc:  # found at run time, after the FX graph cache saved the compiled configs
        if instance.fn.fn is None:
            instance.fn = reload_kernel_from_src().fn
        instance.compile_results = [instance._precompile_config(best)]
