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
from .observers import HooksUse
from .patching import SharedPatch
from .undo import Change

_Block = TypeVar("_Block", bound="ObservedBlock")


class PatchUse(Change):
    """Undo record: hold a :class:`~inductor_knobs.core.patching.SharedPatch` (idempotent both ways)."""

    __slots__ = ("patch",)

    def __init__(self, patch: SharedPatch) -> None:
        self.patch = patch

    @property
    def description(self) -> str:
        return f"use {self.patch.name}"

    def apply(self) -> None:
        self.patch.acquire(self)

    def revert(self) -> None:
        self.patch.release(self)


def subscription_records(consumer: Any, scope: str, *, hooks: bool, need_autotune: bool) -> list[Change]:
    """The undo records that deliver compile events to ``consumer``: the hooks it needs, then its subscription.

    Args:
        consumer: an object with some of ``on_autotune``, ``on_compile``, ``on_runtime``, ``on_attestation``, and
            optionally ``patches``: more shared patches to hold with the hooks (``ik.serving``'s first-call hooks).
        scope: ``"context"`` or ``"process"`` (:class:`~inductor_knobs.core.events.Subscribe`).
        hooks: hold the observer hooks (autotune, Dynamo compiles) and the consumer's ``patches``.
        need_autotune: with ``hooks``, refuse a torch without feedback savers (< 2.5).
    """
    records: list[Change] = [HooksUse(need_autotune=need_autotune)] if hooks else []
    if hooks:
        records += [PatchUse(patch) for patch in getattr(consumer, "patches", ())]
    if callable(getattr(consumer, "on_attestation", None)):  # attestations come from the compile interception
        records.append(InterceptionUse(torch_compat.installed(strict=False)))
    records.append(Subscribe(consumer, scope))
    return records


class Subscription(UndoContext):
    """A block that delivers compile events to ``consumer`` while it lasts (``ik.compile``'s report, tests).

    Args:
        consumer: as for :func:`subscription_records`.
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
    """A block that receives compile events itself (recorders, guards): a frame on the block stack like ``ik.knobs``.

    Its records (:func:`subscription_records`) are the hooks it needs and its subscription to the
    compile-event channel, applied and reverted by the same loop as config changes: an exit out of
    order, an interrupt or ``-W error`` treat them as they treat config.  It changes no Inductor
    config, so it claims nothing before torch 2.12.  One object observes one block at a time.
    """

    #: Raise NotSupportedOnThisTorch on enter when torch cannot report autotuning.
    need_autotune: bool = True
    #: Which compiles it hears of: ``"context"`` (this thread/task and its children) or ``"process"``.
    event_scope = "context"
    changes_config = False
    #: More shared patches held while it observes (:func:`subscription_records`).
    patches: tuple[SharedPatch, ...] = ()
    #: Whether this object is inside its block now (a serving guard's fast path reads it every call).
    _block: bool | None = None

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
    """Collect one :class:`~inductor_knobs.core.events.AutotuneRecord` per autotuned op, and the Dynamo compiles.

    Records what Inductor autotunes on this thread (and in tasks started from it) while inside
    the block: the op, its input shapes/strides/dtypes, every choice with its kind (aten, triton,
    cutlass, cpp, …), template parameters and time in ms, the winner, the benchmarking and
    precompile seconds, and whether the timings came from Inductor's autotune cache.

    Example::

        with ik.record_autotune() as rec:
            compiled(x)
        print(rec.table())
        rec.to_jsonl("autotune.jsonl")

    Relies on ``torch._inductor.select_algorithm.add_feedback_saver`` (torch 2.5+; callbacks get
    4 arguments in 2.5–2.7, 5 in 2.8–2.10, 6 in 2.11+) and Dynamo's compile callbacks.

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
        """Total seconds of benchmarking and precompiling torch reported, over all records."""
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
        """The recorded choices as torch's GEMM lookup table (``lookup_table.table``, 2.10+): per key, the ``top``
        fastest (:func:`inductor_knobs.core.lookup_table.table_from_records`).  Load it with
        ``ik.knobs(lookup_table=...)`` to compile with these choices and, with ``top=1``, no benchmarking.

        Args:
            top (int): entries per key (>= 1).
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
        """Write one JSON object per line: ``{"type": "autotune", ...}`` and ``{"type": "compile", ...}``.

        Returns:
            The number of lines written.
        """
        rows: list[dict[str, Any]] = [{"type": "compile", **e.to_dict()} for e in self.compiles]
        rows += [{"type": "attestation", **a.to_dict()} for a in self.attestations]
        rows += [{"type": "autotune", **r.to_dict()} for r in self.records]
        return write_jsonl(path, rows)

    def __repr__(self) -> str:
        return f"record_autotune({len(self.records)} records, {len(self.benchmarked)} benchmarked, {len(self.compiles)} compiles)"


class record_compiles(Collector):
    """Collect what every Inductor compile in this thread (and its tasks) compiled with.

    ``attestations`` holds one :class:`~inductor_knobs.core.attestation.CompileAttestation` per
    graph (forward, backward, inference; every recompile): each value inductor_knobs asked for
    as read *inside* Inductor's compile, where it came from, and the ``is_big_gpu`` verdict per
    CUDA device; ``compiles`` holds Dynamo's compile events with their recompile reasons.  A
    compile served from a cache is attested too (``attestation.cache``: ``"fx_graph"`` or
    ``"aot_autograd"``, whose one attestation covers the whole compile), from what torch hashed
    into the cache key.  Works on every supported torch (2.4–2.15); it does not need autotune
    reporting.

    Example (also on a warm cache, in a second process on the same cache directory)::

        with ik.record_compiles() as rec, ik.knobs(coordinate_descent_tuning=False):
            torch.compile(f, mode="max-autotune-no-cudagraphs")(x)
        assert rec.attestations[0].value("coordinate_descent_tuning") is False
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
