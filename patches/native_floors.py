"""torch's own floors under a knob or a guard: the recompile stance, Inductor's deterministic mode, ignored config keys.

A base module of :mod:`inductor_knobs.patches.torch_2_4` (``_``-prefixed: no ``PATCHES``, so
:func:`inductor_knobs.core.torch_compat.all_patch_modules` skips it).  Facts, checked in the release wheels'
sources (``torch/`` relative; IC = ``_inductor/config.py``):

- ``torch.compiler.set_stance``: defined at ``compiler/__init__.py`` 2.10 :261, 2.13 :298, 2.14 :390, 2.15 :390,
  with ``"fail_on_recompile"`` among its stances (2.10 :305, 2.13 :342, 2.14 :434, 2.15 :434); absent in 2.4
  (no ``compiler/__init__.py`` function of that name).  2.5 was not checked (no wheel here); the stance is used
  from the ``torch_2_6`` range on.  The stance is one module global of the process, not per thread:
  ``_stance = DynamoStance()`` and ``_set_stance`` rebinding it (``_dynamo/eval_frame.py`` 2.13 :185/:188,
  2.14 :208/:227).  Under ``"fail_on_recompile"`` every frame Dynamo would convert raises ``RuntimeError``
  ("Detected recompile when torch.compile stance is 'fail_on_recompile'", 2.13 ``eval_frame.py``:261-307,
  2.14 :300/:319): a recompile, and also the first compile of a function never compiled.  ``set_stance``
  (``_dynamo/decorators.py`` 2.13 :143) sets the stance when constructed and its ``__exit__`` puts back the
  ``DynamoStance`` object it replaced; it raises ``RuntimeError`` inside a ``torch.compile`` region.
- ``config.deterministic`` (env ``TORCHINDUCTOR_DETERMINISTIC``; IC 2.10 :791, 2.13 :1009, 2.14 :1052, 2.15 :1154;
  absent in 2.4): ``AlgorithmSelectorCache.__call__`` returns ``pick_deterministic_choice(choices)`` (the first
  ATen choice) without benchmarking any (``select_algorithm.py`` 2.10 :2816, 2.13 :3900, 2.14 :4072, 2.15 :4230),
  on every device (the CPU's C++ GEMM template too); ``runtime/benchmarking.py`` ``may_ban_benchmarking`` (2.10
  :64, 2.13 :158, 2.14 :162, 2.15 :163) raises for unvetted benchmarks; ``CachingAutotuner`` skips coordinate
  descent for reductions and scans (``runtime/triton_heuristics.py`` 2.10 :1226, 2.13 :1907; Triton, so GPU).
  ``torch.use_deterministic_algorithms(True)`` does not set it and does not stop template autotuning.
- Keys torch still defines but no longer reads (``IGNORED_CONFIG_KEYS``).  "since" is the first release
  checked here that ignores the key; the releases between 2.4 and 2.10 were not checked.
"""

from __future__ import annotations

import ctypes
import importlib
import os
import sys
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from typing import Any, ClassVar

#: The stance ``ik.serving.no_stalls(on="raise")`` sets where torch has it.
FAIL_ON_RECOMPILE = "fail_on_recompile"
#: How torch's refusal under that stance starts (``_dynamo/eval_frame.py`` 2.13 :280, 2.14 :319).
RECOMPILE_REFUSED = "Detected recompile when torch.compile stance is 'fail_on_recompile'"

#: Inductor config keys that ask for benchmarking, and what ``config.deterministic`` does to each (see above).
DETERMINISTIC_BANS = {
    "max_autotune": "picks the first ATen choice of each GEMM without benchmarking (select_algorithm.py, "
    "pick_deterministic_choice)",
    "max_autotune_gemm": "picks the first ATen choice of each GEMM without benchmarking (select_algorithm.py, "
    "pick_deterministic_choice)",
    "coordinate_descent_tuning": "does not tune reductions and scans (runtime/triton_heuristics.py, deterministic_mode)",
}

#: (key, first release checked that ignores it, where torch says so or stops reading it, env var an older release read).
IGNORED_CONFIG_KEYS: tuple[tuple[str, str, str, str | None], ...] = (
    (
        "autotune_fallback_to_aten",
        "2.10",
        "_inductor/config.py 2.10 :589 (2.15 :826) under '# DEPRECATED. This setting is ignored.'; "
        "2.4 read it (kernel/mm.py:173)",
        "TORCHINDUCTOR_AUTOTUNE_FALLBACK_TO_ATEN",
    ),
    (
        "search_autotune_cache",
        "2.10",
        "_inductor/config.py 2.10 :596 (2.15 :833) under '# DEPRECATED. This setting is ignored.'; "
        "2.4 read it (select_algorithm.py:1192)",
        "TORCHINDUCTOR_SEARCH_AUTOTUNE_CACHE",
    ),
    (
        "max_autotune_subproc_graceful_timeout_seconds",
        "2.10",
        "_inductor/config.py 2.10 :608 (2.15 :845) under '# DEPRECATED. This "
        "setting is ignored.'; 2.4 read it (autotune_process.py:376)",
        None,
    ),
    (
        "max_autotune_subproc_terminate_timeout_seconds",
        "2.10",
        "_inductor/config.py 2.10 :610 (2.15 :847) under '# DEPRECATED. This setting is ignored.'",
        None,
    ),
    (
        "use_mixed_mm",
        "2.10",
        "_inductor/config.py 2.10 :356 under '# Deprecated', read nowhere in _inductor; 2.15 :430 "
        "Config(deprecated=True, 'does not do anything')",
        None,
    ),
    (
        "mixed_mm_choice",
        "2.10",
        "_inductor/config.py 2.10 :371 under '# Deprecated', read nowhere in _inductor; 2.15 :446 "
        "Config(deprecated=True, 'does not do anything')",
        None,
    ),
    (
        "split_cat_fx_passes",
        "2.4",
        "_inductor/config.py 2.4 :116 (2.15 :368) under '# Deprecated', read nowhere in _inductor",
        None,
    ),
    ("group_fusion", "2.4", "_inductor/config.py 2.4 :125 (2.15 :377) under '# Deprecated', read nowhere in _inductor", None),
    ("batch_fusion", "2.4", "_inductor/config.py 2.4 :128 (2.15 :380) under '# Deprecated', read nowhere in _inductor", None),
)

#: libkineto's log severity (``std::atomic_int libkineto::Logger::severityLevel_``, exported by ``libtorch_cpu.so``).
KINETO_SEVERITY_SYMBOL = "_ZN9libkineto6Logger14severityLevel_E"
#: A severity above libkineto's ``USDT`` (5, ``ILoggerObserver.h``): its ``profiler_start``/``profiler_stop`` lines
#: (``SyncActivityProfilerHandler.cpp``, printed to stderr at every profiler start and stop in 2.13) are not printed.
KINETO_QUIET = 6


class NativeFloors:
    """torch's own floors: the recompile stance, deterministic mode's bans, ignored config keys (module docstring)."""

    #: The stance that refuses every compile, or None where ``torch.compiler.set_stance`` lacks it (2.4-2.5).
    recompile_stance: ClassVar[str | None] = None

    def refuse_compiles(self) -> Callable[[], None] | None:
        """Set ``torch.compiler.set_stance("fail_on_recompile")`` now; return the undo that puts back the stance
        it replaced (the same object), or None where this torch has no such stance (nothing set).

        The undo restores only while the stance is still the one set here (something else set another since:
        that one is left alone).  Raises ``RuntimeError`` inside a ``torch.compile`` region (torch's rule).
        """
        if self.recompile_stance is None:
            return None
        import torch

        set_stance = getattr(torch.compiler, "set_stance", None)
        if set_stance is None:
            return None
        eval_frame = importlib.import_module("torch._dynamo.eval_frame")
        stance = set_stance(self.recompile_stance)  # sets it; its __exit__ puts back the previous DynamoStance
        ours = getattr(eval_frame, "_stance", None)

        def undo() -> None:
            if getattr(eval_frame, "_stance", None) is ours:
                stance.__exit__(None, None, None)

        return undo

    def refused_compile(self, error: BaseException) -> bool:
        """Whether ``error`` is torch refusing a compile under ``"fail_on_recompile"`` (nothing was compiled)."""
        return self.recompile_stance is not None and isinstance(error, RuntimeError) and str(error).startswith(RECOMPILE_REFUSED)

    def deterministic_bans(self, cfg: Any, asked: Iterable[tuple[str, Any]]) -> dict[str, str]:
        """Per asked Inductor key that asks for benchmarking, what ``cfg.deterministic`` does to it; empty when the mode
        is off or absent (2.4).

        Args:
            cfg: ``torch._inductor.config``, read as it is now (inside a compile: under the compile's patch).
            asked: (key, value) pairs; a key asks for benchmarking when it is in :data:`DETERMINISTIC_BANS` and true.
        """
        if getattr(cfg, "deterministic", False) is not True:
            return {}
        return {key: DETERMINISTIC_BANS[key] for key, value in asked if key in DETERMINISTIC_BANS and value is True}

    def ignored_config_keys(self, release: str) -> dict[str, tuple[str, str | None]]:
        """Inductor config keys the ``release`` (``"2.13"``) defines but ignores: key -> (source, env var an older
        release read, or None)."""
        mine = tuple(int(p) for p in release.split("."))
        return {
            key: (source, env)
            for key, since, source, env in IGNORED_CONFIG_KEYS
            if mine >= tuple(int(p) for p in since.split("."))
        }

    @contextmanager
    def quiet_profiler_markers(self) -> Iterator[None]:
        """libkineto's ``USDT: ... profiler_start/stop`` stderr lines off while inside (its severity above USDT), then
        the severity it had put back, unless something changed it meanwhile.  Nothing where the symbol is absent.

        ``KINETO_LOG_LEVEL`` cannot do this: libkineto reads it once, at the process's first profiler start.
        """
        level = _kineto_severity()
        if level is None:
            yield
            return
        before = level.value
        level.value = max(before, KINETO_QUIET)
        try:
            yield
        finally:
            if level.value == max(before, KINETO_QUIET):
                level.value = before


_SEVERITY: list[Any] = []


def _kineto_severity() -> Any:
    """libkineto's severity as a ``ctypes.c_int`` in ``libtorch_cpu``, or None (not exported, no library)."""
    if not _SEVERITY:
        found = None
        torch = sys.modules.get("torch")
        if torch is not None and torch.__file__:
            path = os.path.join(os.path.dirname(torch.__file__), "lib", "libtorch_cpu.so")
            try:
                found = ctypes.c_int.in_dll(ctypes.CDLL(path, mode=ctypes.RTLD_GLOBAL), KINETO_SEVERITY_SYMBOL)
            except (OSError, ValueError):
                found = None
        _SEVERITY.append(found)
    return _SEVERITY[0]
