"""What inductor_knobs asked of Inductor: the :class:`Asked` records, and where they are kept.

Asked values live in a slot scoped like Inductor config (per thread/task on torch 2.12+, per
process before), one layer per block with the block's :class:`~inductor_knobs.core._scope.Life`,
over a process-wide layer for env activation; :func:`effective_asked` merges the layers of blocks
still alive by rank.  The compile interception (:mod:`inductor_knobs.core.interception`) enforces and attests
them inside every compile; its :class:`~inductor_knobs.core.interception.AskChange` record adds them.
"""

from __future__ import annotations

import threading
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from ..patches.torch_2_4 import TorchPatches
from ._scope import Life, ScopedSlot
from .torch_settings import SETTINGS_MODULE

INDUCTOR_CONFIG = "torch._inductor.config"
#: The "module" of an asked cache salt: ``Asked(CACHE_SALT, tag, True, source)`` asks that every
#: compile's cache keys carry ``tag`` (see :func:`_with_salt`); one slot per tag, so salts compose.
CACHE_SALT = "cache_salt"
ON_MISMATCH = ("raise", "warn")
#: The "module" of an asked choices handler: ``Asked(CHOICES_HANDLER, "V.choices", "LookupTableChoices", ...)``
#: asks that Inductor's choices handler be torch's ``LookupTableChoices`` inside each compile (the
#: ``lookup_table`` knob); the interception installs it there and attests its class.
CHOICES_HANDLER = "torch._inductor.virtualized"

#: Precedence ranks of asked values (higher wins; equal ranks: the innermost block wins).
KNOB, EMULATION = 1, 2


@dataclass(frozen=True)
class Asked:
    """One value inductor_knobs asked for.

    Attributes:
        module: the config module (``torch._inductor.config``, ``torch.compiler.config``).
        key: the key in it, dotted as torch spells it (``triton.cudagraphs``).
        value: the value asked for.
        source: who asked: ``knobs``, ``env``, ``emulate_gpu``, ``mode:<name>``, ``options``, …
        rank: :data:`KNOB` or :data:`EMULATION`.
        on_mismatch: ``"raise"`` or ``"warn"`` when it does not hold inside a compile.
        overriding_warning: warning class to issue when this value overrides a different one
            a mode, options or a knob asked for (emulation's ``triton.cudagraph_trees``), or None.
    """

    module: str
    key: str
    value: Any
    source: str
    rank: int = KNOB
    on_mismatch: str = "raise"
    overriding_warning: type[Warning] | None = None

    @property
    def label(self) -> str:
        return self.key if self.module in (INDUCTOR_CONFIG, SETTINGS_MODULE) else f"{self.module}.{self.key}"


#: One block's asked values, by (module, key), with the block's life.
Layer = tuple[Life, Mapping[tuple[str, str], Asked]]
#: The layers of this thread's/task's blocks, innermost last (a child context keeps its copy after they exit).
_SCOPED: ScopedSlot[tuple[Layer, ...]] = ScopedSlot("inductor_knobs.core.asked", ())
_PROCESS: dict[tuple[str, str], Asked] = {}
_PROCESS_LOCK = threading.RLock()  # an RLock only so a test can tell this thread holds it (_is_owned)


def _merge(base: Mapping[tuple[str, str], Asked], top: Mapping[tuple[str, str], Asked]) -> dict[tuple[str, str], Asked]:
    merged = dict(base)
    for slot, asked in top.items():
        if slot not in merged or asked.rank >= merged[slot].rank:
            merged[slot] = asked
    return merged


def effective_asked(patches: TorchPatches) -> dict[tuple[str, str], Asked]:
    """What applies on this thread now: the process layer (env), then blocks still alive (inner wins), by rank.

    A block that has exited asks nothing, even where a child task or copied context still holds its layer.
    """
    merged = dict(_PROCESS)
    for life, values in _SCOPED.scopes[patches.config_is_thread_local].get():
        if life.alive:
            merged = _merge(merged, values)
    return merged


def by_slot(asked: Iterable[Asked]) -> dict[tuple[str, str], Asked]:
    """``asked`` keyed by (module, key), as :class:`AskChange` takes it (a later one wins)."""
    return {(a.module, a.key): a for a in asked}
