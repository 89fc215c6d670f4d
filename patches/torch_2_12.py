"""torch 2.12–2.13: Inductor config overrides are per thread.

Facts (torch 2.12.0 and 2.13.0 wheels, ``torch/`` relative):
- ``utils/_config_module.py:_ConfigEntry.user_override`` is a ``ContextVar`` (2.12 :334, :53): a new thread does not see
  another's override, so the gate override is per thread too.
- ``_inductor/utils.py:is_big_gpu`` (2.12 :1697, 2.13 :1933): ``(index_or_device: int | torch.device = 0)``.  NVGEMM needs
  ``cutlass`` and ``cutlass_api`` (2.13 ``utils.py:2315``), never asks the gate (:2468); CUTEDSL, NVGEMM in ``config.py:605``.
- ``cuda/green_contexts.py:GreenContext.create(*, num_sms=None, ..., device_id=None)``: keyword-only, C++-backed, ``Stream()``.
- ``utils/_config_module.py:ConfigModule.__getattr__`` (2.13 :441) reads ``env_value_force``, the context's ``user_override``,
  ``env_value_default`` (``TORCHINDUCTOR_*_DEFAULT``, in Inductor only ``fx_graph_cache``, ``config.py:109``), a justknob, then
  ``default``.  ``install_config_module`` (:251) keeps ``get_hash()``'s and ``_get_dict()``'s caches in ``ContextVar`` s: a write
  marks only the writing context's caches dirty, a change of ``default`` marks none.
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
    """Facts and operations for torch 2.12-2.13."""

    name: ClassVar[str] = "torch_2_12"
    torch_range: ClassVar[SpecifierSet] = SpecifierSet(">=2.12,<2.14")
    config_is_thread_local: ClassVar[bool] = True
    gate_fingerprints: ClassVar[frozenset[str]] = frozenset({"d29598369aaebd20"})  # 2.12.0-2.13.0
    gemm_backends_by_release: ClassVar[dict[str, frozenset[str]]] = {"2.12": BACKENDS, "2.13": BACKENDS}
    cutlass_dir_key_by_release: ClassVar[dict[str, str]] = {r: "cutlass.cutlass_dir" for r in ("2.12", "2.13")}
    feedback_saver_arity_by_release: ClassVar[dict[str, int]] = {r: 6 for r in ("2.12", "2.13")}
    gate_checked_backends_by_release: ClassVar[dict[str, frozenset[str]]] = {r: GATED for r in ("2.12", "2.13")}
    nvgemm_modules_by_release: ClassVar[dict[str, tuple[str, ...]]] = {r: ("cutlass", "cutlass_api") for r in ("2.12", "2.13")}
    coordesc_recheck_fix_by_release: ClassVar[dict[str, bool]] = {"2.12": False, "2.13": False}  # pytorch#173391: see fixes
    vec_isa_probe_fix_by_release: ClassVar[dict[str, bool]] = {"2.12": True, "2.13": False}  # pytorch#140970: see fixes
    coordesc_pickle_fix_by_release: ClassVar[dict[str, bool]] = {"2.12": True, "2.13": True}
    compile_pool_at_import_by_release: ClassVar[dict[str, bool]] = {"2.12": False, "2.13": False}  # see hooks.py
    aot_headers_by_release: ClassVar[dict[str, bool]] = {"2.12": True, "2.13": True}  # see aot_headers.py

    def read_override(self, cfg: ModuleType, key: str) -> object:
        return cfg._config[key].user_override.get()  # type: ignore[attr-defined]

    def process_default_state(self, cfg: ModuleType, key: str) -> object:
        """A :class:`ProcessDefault` of ``key`` for :meth:`restore_process_default`; :meth:`set_process_default` on the
        same thread adds what it wrote to it."""
        entry = cfg._config[key]  # type: ignore[attr-defined]
        state = ProcessDefault(key, entry.default, entry.env_value_default, entry.user_override.get())
        _captured()[(id(cfg), key)] = state
        return state

    def set_process_default(self, cfg: ModuleType, key: str, value: object) -> None:
        """Write ``value`` into ``default`` and any ``env_value_default`` (not ``env_value_force``); the calling context's own
        override is cleared if it pins the old default (as ``config.patch`` leaves it), else rewritten to ``value``."""
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
        before = None if state is None else state.read_before()
        pinned = state is not None and type(override) is type(before) and override == before  # a pinned False is not a 0
        written = _UNSET_SENTINEL if pinned else value
        self.write_override(cfg, key, written)
        if state is not None:
            state.written = written
            state.token = _OWNER.set(object())
            with _REWRITTEN_LOCK:
                _REWRITTEN[id(state)] = state

    def process_default_holds(self, cfg: ModuleType, key: str, value: object) -> bool:
        """Whether the entry's ``env_value_default`` (where a variable set one), else its ``default``, is still ``value``;
        a thread's own override is not a change of the process default."""
        from torch.utils._config_module import _UNSET_SENTINEL

        entry = cfg._config[key]  # type: ignore[attr-defined]
        env_default = getattr(entry, "env_value_default", _UNSET_SENTINEL)
        stored = entry.default if env_default is _UNSET_SENTINEL else env_default
        return stored is value or stored == value

    def restore_process_default(self, cfg: ModuleType, key: str, prior: object) -> None:
        """Undo :meth:`set_process_default` exactly, idempotently: the defaults from any thread, the rewritten override only
        in the activating context while it still holds what activation wrote."""
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
        """``"<key> (thread <name>)"`` per override env activation rewrote on another live thread, which a restore from
        here cannot put back (a cleared pin is not listed: it reads the old value again once the defaults are back)."""
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
        """How many other contexts hold a ``get_hash()`` or ``_get_dict()`` cache not marked dirty, which a change of defaults
        leaves stale; None where the config module has no such caches.  Walks ``gc.get_objects()`` (0.2 s per 400,000)."""
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
    """What :meth:`Torch212.set_process_default` changed on one key (``default``, ``env_default``, the activating context's
    ``override`` before; ``written`` and ``token`` when that override was rewritten), and how to put it back."""

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
        """What a context without an override of the key read before."""
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


def _captured() -> dict[tuple[int, str], ProcessDefault]:
    """This thread's states captured by ``process_default_state``, not yet taken by ``set_process_default``."""
    return _CAPTURE.__dict__.setdefault("states", {})  # type: ignore[no-any-return]


PATCHES = Torch212()
