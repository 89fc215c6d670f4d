"""Blocks that receive compile events: ``ik.record_autotune``, ``ik.record_compiles``, and the base of the serving guards."""

from __future__ import annotations

import os
from collections import defaultdict
from typing import Any, TypeVar

from . import torch_compat
from .attestation import CompileAttestation
from .blocks import UndoContext
from .events import AutotuneRecord, CompileEvent, RuntimeEvent, Subscribe, format_table, write_jsonl
from .interception import InterceptionUse
from .observers import HooksUse, PatchUse
from .patching import SharedPatch
from .undo import Change

_Block = TypeVar("_Block", bound="ObservedBlock")


def subscription_records(consumer: Any, scope: str, *, hooks: bool, need_autotune: bool) -> list[Change]:
    """The undo records that deliver compile events to ``consumer``: with ``hooks`` the observer hooks and the shared
    patches in ``consumer.patches``, with an ``on_attestation`` the compile interception, then its subscription."""
    records: list[Change] = []
    if hooks:
        records = [HooksUse(need_autotune=need_autotune), *(PatchUse(patch) for patch in getattr(consumer, "patches", ()))]
    if callable(getattr(consumer, "on_attestation", None)):  # attestations come from the compile interception
        records.append(InterceptionUse(torch_compat.installed(strict=False)))
    records.append(Subscribe(consumer, scope))
    return records


class Subscription(UndoContext):
    """A block that delivers compile events to ``consumer`` (``on_<kind>`` methods) while it lasts.

    Args:
        consumer: any object with some ``on_<kind>`` methods and optionally ``patches`` (shared patches to hold).
        scope: ``"context"`` (default) or ``"process"``.
        hooks: also hold the observer hooks (default True); attestations alone need only the interception.
    """

    changes_config = False

    def __init__(self, consumer: Any, *, scope: str = "context", hooks: bool = True) -> None:
        self.consumer = consumer
        self.scope = scope
        self.hooks = hooks

    def __repr__(self) -> str:
        return f"Subscription({type(self.consumer).__name__})"

    def _plan(self) -> tuple[list[Change], Any]:
        return subscription_records(self.consumer, self.scope, hooks=self.hooks, need_autotune=False), self.consumer


class ObservedBlock(UndoContext):
    """A block on the block stack that receives compile events in its own ``on_<kind>`` methods.

    Its hooks and subscription are undo records, reverted like config on any exit.  One object observes one block
    at a time (enter raises RuntimeError otherwise).
    """

    #: Raise NotSupportedOnThisTorch on enter when torch cannot report autotuning.
    need_autotune: bool = True
    #: ``"context"`` (this thread/task and its children) or ``"process"``.
    event_scope = "context"
    changes_config = False
    #: More shared patches held while it observes.
    patches: tuple[SharedPatch, ...] = ()
    #: Whether this object is inside its block now (a serving guard's fast path reads it every call).
    _block: bool | None = None

    # The protocol a subclass overrides (``super().on_<kind>(...)`` is safe); attestations are opt-in by defining
    # ``on_attestation``, which also holds the compile interception.
    def on_autotune(self, record: AutotuneRecord) -> None:
        pass

    def on_compile(self, event: CompileEvent) -> None:
        pass

    def on_runtime(self, event: RuntimeEvent) -> None:
        pass

    def _plan(self) -> tuple[list[Change], Any]:
        return subscription_records(self, self.event_scope, hooks=True, need_autotune=self.need_autotune), self

    def __enter__(self: _Block) -> _Block:
        if self._block:
            raise RuntimeError(f"a {type(self).__name__} object observes one block at a time; create another")
        entered: _Block = super().__enter__()
        self._block = True
        return entered

    def __exit__(self, exc_type: object, exc: BaseException | None, tb: object) -> None:
        self._block = None
        super().__exit__(exc_type, exc, tb)

    def __repr__(self) -> str:
        return f"{type(self).__name__}()"


class Collector(ObservedBlock):
    """A block that keeps every autotune record, compile event and compile attestation it hears of."""

    def __init__(self, *, need_autotune: bool = True) -> None:
        self.need_autotune = need_autotune
        self.records: list[AutotuneRecord] = []
        self.compiles: list[CompileEvent] = []
        self.attestations: list[CompileAttestation] = []

    def on_autotune(self, record: AutotuneRecord) -> None:
        self.records.append(record)

    def on_compile(self, event: CompileEvent) -> None:
        self.compiles.append(event)

    def on_attestation(self, attestation: CompileAttestation) -> None:
        self.attestations.append(attestation)


class record_autotune(Collector):
    """Collect one :class:`~inductor_knobs.core.events.AutotuneRecord` per op autotuned on this thread (and tasks
    started from it) in ``records``, and Dynamo's compile events in ``compiles``.

    Relies on ``torch._inductor.select_algorithm.add_feedback_saver`` (torch 2.5+) and Dynamo's compile callbacks.

    Raises (on enter):
        NotSupportedOnThisTorch: torch 2.4 (no feedback savers).
        UnsupportedTorchVersion: torch outside 2.4–2.15.
    """

    @property
    def benchmarked(self) -> list[AutotuneRecord]:
        """The records whose timings were freshly benchmarked (not from a cache)."""
        return [r for r in self.records if not r.from_cache]

    @property
    def benchmark_seconds(self) -> float:
        """Total seconds of benchmarking and precompiling torch reported."""
        return sum((r.benchmark_seconds or 0.0) + (r.precompile_seconds or 0.0) for r in self.records)

    def by_shape(self) -> dict[str, list[AutotuneRecord]]:
        """Records grouped by ``op(shape, shape)`` (hinted sizes), in first-seen order."""
        groups: dict[str, list[AutotuneRecord]] = defaultdict(list)
        for rec in self.records:
            groups[rec.signature].append(rec)
        return dict(groups)

    def table(self, top: int = 10) -> str:
        """Human-readable table (like torch's ``AUTOTUNE mm(...)`` block), ``top`` choices per op."""
        return format_table(self.records, top=top)

    def lookup_table(self, *, top: int = 1, device: bool = True) -> dict[str, list[dict[str, Any]]]:
        """The recorded choices as torch's GEMM lookup table (``lookup_table.table``, 2.10+), for
        ``ik.knobs(lookup_table=...)``.

        Args:
            top (int): the fastest entries kept per key (>= 1).
            device (bool): key entries by the GPU's name too (torch tries that key first).

        Returns:
            dict: the table; empty when no choice had a key (CPU C++ template choices, torch < 2.10).

        Raises:
            InvalidKnobValue: ``top`` < 1.
        """
        from .lookup_table import table_from_records

        return table_from_records(self.records, top=top, device=device)

    def write_lookup_table(self, path: str | os.PathLike[str], *, top: int = 1, device: bool = True) -> int:
        """Write :meth:`lookup_table` as JSON to ``path`` (atomically); returns the number of keys.

        Raises:
            InvalidKnobValue: ``top`` < 1, or no recorded choice has a lookup key (nothing to pin).
            OSError: the file cannot be written.
        """
        from ..errors import InvalidKnobValue, torch_version
        from .lookup_table import write_table

        table = self.lookup_table(top=top, device=device)
        if not table:
            raise InvalidKnobValue(
                f"write_lookup_table({os.fspath(path)!r}): none of the {len(self.records)} autotuned ops has a choice torch's "
                f"lookup table can hold on torch {torch_version()} (it needs torch 2.10+ and a KernelTemplateChoice: "
                "Triton or ATen GEMMs, not the C++ GEMM template)"
            )
        return write_table(path, table)

    def to_jsonl(self, path: str | os.PathLike[str]) -> int:
        """Write one JSON object per line (``"type"``: ``compile``, ``attestation``, ``autotune``); returns the count."""
        rows: list[dict[str, Any]] = [{"type": "compile", **e.to_dict()} for e in self.compiles]
        rows += [{"type": "attestation", **a.to_dict()} for a in self.attestations]
        rows += [{"type": "autotune", **r.to_dict()} for r in self.records]
        return write_jsonl(path, rows)

    def __repr__(self) -> str:
        return f"record_autotune({len(self.records)} records, {len(self.benchmarked)} benchmarked, {len(self.compiles)} compiles)"


class record_compiles(Collector):
    """Collect what every Inductor compile in this thread (and its tasks) compiled with, on torch 2.4–2.15.

    ``attestations``: one :class:`~inductor_knobs.core.attestation.CompileAttestation` per graph (cache hits
    included); ``compiles``: Dynamo's compile events with their recompile reasons.

    Raises (on enter):
        UnsupportedTorchVersion: torch outside 2.4–2.15.
    """

    def __init__(self) -> None:
        super().__init__(need_autotune=False)

    def __repr__(self) -> str:
        bad = sum(not a.ok for a in self.attestations)
        hits = sum(a.cache_hit for a in self.attestations)
        return (
            f"record_compiles({len(self.attestations)} graphs, {hits} from a cache, {bad} with a knob not applied, "
            f"{len(self.compiles)} compiles)"
        )
