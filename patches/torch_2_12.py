"""torch 2.12–2.13: Inductor config overrides are per thread.

Facts (torch 2.12.0 and 2.13.0 wheels):
- ``utils/_config_module.py:334`` (2.12): ``_ConfigEntry.user_override`` is a ``ContextVar``;
  "User overrides are thread-local" (:53).  A value patched on one thread is invisible in a new
  ``threading.Thread``, so the gate override is per thread (per context) too.
- ``_inductor/utils.py:1697`` (2.12) / ``:1933`` (2.13): ``is_big_gpu(index_or_device: int |
  torch.device = 0)``.
- ``max_autotune_gemm_backends`` comment lists CUTEDSL and NVGEMM (2.12 ``config.py:605``); NVGEMM
  needs the modules ``cutlass`` and ``cutlass_api`` (``ensure_nv_universal_gemm_available``,
  2.13 ``utils.py:2315``) and never asks the gate (``use_nv_universal_gemm_template``, :2468).
  ``use_triton_template``/``use_cutlass_template`` ask ``_use_template_for_gpu`` (the gate) first.
- ``torch/cuda/green_contexts.py``: ``GreenContext.create(*, num_sms=None, workqueue_scope=None,
  workqueue_concurrency_limit=None, device_id=None)`` takes keywords only; still the C++-backed shim
  with ``Stream()``, as in 2.11.
- ``utils/_config_module.py`` (2.13 ``__getattr__`` :441, ``_get_dict`` :547): a value is, in order,
  ``env_value_force`` (``env_name_force``, read at import), the calling context's
  ``user_override``, ``env_value_default`` (``env_name_default``: ``TORCHINDUCTOR_*_DEFAULT``, read
  at import), a justknob, then ``default``.  Inductor 2.13 declares one ``env_name_default``:
  ``fx_graph_cache`` (``TORCHINDUCTOR_FX_GRAPH_CACHE_DEFAULT``, ``_inductor/config.py:109``).
- The caches of ``get_hash()`` (``_hash_cache_var``/``_hash_dirty_var``) and of ``_get_dict()`` (the
  FX graph cache key's config, ``_get_dict_cache_var``/``_get_dict_dirty_keys_var``) are
  ``ContextVar`` s too (``install_config_module``, :251): a write marks only the writing context's
  caches dirty, and a change of ``default`` marks none.

**Process defaults** (env activation, :meth:`Torch212.set_process_default`) are the entry's
``default``, and its ``env_value_default`` when a ``TORCHINDUCTOR_*_DEFAULT`` variable set one (a
knob beats a variable that only sets a default; ``env_value_force`` is left alone and stays a named
cause).  Of the per-context overrides only one is touched: the activating context's own, if it
holds one, is made to see the knob too: a pin of the old default (torch's ``config.patch`` leaves
one before 2.15) is cleared to "unset", an override that differs is rewritten to the knob's value.
Restoring puts back ``default`` and ``env_value_default`` from any thread; that override is put
back only in the context that activated (a ``ContextVar`` token decides: resetting it in another
context raises), and only while it still holds what activation wrote.  Restoring from elsewhere
never writes the calling context's overrides (it only marks its caches dirty).  A cleared pin then
reads the old value again anyway (the old default is back); a rewritten override keeps the knob's
value, and :meth:`Torch212.overrides_out_of_reach` names it beforehand (``deactivate_env`` warns).
"""

from __future__ import annotations

import contextvars
import gc
import threading
from types import ModuleType
from typing import Any, ClassVar

from packaging.specifiers import SpecifierSet

from .torch_2_8 import Torch28

BACKENDS = frozenset({"ATEN", "TRITON", "CUTLASS", "CUTEDSL", "NVGEMM", "CK", "CKTILE", "CPP"})
GATED = frozenset({"TRITON", "CUTLASS", "CUTEDSL"})


class Torch212(Torch28):
    """Facts and operations for torch 2.12-2.13 (see the module docstring)."""

    name: ClassVar[str] = "torch_2_12"
    torch_range: ClassVar[SpecifierSet] = SpecifierSet(">=2.12,<2.14")
    config_is_thread_local: ClassVar[bool] = True
    gate_fingerprints: ClassVar[frozenset[str]] = frozenset({"d29598369aaebd20"})  # 2.12.0-2.13.0
    gemm_backends_by_release: ClassVar[dict[str, frozenset[str]]] = {"2.12": BACKENDS, "2.13": BACKENDS}
    cutlass_dir_key_by_release: ClassVar[dict[str, str]] = {r: "cutlass.cutlass_dir" for r in ("2.12", "2.13")}
    feedback_saver_arity_by_release: ClassVar[dict[str, int]] = {r: 6 for r in ("2.12", "2.13")}
    gate_checked_backends_by_release: ClassVar[dict[str, frozenset[str]]] = {r: GATED for r in ("2.12", "2.13")}
    nvgemm_modules_by_release: ClassVar[dict[str, tuple[str, ...]]] = {r: ("cutlass", "cutlass_api") for r in ("2.12", "2.13")}
    coordesc_recheck_fix_by_release: ClassVar[dict[str, bool]] = {"2.12": False, "2.13": False}  # pytorch#173391: see _fixes

    def read_override(self, cfg: ModuleType, key: str) -> object:
        return cfg._config[key].user_override.get()  # type: ignore[attr-defined]

    def process_default_state(self, cfg: ModuleType, key: str) -> object:
        """Capture what :meth:`set_process_default` changes on ``key``, for :meth:`restore_process_default`.

        Returns:
            A :class:`ProcessDefault` (``default``, ``env_value_default``, the calling context's
            override, the calling thread); :meth:`set_process_default` on the same thread adds what
            it wrote to it.
        """
        entry = cfg._config[key]  # type: ignore[attr-defined]
        state = ProcessDefault(key, entry.default, entry.env_value_default, entry.user_override.get())
        _captured()[(id(cfg), key)] = state
        return state

    def set_process_default(self, cfg: ModuleType, key: str, value: object) -> None:
        """Make ``value`` what every context reads for ``key`` unless it overrides ``key`` itself.

        Writes the entry's ``default`` and, when a ``TORCHINDUCTOR_*_DEFAULT`` variable set one, its
        ``env_value_default`` (which torch reads before ``default``): the knob beats a variable
        that only sets a default.  ``env_value_force`` is left alone (the read-back then names the
        forcing variable).  If the calling context holds an override of ``key``, this context is made
        to see the value too: an override equal to the old default (a pin: torch's own
        ``config.patch`` leaves one before 2.15) is cleared to "unset", one that differs is rewritten
        to ``value``; the :class:`ProcessDefault` captured on this thread records which.  The calling
        context's config caches are marked dirty either way.
        """
        from torch.utils._config_module import _UNSET_SENTINEL

        state = _captured().pop((id(cfg), key), None)
        entry = cfg._config[key]  # type: ignore[attr-defined]
        entry.default = value
        if entry.env_value_default is not _UNSET_SENTINEL:
            entry.env_value_default = value
        override = self.read_override(cfg, key)
        if override is _UNSET_SENTINEL:
            self.write_override(cfg, key, override)  # the same state: only marks this context's caches dirty
            return
        # A pin of the old default (what config.patch leaves) is cleared, so this context follows the
        # process default like every other, and reads the old value again however it is restored; an
        # override that differs from it (set on purpose) is rewritten to the knob's value.
        pinned = state is not None and _same(override, state.read_before())
        written = _UNSET_SENTINEL if pinned else value
        self.write_override(cfg, key, written)
        if state is not None:
            state.written = written
            state.token = _OWNER.set(object())
            with _REWRITTEN_LOCK:
                _REWRITTEN[id(state)] = state

    def process_default_holds(self, cfg: ModuleType, key: str, value: object) -> bool:
        """Whether the entry's process-wide value is still ``value``: its ``env_value_default`` where a
        ``TORCHINDUCTOR_*_DEFAULT`` variable set one, else its ``default``.  Not what the calling thread
        reads: a thread's own override is its own business, not a change of the process default."""
        from torch.utils._config_module import _UNSET_SENTINEL

        entry = cfg._config[key]  # type: ignore[attr-defined]
        env_default = getattr(entry, "env_value_default", _UNSET_SENTINEL)
        stored = entry.default if env_default is _UNSET_SENTINEL else env_default
        return stored is value or stored == value

    def restore_process_default(self, cfg: ModuleType, key: str, prior: object) -> None:
        """Undo :meth:`set_process_default` exactly; idempotent.

        ``default`` and ``env_value_default`` are put back from any thread.  The activating
        context's rewritten override is put back only when this runs in that context and the
        override still holds what activation wrote; no other override is written (the calling
        context's caches are marked dirty by writing its own state back unchanged).
        """
        if not isinstance(prior, ProcessDefault):
            raise TypeError(f"restore_process_default({key!r}) takes what process_default_state returned, not {prior!r}")
        entry = cfg._config[key]  # type: ignore[attr-defined]
        entry.default = prior.default
        entry.env_value_default = prior.env_default
        rewound = False
        if prior.token is not None and not prior.restored:
            try:
                _OWNER.reset(prior.token)
                here = True
            except ValueError:  # the token was made in another context: that override is not ours to write
                here = False
            except RuntimeError:  # already reset by a restore that an interrupt cut short: this context
                here = True
            if here and self.read_override(cfg, key) is prior.written:
                self.write_override(cfg, key, prior.override)
                rewound = True
        if not rewound:
            self.write_override(cfg, key, self.read_override(cfg, key))  # marks this context's caches dirty
        prior.restored = True
        with _REWRITTEN_LOCK:
            _REWRITTEN.pop(id(prior), None)

    def overrides_out_of_reach(self) -> list[str]:
        """Overrides that env activation rewrote on another thread, which a restore from here cannot put back.

        A pin that activation cleared is not listed: that context reads the old value again once the
        defaults are restored, from any thread.

        Returns:
            One ``"<key> (thread <name>)"`` per override rewritten to the knob's value in the
            context of a live thread other than the calling one (empty when none).
        """
        from torch.utils._config_module import _UNSET_SENTINEL

        me = threading.current_thread()
        with _REWRITTEN_LOCK:
            states = list(_REWRITTEN.values())
        return [
            f"{s.key} (thread {s.thread.name})"
            for s in states
            if s.written is not _UNSET_SENTINEL and s.thread is not me and s.thread.is_alive()
        ]

    def stale_config_caches(self, cfg: ModuleType) -> int | None:
        """How many contexts other than the calling one hold config caches that a change of defaults leaves stale.

        torch caches ``get_hash()`` and ``_get_dict()`` (the FX graph cache key's config) per
        context (``_hash_cache_var``, ``_get_dict_cache_var``); changing an entry's ``default``
        marks no context dirty.  A context holds a stale cache when its hash is cached and not
        marked dirty, or its ``_get_dict`` cache is non-empty and tracks dirty keys (None there means
        "recompute everything").  Every thread's and task's context is found among the objects the
        garbage collector tracks: one walk over them (about 0.2 s for 400,000 objects), so callers
        ask only when another thread is alive.

        Returns:
            The number of such contexts, or None when this torch's config module has none of these
            caches (then nothing here can tell).
        """
        hash_cache = getattr(cfg, "_hash_cache_var", None)
        hash_dirty = getattr(cfg, "_hash_dirty_var", None)
        dict_cache = getattr(cfg, "_get_dict_cache_var", None)
        dict_dirty = getattr(cfg, "_get_dict_dirty_keys_var", None)
        if hash_cache is None and dict_cache is None:
            return None
        mark = object()
        token = _HERE.set(mark)
        try:
            stale = 0
            for found in gc.get_objects():
                if type(found) is not contextvars.Context or found.get(_HERE) is mark:
                    continue
                hashed = hash_cache is not None and found.get(hash_cache) is not None
                if hashed and hash_dirty is not None and found.get(hash_dirty, True):
                    hashed = False  # marked dirty: recomputed at its next use
                cached = dict_cache is not None and bool(found.get(dict_cache))
                if cached and dict_dirty is not None and found.get(dict_dirty) is None:
                    cached = False  # "everything dirty": recomputed at its next use
                stale += hashed or cached
            return stale
        finally:
            _HERE.reset(token)


class ProcessDefault:
    """What :meth:`Torch212.set_process_default` changed on one key, and how to put it back.

    Attributes:
        key: the config key.
        default: the entry's ``default`` before.
        env_default: its ``env_value_default`` before (torch's "unset" sentinel when no variable set it).
        override: the activating context's override before ("unset" sentinel when none).
        thread: the thread that activated.
        written: the value written into that override, when one was rewritten.
        token: the ``ContextVar`` token that identifies the activating context, when one was rewritten.
        restored: whether :meth:`Torch212.restore_process_default` ran.
    """

    __slots__ = ("default", "env_default", "key", "override", "restored", "thread", "token", "written")

    def __init__(self, key: str, default: object, env_default: object, override: object) -> None:
        self.key = key
        self.default = default
        self.env_default = env_default
        self.override = override
        self.thread = threading.current_thread()
        self.written: object = None
        self.token: contextvars.Token[Any] | None = None
        self.restored = False

    def read_before(self) -> object:
        """What a context without an override of the key read before (``env_value_default``, else ``default``)."""
        from torch.utils._config_module import _UNSET_SENTINEL

        return self.default if self.env_default is _UNSET_SENTINEL else self.env_default

    def __repr__(self) -> str:
        return f"ProcessDefault({self.key!r}, default={self.default!r}, env_default={self.env_default!r})"


#: Set in the activating context when an override is rewritten; resetting its token elsewhere raises.
_OWNER: contextvars.ContextVar[Any] = contextvars.ContextVar("inductor_knobs.process_default_owner", default=None)
#: Marks the calling context while :meth:`Torch212.stale_config_caches` walks the others.
_HERE: contextvars.ContextVar[Any] = contextvars.ContextVar("inductor_knobs.stale_cache_probe", default=None)
#: Rewritten overrides not restored yet, by id of their :class:`ProcessDefault`.
_REWRITTEN: dict[int, ProcessDefault] = {}
_REWRITTEN_LOCK = threading.Lock()
_CAPTURE = threading.local()


def _same(a: object, b: object) -> bool:
    """Equal and of the same type (a pinned ``False`` is not the default ``0``)."""
    return type(a) is type(b) and a == b


def _captured() -> dict[tuple[int, str], ProcessDefault]:
    """This thread's states captured by ``process_default_state`` and not yet taken by ``set_process_default``."""
    found: dict[tuple[int, str], ProcessDefault] | None = getattr(_CAPTURE, "states", None)
    if found is None:
        found = _CAPTURE.states = {}
    return found


PATCHES = Torch212()
