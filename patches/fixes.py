"""Bugs of some torch releases (most fixed in a later release), and the fix inductor_knobs applies while it warms.

Each era module sets the ``*_fix_by_release`` tables; :mod:`inductor_knobs.serving.torch_fixes` applies the fixes:
- Coordinate-descent results ignored on a warm cache (pytorch#172819, fixed by pytorch#173391 in 2.12):
  ``_inductor/runtime/triton_heuristics.py:CachingAutotuner.recheck_autotune_cache`` (2.8.0 :351, 2.9.1 :391,
  2.10.0 :386, 2.11.0 :445; called from ``codecache.py:StaticAutotunerFuture``, 2.11.0 :4381) ignores a one-config
  hit and keeps a cached winner without ``found_by_coordesc``, so ``CachingAutotuner.run`` tunes it again on every
  warm load (H100, 2.11.0: 5 kernels of a 2-layer Llama).  Fixed in 2.12.0 (:471-479) and 2.14.1; absent before 2.8.
- A child ``python -c "import torch ..."`` per CPU vector-ISA probe (pytorch#140970, fixed by pytorch#183515 in
  2.13): ``_inductor/cpu_vec_isa.py:VecISA.check_build`` (2.12.1 :128) loads each dry-compiled probe library in a
  fresh interpreter that imports torch first (``VecISA._avx_py_load``, 2.12.1 :72), 3-5 s apiece.  Inductor probes
  every ISA the CPU lists on an empty cache, and an AOTInductor build probes for its C++ wrapper: ten children,
  37.9-39.9 s of a 78-84 s first build of the Llama bundle (H200 host, 2.11.0).  2.13.0 (:90) loads the library
  without importing torch, torch's ``lib`` directory first on the child's ``LD_LIBRARY_PATH``.  The fix
  (:func:`vec_isa_probe`) loads torch's own libraries by path, then the probe, and imports torch only where that
  fails, so the verdict is the older check's (``bench/isa_probe.py`` compares the loads per probe).  2.5-2.12
  (2.4 keeps ``VecISA`` in ``codecache.py`` and is left as it is); Linux wheels (elsewhere the child imports torch).
- A coordinate-descent winner read in a compile worker is tuned again in the parent (no release fixes it; 2.8.0,
  2.10.0, 2.11.0, 2.13.0 and 2.15.0 checked).  The worker's ``check_autotune_cache`` returns the cached winner with
  ``found_by_coordesc`` set on the ``triton.Config`` (``runtime/autotune_cache.py:_load_cached_autotuning``), and
  ``_worker_compile_triton`` (``runtime/compile_tasks.py``, 2.11.0 :54) pickles the kernel back with its
  ``TritonCompileResult.config``.  Triton's ``Config.__setstate__`` (3.x, ``triton/runtime/autotuner.py``) restores
  only Triton's own fields, so the parent's ``CachingAutotuner.run`` (2.11.0 :1450) sees no ``found_by_coordesc``
  and runs the descent again from the winner: 9 kernels, 11.3 s of a 28.8 s second AOT build of the Llama whose
  every entry was cached (H200, 2.11.0; with the fix no descent and 22.8-24.2 s).  The fix
  (:func:`keep_found_by_coordesc`) wraps ``Config.__setstate__`` to restore that attribute where the pickled state
  has it.
"""

from __future__ import annotations

import dataclasses
import os
import sys
from typing import Any, ClassVar

from .release_tables import by_release

#: Where the method lives (a ``module:Class.attr`` path for :func:`inductor_knobs.core.patching.wrap_attribute`).
RECHECK_PATH = "torch._inductor.runtime.triton_heuristics:CachingAutotuner.recheck_autotune_cache"
#: The probe child's script (for :func:`inductor_knobs.core.patching.replace_attribute`); its text in 2.4-2.12.
VEC_ISA_PROBE_PATH = "torch._inductor.cpu_vec_isa:VecISA._avx_py_load"
VEC_ISA_PROBE_BEFORE = '\nimport torch\nfrom ctypes import cdll\ncdll.LoadLibrary("__lib_path__")\n'
#: Triton's ``Config.__setstate__`` (Triton 3.x; ``triton.Config`` is this class).
CONFIG_SETSTATE_PATH = "triton.runtime.autotuner:Config.__setstate__"


@dataclasses.dataclass(frozen=True)
class Replacement:
    """A fix that sets data in place of a release's attribute, only where it still holds ``replaces``."""

    value: Any
    replaces: Any


class TorchFixes:
    """Which releases need which fix, and the fix itself."""

    #: Per minor release: whether ``recheck_autotune_cache`` needs 2.12's fix.
    coordesc_recheck_fix_by_release: ClassVar[dict[str, bool]]
    #: Per minor release: whether each vector-ISA probe's child imports torch (2.13's fix).
    vec_isa_probe_fix_by_release: ClassVar[dict[str, bool]]
    #: Per minor release: whether compile workers pickle kernels back, losing ``found_by_coordesc``.
    coordesc_pickle_fix_by_release: ClassVar[dict[str, bool]]

    def fixes(self, release: str) -> tuple[tuple[str, Any], ...]:
        """The fixes torch ``release`` (``"2.11"``) needs: ``(module:Class.attr path, fix)`` pairs, the fix a wrapt
        wrapper of a function or a :class:`Replacement`.  Reads ``torch.__file__`` where the probe fix applies
        (torch imported already)."""
        found: list[tuple[str, Any]] = []
        if by_release(self.coordesc_recheck_fix_by_release, release):
            found.append((RECHECK_PATH, recheck_autotune_cache))
        if by_release(self.vec_isa_probe_fix_by_release, release):
            lib = os.path.join(os.path.dirname(sys.modules["torch"].__file__ or ""), "lib")
            found.append((VEC_ISA_PROBE_PATH, Replacement(vec_isa_probe(lib), VEC_ISA_PROBE_BEFORE)))
        if by_release(self.coordesc_pickle_fix_by_release, release):
            found.append((CONFIG_SETSTATE_PATH, keep_found_by_coordesc))
        return tuple(found)


def vec_isa_probe(lib: str) -> str:
    """The child's script for a vector-ISA probe (``__lib_path__`` is the probe library, as torch's): load torch's
    ``libgomp``, ``libc10``, ``libtorch_cpu`` and ``libtorch`` from ``lib`` by path (those present: Linux wheels;
    by path first, so that no other libtorch on the loader's path stands in), then the probe; where that fails,
    ``import torch`` and load it again, as torch 2.5-2.12 do."""
    libraries = [os.path.join(lib, name) for name in ("libgomp.so.1", "libc10.so", "libtorch_cpu.so", "libtorch.so")]
    return (
        "\nimport ctypes\nimport os\n"
        "try:\n"
        f"    for library in {libraries!r}:\n"
        "        if os.path.exists(library):\n"
        "            ctypes.CDLL(library, mode=ctypes.RTLD_GLOBAL)\n"
        '    ctypes.cdll.LoadLibrary("__lib_path__")\n'
        "except OSError:\n"
        "    import torch\n"
        '    ctypes.cdll.LoadLibrary("__lib_path__")\n'
    )


def recheck_autotune_cache(wrapped: Any, instance: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> None:
    """torch 2.12's ``CachingAutotuner.recheck_autotune_cache`` in place of 2.8-2.11's (a wrapt wrapper; the
    original is not called): keeps the cached winner with the cache's ``found_by_coordesc``, even for one config."""
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


def keep_found_by_coordesc(wrapped: Any, instance: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
    """Triton's ``Config.__setstate__``, then Inductor's ``found_by_coordesc`` put back where the pickled state has
    it (a wrapt wrapper): a compile worker's cached coordinate-descent winner stays one in the parent."""
    result = wrapped(*args, **kwargs)
    state = args[0] if args else kwargs.get("state")
    if isinstance(state, dict) and state.get("found_by_coordesc"):
        instance.found_by_coordesc = True
    return result
