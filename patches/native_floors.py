"""torch's own floors under a knob or a guard: the recompile stance, Inductor's deterministic mode, ignored config keys.

Checked in the release wheels' sources (``torch/`` relative):
- ``compiler/__init__.py:set_stance`` with ``"fail_on_recompile"`` (2.10 :261/:305, 2.13 :298/:342, 2.14 and 2.15 :390/:434;
  absent in 2.4; used from 2.6): one process-global ``_dynamo/eval_frame.py:_stance`` (2.13 :185/:188, 2.14 :208/:227); every
  frame Dynamo would convert raises, a first compile too (2.13 :261-307, 2.14 :300/:319); ``_dynamo/decorators.py:set_stance``
  (2.13 :143) restores on ``__exit__`` and raises inside ``torch.compile``.
- ``_inductor/config.py:deterministic`` (2.10 :791, 2.13 :1009, 2.15 :1154; absent in 2.4): ``select_algorithm.py:
  AlgorithmSelectorCache.__call__`` picks without benchmarking (2.10 :2816, 2.15 :4230), ``runtime/benchmarking.py:
  may_ban_benchmarking`` (2.10 :64, 2.15 :163) raises, ``CachingAutotuner`` skips coordinate descent of reductions (2.13 :1907);
  ``torch.use_deterministic_algorithms(True)`` sets none of this (env ``TORCHINDUCTOR_DETERMINISTIC`` does).
- ``IGNORED_CONFIG_KEYS``: defined but no longer read ("since": the first release checked; 2.5–2.9 unchecked).
"""

from __future__ import annotations

import ctypes
import functools
import importlib
import os
import sys
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from typing import Any, ClassVar

#: How torch's refusal under that stance starts (``_dynamo/eval_frame.py`` 2.13 :280, 2.14 :319).
RECOMPILE_REFUSED = "Detected recompile when torch.compile stance is 'fail_on_recompile'"

_ATEN_FIRST = "picks the first ATen choice of each GEMM without benchmarking (select_algorithm.py, pick_deterministic_choice)"
#: Inductor config keys that ask for benchmarking, and what ``config.deterministic`` does to each.
DETERMINISTIC_BANS = {
    "max_autotune": _ATEN_FIRST,
    "max_autotune_gemm": _ATEN_FIRST,
    "coordinate_descent_tuning": "does not tune reductions and scans (runtime/triton_heuristics.py, deterministic_mode)",
}

_IC = "_inductor/config.py"
_IGNORED = "under '# DEPRECATED. This setting is ignored.'"
_UNREAD = "under '# Deprecated', read nowhere in _inductor"
_NOOP = "Config(deprecated=True, 'does not do anything')"
#: (key, first release checked that ignores it, where torch says so or stops reading it, env var an older release read).
IGNORED_CONFIG_KEYS: tuple[tuple[str, str, str, str | None], ...] = (
    (
        "autotune_fallback_to_aten",
        "2.10",
        f"{_IC} 2.10 :589 (2.15 :826) {_IGNORED}; 2.4 read it (kernel/mm.py:173)",
        "TORCHINDUCTOR_AUTOTUNE_FALLBACK_TO_ATEN",
    ),
    (
        "search_autotune_cache",
        "2.10",
        f"{_IC} 2.10 :596 (2.15 :833) {_IGNORED}; 2.4 read it (select_algorithm.py:1192)",
        "TORCHINDUCTOR_SEARCH_AUTOTUNE_CACHE",
    ),
    (
        "max_autotune_subproc_graceful_timeout_seconds",
        "2.10",
        f"{_IC} 2.10 :608 (2.15 :845) {_IGNORED}; 2.4 read it (autotune_process.py:376)",
        None,
    ),
    ("max_autotune_subproc_terminate_timeout_seconds", "2.10", f"{_IC} 2.10 :610 (2.15 :847) {_IGNORED}", None),
    ("use_mixed_mm", "2.10", f"{_IC} 2.10 :356 {_UNREAD}; 2.15 :430 {_NOOP}", None),
    ("mixed_mm_choice", "2.10", f"{_IC} 2.10 :371 {_UNREAD}; 2.15 :446 {_NOOP}", None),
    ("split_cat_fx_passes", "2.4", f"{_IC} 2.4 :116 (2.15 :368) {_UNREAD}", None),
    ("group_fusion", "2.4", f"{_IC} 2.4 :125 (2.15 :377) {_UNREAD}", None),
    ("batch_fusion", "2.4", f"{_IC} 2.4 :128 (2.15 :380) {_UNREAD}", None),
)

#: libkineto's log severity (``std::atomic_int libkineto::Logger::severityLevel_``, exported by ``libtorch_cpu.so``).
KINETO_SEVERITY_SYMBOL = "_ZN9libkineto6Logger14severityLevel_E"
#: Above libkineto's ``USDT`` (5, ``ILoggerObserver.h``): hides its ``profiler_start``/``stop`` stderr lines (2.13).
KINETO_QUIET = 6


class NativeFloors:
    """torch's own floors: the recompile stance, deterministic mode's bans, ignored config keys."""

    #: The stance that refuses every compile, or None where ``torch.compiler.set_stance`` lacks it (2.4-2.5).
    recompile_stance: ClassVar[str | None] = None

    def refuse_compiles(self, push: Callable[[Callable[[], None]], None]) -> None:
        """Set ``torch.compiler.set_stance("fail_on_recompile")`` (nothing where torch lacks the stance), after pushing
        the undo that puts back the stance it replaced while ours is current (``eval_frame._set_stance``, what the
        stance's ``__exit__`` calls; 2.6-2.15).  Raises ``RuntimeError`` inside ``torch.compile``."""
        import torch

        set_stance = getattr(torch.compiler, "set_stance", None)
        if self.recompile_stance is None or set_stance is None:
            return
        eval_frame = importlib.import_module("torch._dynamo.eval_frame")
        previous = eval_frame._stance
        ours: list[Any] = []

        def undo() -> None:  # pushed first: an interrupt just after the stance is set still puts back the one before
            current = eval_frame._stance
            if current is not previous and (current is ours[0] if ours else current.stance == self.recompile_stance):
                eval_frame._set_stance(previous)

        push(undo)
        set_stance(self.recompile_stance)
        ours.append(eval_frame._stance)

    def refused_compile(self, error: BaseException) -> bool:
        """Whether ``error`` is torch refusing a compile under ``"fail_on_recompile"`` (nothing was compiled)."""
        return self.recompile_stance is not None and isinstance(error, RuntimeError) and str(error).startswith(RECOMPILE_REFUSED)

    def deterministic_bans(self, cfg: Any, asked: Iterable[tuple[str, Any]]) -> dict[str, str]:
        """Per asked key of :data:`DETERMINISTIC_BANS` set True in ``asked`` ((key, value) pairs), what ``cfg.deterministic``
        (``torch._inductor.config`` as it is now) does to it; empty when the mode is off or absent (2.4)."""
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
        """libkineto's ``profiler_start/stop`` stderr lines off while inside, then its severity back unless changed meanwhile.
        libkineto reads ``KINETO_LOG_LEVEL`` once, at the process's first profiler start, and sets its severity from
        it then: the first block also sets that variable, unless the user did, and removes it after.  Nothing where
        the severity's symbol is absent."""
        level = _kineto_severity()
        if level is None:
            yield
            return
        before = level.value
        first = KINETO_LOG_LEVEL not in os.environ and not _PROFILED
        if first:
            _PROFILED.append(True)
            os.environ[KINETO_LOG_LEVEL] = str(KINETO_QUIET)
        level.value = max(before, KINETO_QUIET)
        try:
            yield
        finally:
            if first and os.environ.get(KINETO_LOG_LEVEL) == str(KINETO_QUIET):
                del os.environ[KINETO_LOG_LEVEL]
            if level.value == max(before, KINETO_QUIET):
                level.value = before


#: Whether a quiet profiler block ran in this process (libkineto reads ``KINETO_LOG_LEVEL`` at its first start only).
_PROFILED: list[bool] = []
KINETO_LOG_LEVEL = "KINETO_LOG_LEVEL"


@functools.cache
def _kineto_severity() -> Any:
    """libkineto's severity as a ``ctypes.c_int`` in ``libtorch_cpu``, or None (not exported, no library)."""
    torch = sys.modules.get("torch")
    if torch is None or not torch.__file__:
        return None
    path = os.path.join(os.path.dirname(torch.__file__), "lib", "libtorch_cpu.so")
    try:
        return ctypes.c_int.in_dll(ctypes.CDLL(path, mode=ctypes.RTLD_GLOBAL), KINETO_SEVERITY_SYMBOL)
    except (OSError, ValueError):
        return None
