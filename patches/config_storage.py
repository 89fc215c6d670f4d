"""Inductor config storage: overrides read and written back exactly, process defaults, declared
types, aliases, implications, forcing environment variables, and the cache salt of a gate override.

:class:`ConfigStorage` encodes torch 2.4–2.5; the era modules override what changed (``torch/`` relative):
- ``utils/_config_module.py``: values in a plain, process-global dict ``module._config``, read by ``ConfigModule.__getattr__``.
- ``utils/_config_module.py:_make_closure_patcher`` (2.4–2.15) writes the raw stored value, "unset" included; it marks
  ``get_hash()``'s ``_hash_dirty_var`` itself from 2.13 (not ``_is_dirty`` before).  ``config.patch`` pins on exit until 2.15.
- No ``value_type`` (2.6), ``env_name_force`` (2.6; ``fx_graph_cache`` from 2.7), aliases (2.7) or implications (2.15).
- No ``torch.compiler.config.cache_key_tag`` (2.6 ``compiler/config.py:58``): a gate override sets ``fx_graph_cache=False``.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Mapping
from types import ModuleType
from typing import Any, ClassVar


@functools.cache
def _type_names(kind: type) -> frozenset[str]:
    return frozenset(name for klass in kind.__mro__ for name in vars(klass))


class ConfigStorage:
    """How Inductor stores its config, and how to change it and put it back exactly."""

    #: Inductor config overrides are per thread (ContextVar) from 2.12; process-global before.
    config_is_thread_local: ClassVar[bool]
    #: ``config.patch(...)`` restores "unset" on exit (2.15); before, it pins the value it read as a user override.
    config_patch_restores_unset: ClassVar[bool]

    def read_config(self, cfg: ModuleType, key: str) -> object:
        """``getattr(cfg, key)``, calling the type's ``__getattr__`` directly (half the cost: no failed generic lookup)
        where neither the module's ``__dict__`` nor its type could answer."""
        found = cfg.__dict__
        kind: type = type(cfg)
        names = _type_names(kind)
        if key in found or key in names or "__getattr__" in found or "__getattr__" not in names:
            return getattr(cfg, key)
        return kind.__getattr__(cfg, key)  # type: ignore[attr-defined,no-any-return]

    def read_override(self, cfg: ModuleType, key: str) -> object:
        """Return the stored state of ``cfg.key`` that :meth:`write_override` can put back exactly."""
        return cfg._config[key]  # type: ignore[attr-defined]

    def write_override(self, cfg: ModuleType, key: str, raw: object) -> None:
        """Put back state from :meth:`read_override` (one key; see :meth:`write_overrides`)."""
        self.write_overrides(cfg, {key: raw})

    def write_overrides(self, cfg: ModuleType, raw: Mapping[str, object]) -> Callable[[], None]:
        """Write states from :meth:`read_override` (or values) now; return torch's revert of this write."""
        return self.overrides_writer(cfg, raw)()

    def overrides_writer(self, cfg: ModuleType, raw: Mapping[str, object]) -> Callable[[], Callable[[], None]]:
        """``write()``: writes ``raw`` with one call of torch's ``_make_closure_patcher`` (raw values, "unset" included) and
        returns ``undo()``, which puts back exactly the stored states it replaced.  Reusable: a cached plan makes it once."""
        patcher: Callable[[], Callable[[], None]] = cfg._make_closure_patcher(**raw)  # type: ignore[attr-defined]
        if "_is_dirty" not in cfg._bypass_keys:  # type: ignore[attr-defined]
            return patcher  # 2.13+: the patcher marks get_hash()'s cache dirty itself (_hash_dirty_var)

        # 2.4-2.12: the patcher leaves get_hash()'s flag alone; set it in the module's namespace, where
        # ConfigModule.__setattr__ puts bypass keys, without running that method at every enter and exit.
        namespace = cfg.__dict__

        def write() -> Callable[[], None]:
            undo = patcher()
            namespace["_is_dirty"] = True

            def revert() -> None:
                undo()
                namespace["_is_dirty"] = True

            return revert

        return write

    def read_value(self, cfg: ModuleType, key: str) -> object:
        """``getattr(cfg, key)`` without side effects: from 2.6 reading a mutable default stores a deep copy as the
        user override, which is removed again here."""
        before = self.read_override(cfg, key)
        value = self.read_config(cfg, key)
        if self.read_override(cfg, key) is not before:
            self.write_override(cfg, key, before)
        return value

    def declared_types(self, cfg: ModuleType, key: str) -> tuple[Any, ...] | None:
        """The values ``key`` accepts (types and ``Literal`` values), or None (unchecked); 2.4–2.5: the default's type."""
        default = cfg._config[key]  # type: ignore[attr-defined]
        return None if default is None else as_types(type(default))  # type: ignore[arg-type,no-any-return]

    def value_allowed(self, value: object, allowed: tuple[Any, ...]) -> bool:
        """Whether ``value`` fits ``allowed`` (bools are not ints; ints are floats)."""
        for option in allowed:
            if isinstance(option, type):
                if option is float and isinstance(value, int) and not isinstance(value, bool):
                    return True
                if option is int and isinstance(value, bool):
                    continue
                if isinstance(value, option):
                    return True
            elif type(value) is type(option) and value == option:  # a Literal value
                return True
        return False

    def describe_types(self, allowed: tuple[Any, ...]) -> str:
        """``a bool``, ``a str or None``, ``an int``, ``'strict' or 'strict_pointwise'`` for an error message."""
        words = []
        for option in allowed:
            if option is type(None):
                words.append("None")
            elif isinstance(option, type):
                words.append(("an " if option.__name__[0] in "aeiou" else "a ") + option.__name__)
            else:
                words.append(repr(option))
        return " or ".join(words)

    def implied_by(self, cfg: ModuleType, key: str) -> str | None:
        """The active config implication that forces ``key`` (``numerics='strict'``), if any (2.15+)."""
        return None

    def process_default_state(self, cfg: ModuleType, key: str) -> object:
        """The state :meth:`set_process_default` changes, for :meth:`restore_process_default`."""
        return self.read_override(cfg, key)

    def set_process_default(self, cfg: ModuleType, key: str, value: object) -> None:
        """Make ``value`` what every thread sees unless it overrides ``key`` itself (a plain set before 2.12)."""
        self.write_override(cfg, key, value)

    def restore_process_default(self, cfg: ModuleType, key: str, prior: object) -> None:
        """Undo :meth:`set_process_default` exactly."""
        self.write_override(cfg, key, prior)

    def process_default_holds(self, cfg: ModuleType, key: str, value: object) -> bool:
        """Whether the process-wide value of ``key`` is still ``value`` (what env activation set)."""
        stored = self.read_override(cfg, key)
        return stored is value or stored == value

    def config_keys(self, cfg: ModuleType) -> list[str]:
        """Every dotted key the config module knows."""
        return list(cfg._config)  # type: ignore[attr-defined]

    def forcing_env_var(self, cfg: ModuleType, key: str) -> str | None:
        """The environment variable that forces ``key`` and beats any override, if one is set."""
        return None  # env_name_force arrived in 2.6 (:mod:`.torch_2_6`)

    def resolve_alias(self, cfg: ModuleType, key: str) -> tuple[ModuleType, str]:
        """Follow a config alias to the module and key that really store the value."""
        return cfg, key  # aliases arrived in 2.7

    def cache_salt(self, tag: str) -> list[tuple[str, str, object]]:
        """``(config module, key, value)`` triples that keep kernels built under the gate override named ``tag`` (its
        digest) out of other caches; 2.4–2.5 have no ``cache_key_tag``, so the FX graph cache is switched off."""
        return [("torch._inductor.config", "fx_graph_cache", False)]


@functools.cache  # declared types are few and fixed per torch
def as_types(declared: Any) -> tuple[Any, ...] | None:
    """Flatten a declared type (``str | None``, ``Literal["a", "b"]``) into types and literal values; None if unchecked."""
    import types as _types
    import typing

    origin = typing.get_origin(declared)
    union_type = getattr(_types, "UnionType", None)  # ``X | Y`` (Python 3.10+)
    if origin is typing.Union or (union_type is not None and isinstance(declared, union_type)):
        parts = [as_types(a) for a in typing.get_args(declared)]
        return None if any(p is None for p in parts) else tuple(x for p in parts for x in p or ())
    if origin is typing.Literal:
        return tuple(typing.get_args(declared))
    if declared is type(None):
        return (type(None),)
    if origin is not None:
        return (origin,) if isinstance(origin, type) else None
    return (declared,) if isinstance(declared, type) and declared is not object else None
