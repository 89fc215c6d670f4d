"""``with ik.record_autotune() as rec:``: what autotuning chose, as data instead of stderr text."""

from __future__ import annotations

import os
from collections import defaultdict
from contextlib import ExitStack
from typing import Any

from .interception import CompileAttestation, InterceptionUse, listening
from .observe import ObservedBlock
from .records import AutotuneRecord, CompileEvent, format_table, write_jsonl


class Collector(ObservedBlock):
    """An observer that keeps every autotune record, compile event and compile attestation it sees."""

    def __init__(self, *, need_autotune: bool = True) -> None:
        self.need_autotune = need_autotune
        self.records: list[AutotuneRecord] = []
        self.compiles: list[CompileEvent] = []
        self.attestations: list[CompileAttestation] = []
        self._attesting: ExitStack | None = None

    def __enter__(self) -> Any:
        from . import torch_compat

        super().__enter__()
        stack = ExitStack()
        try:
            use = InterceptionUse(torch_compat.installed(strict=False))
            use.apply()
            stack.callback(use.revert)
            stack.enter_context(listening(self.attestations.append))
        except BaseException:
            stack.close()
            super().__exit__(None, None, None)
            raise
        self._attesting = stack
        return self

    def __exit__(self, exc_type: object, exc: BaseException | None, tb: object) -> None:
        stack, self._attesting = self._attesting, None
        try:
            if stack is not None:
                stack.close()
        finally:
            super().__exit__(exc_type, exc, tb)

    def on_autotune(self, record: AutotuneRecord) -> None:
        self.records.append(record)

    def on_compile(self, event: CompileEvent) -> None:
        self.compiles.append(event)


class record_autotune(Collector):
    """Collect one :class:`~inductor_knobs.records.AutotuneRecord` per autotuned op, and the Dynamo compiles.

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

    ``attestations`` holds one :class:`~inductor_knobs.interception.CompileAttestation` per
    graph (forward, backward, inference; every recompile): each value inductor_knobs asked for
    as read *inside* Inductor's compile, where it came from, and the ``is_big_gpu`` verdict per
    CUDA device; ``compiles`` holds Dynamo's compile events with their recompile reasons.
    Works on every supported torch (2.4–2.15); it does not need autotune reporting.

    Example::

        with ik.record_compiles() as rec, ik.knobs(coordinate_descent_tuning=False):
            torch.compile(f, mode="max-autotune-no-cudagraphs")(x)
        assert rec.attestations[0].value("coordinate_descent_tuning") is False
    """

    def __init__(self) -> None:
        super().__init__(need_autotune=False)

    def __repr__(self) -> str:
        bad = sum(not a.ok for a in self.attestations)
        return f"record_compiles({len(self.attestations)} graphs, {bad} with a knob not applied, {len(self.compiles)} compiles)"
