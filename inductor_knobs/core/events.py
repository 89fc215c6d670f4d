"""The one compile-event channel: what happened in a compile, published once, delivered to every live consumer.

Hooks (:mod:`~inductor_knobs.core.observers`, :mod:`~inductor_knobs.core.interception`, serving's timers) call
:func:`publish` with an :class:`AutotuneRecord` (``"autotune"``), :class:`CompileEvent` (``"compile"``),
:class:`RuntimeEvent` (``"runtime"``) or ``CompileAttestation`` (``"attestation"``); each live consumer with a
method ``on_<kind>`` gets it, synchronously.  A :class:`Subscribe` record keeps a consumer live and removes exactly
its own entry.  Scope ``"context"``: compiles in the subscribing thread/task and contexts copied from it (a
``ContextVar`` of marks; a lazily compiled backward keeps its forward's marks); ``"process"``: every thread.
"""

from __future__ import annotations

import contextvars
import itertools
import json
import math
import os
import threading
from collections.abc import Iterable
from dataclasses import asdict, dataclass, field
from typing import Any

from .undo import SAFE_EXIT, Change

KINDS = ("autotune", "compile", "runtime", "attestation")
SCOPES = ("context", "process")


class Subscriber:
    """One live consumer, its scope and its ``on_<kind>`` handlers (None where it has none)."""

    __slots__ = ("consumer", "handlers", "mark", "scope")

    def __init__(self, consumer: Any, scope: str) -> None:
        self.consumer = consumer
        self.scope = scope
        # Unique for the process's life: an id() could be reused while a child context holds an ended one's mark.
        self.mark = next(_MARK_NUMBERS)
        self.handlers = {kind: getattr(consumer, f"on_{kind}", None) for kind in KINDS}

    def hears(self, marks: frozenset[int]) -> bool:
        return self.scope == "process" or self.mark in marks


_MARK_NUMBERS = itertools.count(1)
_LIVE: tuple[Subscriber, ...] = ()  # replaced whole under the lock, read without it
_LOCK = threading.RLock()  # an RLock only so a test can tell this thread holds it (_is_owned)
#: The scope marks of the running thread/task: each subscriber in scope "context" adds its own (children inherit them).
MARKS: contextvars.ContextVar[frozenset[int]] = contextvars.ContextVar("inductor_knobs.event_marks", default=frozenset())


def current_marks() -> frozenset[int]:
    """The scope marks of the running thread/task."""
    return MARKS.get()


def listeners(marks: frozenset[int] | None = None) -> tuple[Subscriber, ...]:
    """The live subscribers that hear events published under ``marks`` (default: the running context's)."""
    live = _LIVE
    if not live:
        return ()
    marks = MARKS.get() if marks is None else marks
    return tuple(s for s in live if s.hears(marks))


def publish(kind: str, event: Any, marks: frozenset[int] | None = None) -> None:
    """Deliver ``event`` to every live subscriber that hears ``marks``; what a consumer raises propagates."""
    if _LIVE:
        deliver(listeners(marks), kind, event)


def deliver(subscribers: Iterable[Subscriber], kind: str, event: Any) -> None:
    """Deliver ``event`` to ``subscribers``."""
    for subscriber in subscribers:
        handler = subscriber.handlers[kind]
        if handler is not None:
            handler(event)


class Subscribe(Change):
    """Undo record: ``consumer``'s ``on_<kind>`` methods receive events in ``scope`` while applied (idempotent;
    revert removes only this record's subscriber and mark)."""

    __slots__ = ("_subscriber", "consumer", "scope")

    def __init__(self, consumer: Any, scope: str = "context") -> None:
        if scope not in SCOPES:
            raise ValueError(f"scope={scope!r}: allowed {', '.join(SCOPES)}")
        self.consumer = consumer
        self.scope = scope
        self._subscriber: Subscriber | None = None

    @property
    def description(self) -> str:
        return f"deliver compile events ({self.scope}) to {type(self.consumer).__name__}"

    def apply(self) -> None:
        global _LIVE
        subscriber = Subscriber(self.consumer, self.scope)
        self._subscriber = subscriber  # first: revert takes back whatever part of the rest happened
        if self.scope == "context":
            MARKS.set(MARKS.get() | {subscriber.mark})
        with _LOCK, SAFE_EXIT:
            if subscriber not in _LIVE:
                _LIVE = (*_LIVE, subscriber)

    def revert(self) -> None:
        global _LIVE
        subscriber = self._subscriber
        if subscriber is None:
            return
        with _LOCK, SAFE_EXIT:
            _LIVE = tuple(s for s in _LIVE if s is not subscriber)
        marks = MARKS.get()
        if subscriber.mark in marks:
            MARKS.set(marks - {subscriber.mark})
        self._subscriber = None  # last: a revert interrupted before it runs again in full


#: ``ChoiceCaller.info_dict()["backend"]`` -> the kind this package reports.
CHOICE_KINDS = {"extern": "aten", "triton": "triton", "cuda": "cutlass", "cpp": "cpp", "rocm": "ck"}


@dataclass(frozen=True)
class ChoiceTiming:
    """One candidate kernel of an autotuned op (lookup-table fields: torch 2.10+ ``lookup_table.table``)."""

    name: str  #: torch's name for the choice (``triton_mm_11``, ``mm``).
    kind: str  #: ``aten``, ``triton``, ``cutlass``, ``cpp``, ``ck`` or torch's own backend word.
    params: dict[str, Any]  #: template parameters (BLOCK_M, num_warps, …).
    time_ms: float | None  #: benchmarked milliseconds; None if the choice failed (torch: ``inf``).
    precompile_ms: float | None = None  #: precompile milliseconds (torch 2.11+), else None.
    #: the device-agnostic lookup-table key; None without a ``KernelTemplateChoice`` (C++ GEMM template, < 2.10).
    lookup_key: str | None = None
    lookup_device_key: str | None = None  #: the same key with the GPU's name first, tried first (CUDA only).
    #: the choice as a table entry (``template_id``, template parameters, ``template_hash``).
    lookup_entry: dict[str, Any] | None = None


@dataclass(frozen=True)
class AutotuneRecord:
    """One autotuned op; a symbolic size is its expression (``"s0"``)."""

    op: str  #: the op torch autotuned (``mm``, ``addmm``, ``bmm``, …).
    shapes: list[list[int | str]]  #: input sizes.
    shape_hints: list[list[int]] | None  #: input sizes with symbols replaced by the hint torch benchmarked with.
    strides: list[list[int | str]] | None  #: input strides.
    dtypes: list[str]  #: input dtypes (``"torch.bfloat16"``).
    choices: list[ChoiceTiming]  #: every candidate, fastest first.
    winner: str | None  #: the fastest choice's name.
    benchmark_seconds: float | None  #: wall seconds of benchmarking (0.0 from a cache; None: torch did not say).
    precompile_seconds: float | None  #: wall seconds of precompiling (as above).
    from_cache: bool  #: the timings came from Inductor's autotune cache.
    compile_id: str | None = None  #: Dynamo's compile id (``"0/1"``) when known.

    @property
    def signature(self) -> str:
        """``mm(560x3420, 3420x1280)``: the op and its (hinted) input shapes."""
        shapes = self.shape_hints or self.shapes
        return f"{self.op}({', '.join('x'.join(str(d) for d in s) for s in shapes)})"

    def to_dict(self) -> dict[str, Any]:
        """A JSON-ready dict (``inf`` timings are already None)."""
        return asdict(self)


@dataclass(frozen=True)
class CompileEvent:
    """One Dynamo compilation."""

    compile_id: str | None  #: Dynamo's compile id (``"0/1"``: frame 0, its second compilation) when known.
    recompile: bool  #: an earlier compilation of the same frame existed (a guard failed).
    reasons: list[str] = field(default_factory=list)  #: Dynamo's guard-failure reasons; empty for a first compile.
    trigger: str = "dynamo"  #: ``dynamo`` or, on torch 2.8+, ``lazy_backward``, ``cudagraph_recording`` etc.
    code: str | None = None  #: the recompiled function as ``name (file:line)``.
    inputs: dict[str, str] = field(default_factory=dict)  #: tensor arguments: ``{name: "torch.float32[2048, 3420]"}``.

    def describe(self) -> str:
        """One line: what compiled and why."""
        what = "recompile" if self.recompile else "compile"
        where = f" of {self.code}" if self.code else ""
        why = f" because {'; '.join(self.reasons)}" if self.reasons else ""
        inputs = f" [inputs: {', '.join(f'{k}={v}' for k, v in self.inputs.items())}]" if self.inputs else ""
        return f"Dynamo {what} {self.compile_id or '?'}{where} ({self.trigger}){why}{inputs}"

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass(frozen=True)
class RuntimeEvent:
    """A first-call cost torch paid inside a call."""

    kind: str  #: ``dynamo_compile``, or a cause ``ik.serving`` times (``serving.first_call_costs.CAUSES``).
    seconds: float  #: host wall seconds it took.
    detail: str = ""  #: what torch said: the op and shapes, the kernel, Dynamo's recompile reason.
    started: float | None = None  #: ``time.perf_counter()`` at its start, or None when only its length is known.

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def format_table(records: Iterable[AutotuneRecord], top: int = 10) -> str:
    """The human table, like torch's ``AUTOTUNE mm(...)`` block, with the ``top`` fastest choices per record."""
    lines: list[str] = []
    for rec in records:
        if rec.from_cache:
            source = "from cache"
        elif rec.benchmark_seconds is None:
            source = "benchmarked"
        else:
            source = f"benchmarked in {rec.benchmark_seconds:.3f} s + {rec.precompile_seconds or 0:.3f} s precompile"
        lines.append(f"AUTOTUNE {rec.signature}  [{source}; {len(rec.choices)} choices; compile {rec.compile_id or '?'}]")
        best = rec.choices[0].time_ms if rec.choices else None
        for choice in rec.choices[:top]:
            if choice.time_ms is None:
                timing = "failed"
            else:
                share = f"{100 * best / choice.time_ms:5.1f}%" if best and choice.time_ms else "  n/a"
                timing = f"{choice.time_ms:.4f} ms {share}"
            params = ", ".join(f"{k}={v}" for k, v in choice.params.items())
            lines.append(f"  {choice.name:<32} {choice.kind:<8} {timing}  {params}".rstrip())
    return "\n".join(lines)


def write_jsonl(path: str | os.PathLike[str], rows: Iterable[dict[str, Any]]) -> int:
    """Write one JSON object per line; returns the number of lines written."""
    count = 0
    with open(path, "w", encoding="utf-8") as out:
        for row in rows:
            out.write(json.dumps(row, default=str) + "\n")
            count += 1
    return count


def current_compile_id() -> str | None:
    """Dynamo's id of the compile running on this thread (``torch._guards.CompileContext``), or None."""
    try:
        from torch._guards import CompileContext

        compile_id = CompileContext.current_compile_id()
    except (ImportError, AttributeError):
        return None
    return None if compile_id is None else str(compile_id)


def record_event(
    timings: dict[Any, float],
    name: str,
    input_nodes: list[Any],
    precompile_times: dict[Any, float],
    fresh: bool,
    timing: tuple[str, float, float] | None,
) -> AutotuneRecord:
    choices = sorted(
        (_choice(c, t, precompile_times.get(c), name) for c, t in timings.items()),
        key=lambda c: (c.time_ms is None, c.time_ms or 0.0),
    )
    if not fresh:
        seconds: tuple[float | None, float | None] = (0.0, 0.0)
    elif timing is not None and timing[0] == name:
        seconds = (timing[1], timing[2])
    else:
        seconds = (None, None)
    return AutotuneRecord(
        op=name,
        shapes=[_ints_or_text(_call(n, "get_size")) for n in input_nodes],
        shape_hints=_hints([_call(n, "get_size") for n in input_nodes]),
        strides=[_ints_or_text(_call(n, "get_stride")) for n in input_nodes],
        dtypes=[str(_call(n, "get_dtype")) for n in input_nodes],
        choices=choices,
        winner=choices[0].name if choices and choices[0].time_ms is not None else None,
        benchmark_seconds=seconds[0],
        precompile_seconds=seconds[1],
        from_cache=not fresh,
        compile_id=current_compile_id(),
    )


def _choice(choice: Any, time: float, precompile_seconds: float | None, op: str = "") -> ChoiceTiming:
    try:
        info = dict(choice.info_dict())
    except Exception:  # noqa: BLE001 - a choice kind whose info_dict fails; report it without params
        info = {}
    backend = str(info.pop("backend", "")).lower()
    info.pop("kernel_name", None)
    params = {k: v if isinstance(v, (int, float, str, bool, type(None))) else str(v) for k, v in info.items()}
    description = getattr(choice, "description", "")
    if not params and description:
        params = {"description": str(description)}
    return ChoiceTiming(
        name=str(getattr(choice, "name", choice)),
        kind=CHOICE_KINDS.get(backend, backend or type(choice).__name__),
        params=params,
        time_ms=float(time) if math.isfinite(time) else None,  # torch times a failed choice as inf
        precompile_ms=None if precompile_seconds is None else 1000.0 * precompile_seconds,
        **_lookup(choice, op),
    )


def _lookup(choice: Any, op: str) -> dict[str, Any]:
    """The choice's ``lookup_*`` fields of :class:`ChoiceTiming`, or none."""
    annotations = getattr(choice, "annotations", None)
    ktc = annotations.get("ktc") if isinstance(annotations, dict) else None
    if ktc is None or not op:
        return {}
    from . import torch_compat

    patches = torch_compat.installed(strict=False)
    try:
        entry = patches.lookup_entry(ktc)
        json.dumps(entry)  # torch's format is JSON: a parameter that is not is no entry
        return {
            "lookup_key": patches.lookup_key(ktc, op, device=False),
            "lookup_device_key": patches.lookup_key(ktc, op, device=True),
            "lookup_entry": entry,
        }
    except Exception:  # noqa: BLE001 - a choice torch cannot key or serialise is simply not in the table
        return {}


def _call(node: Any, method: str) -> Any:
    try:
        return getattr(node, method)()
    except Exception:  # noqa: BLE001 - IR nodes without a layout raise assorted errors
        return None


def _ints_or_text(values: Any) -> list[int | str]:
    if values is None:
        return []
    return [int(v) if getattr(v, "is_number", True) and _is_int(v) else str(v) for v in values]


def _is_int(value: Any) -> bool:
    try:
        int(value)
    except (TypeError, ValueError):
        return False
    return True


def _hints(sizes: list[Any]) -> list[list[int]] | None:
    """Symbolic sizes as the ints torch benchmarked with (``SizeVarAllocator.size_hints`` is
    ``optimization_hints`` from 2.11)."""
    try:
        from torch._inductor.virtualized import V

        sizevars = V.graph.sizevars
        hints = getattr(sizevars, "optimization_hints", None) or getattr(sizevars, "size_hints")  # noqa: B009
        return [[int(h) for h in hints(s)] if s is not None else [] for s in sizes]
    except Exception:  # noqa: BLE001 - outside a graph, or a size without a hint
        return None
