"""The one compile-event channel: what happened in a compile, published once, delivered to every live consumer.

Torch reports a compile through several hooks (Dynamo's compile callbacks, Inductor's feedback
savers, the compile interception's attestation, timing wrappers of first-call costs; see
:mod:`inductor_knobs.core.observers` and :mod:`inductor_knobs.core.interception`).  Each hook calls
:func:`publish` with one event: an :class:`~inductor_knobs.core.events.AutotuneRecord` (``"autotune"``),
a :class:`~inductor_knobs.core.events.CompileEvent` (``"compile"``), a
:class:`~inductor_knobs.core.events.RuntimeEvent` (``"runtime"``) or a
:class:`~inductor_knobs.core.attestation.CompileAttestation` (``"attestation"``).  It reaches each
live consumer that has a method ``on_<kind>``.

Consumers are live while a :class:`Subscribe` undo record holds them: a recorder's or guard's
block, ``ik.compile``'s backend around each compile.  The registry is process-wide and a record
removes exactly its own entry, so an exit out of order cannot revive an ended consumer or drop a
live one.  Which compiles a consumer hears of is its scope:

- ``"context"`` (recorders, ``ik.compile``): compiles that run in the thread or asyncio task that
  subscribed, and in tasks and copied contexts started from it.  The subscriber's mark is put in a
  ``ContextVar`` that children inherit; a backward that AOTAutograd compiles lazily, after the
  block or on another thread, carries the marks its forward's compile had.
- ``"process"`` (serving guards): compiles on every thread; each event is published on the thread
  that compiled, so a consumer can tell them apart with ``threading.get_ident()``.
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
    """One live consumer: the object whose ``on_<kind>`` methods receive events, and its scope."""

    __slots__ = ("consumer", "handlers", "mark", "scope")

    def __init__(self, consumer: Any, scope: str) -> None:
        self.consumer = consumer
        self.scope = scope
        #: Unique for the process's life (an ``id`` could be reused by a later subscriber, and a child
        #: context may still hold an ended one's mark).
        self.mark = next(_MARK_NUMBERS)
        #: kind -> the bound method, or None when the consumer does not take that kind.
        self.handlers = {kind: getattr(consumer, f"on_{kind}", None) for kind in KINDS}

    def hears(self, marks: frozenset[int]) -> bool:
        return self.scope == "process" or self.mark in marks


_MARK_NUMBERS = itertools.count(1)
_LIVE: tuple[Subscriber, ...] = ()  # replaced whole under the lock, read without it
_LOCK = threading.RLock()  # an RLock only so a test can tell this thread holds it (_is_owned)
_MARKS: contextvars.ContextVar[frozenset[int]] = contextvars.ContextVar("inductor_knobs.event_marks", default=frozenset())


def current_marks() -> frozenset[int]:
    """The scope marks of the running thread/task (a compile keeps them for its lazily compiled backward)."""
    return _MARKS.get()


def listeners(marks: frozenset[int] | None = None) -> tuple[Subscriber, ...]:
    """The live subscribers that hear events published under ``marks`` (default: the running context's)."""
    live = _LIVE
    if not live:
        return ()
    marks = _MARKS.get() if marks is None else marks
    return tuple(s for s in live if s.hears(marks))


def publish(kind: str, event: Any, marks: frozenset[int] | None = None) -> None:
    """Deliver ``event`` to every live subscriber that hears ``marks`` (default: the running context's).

    Synchronous, on the publishing thread: what a consumer raises propagates into the compile
    (a guard's ``on="raise"``).
    """
    if _LIVE:
        deliver(listeners(marks), kind, event)


def deliver(subscribers: Iterable[Subscriber], kind: str, event: Any) -> None:
    """Deliver ``event`` to ``subscribers`` (those a compile addressed when it started)."""
    for subscriber in subscribers:
        handler = subscriber.handlers[kind]
        if handler is not None:
            handler(event)


def _add(subscriber: Subscriber) -> None:
    global _LIVE
    with _LOCK, SAFE_EXIT:
        if subscriber not in _LIVE:
            _LIVE = (*_LIVE, subscriber)


def _remove(subscriber: Subscriber) -> None:
    global _LIVE
    with _LOCK, SAFE_EXIT:
        _LIVE = tuple(s for s in _LIVE if s is not subscriber)


class Subscribe(Change):
    """Undo record: ``consumer`` receives compile events while the record is applied.

    Args:
        consumer: any object with some of ``on_autotune``, ``on_compile``, ``on_runtime``,
            ``on_attestation`` (each takes the event).
        scope: ``"context"`` or ``"process"`` (see the module docstring).

    Apply adds a fresh subscriber (and, for ``"context"``, its mark in the running context); revert
    removes that subscriber and that mark only.  Both are idempotent.  A hook that a consumer needs
    (the interception, the observer hooks) is held by its own record before this one.
    """

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
        subscriber = Subscriber(self.consumer, self.scope)
        self._subscriber = subscriber  # first: revert takes back whatever part of the rest happened
        if self.scope == "context":
            _MARKS.set(_MARKS.get() | {subscriber.mark})
        _add(subscriber)

    def revert(self) -> None:
        subscriber = self._subscriber
        if subscriber is None:
            return
        _remove(subscriber)
        marks = _MARKS.get()
        if subscriber.mark in marks:
            _MARKS.set(marks - {subscriber.mark})
        self._subscriber = None  # last: a revert interrupted before it runs again in full


#: ``ChoiceCaller.info_dict()["backend"]`` (torch's spelling) -> the kind this package reports.
CHOICE_KINDS = {"extern": "aten", "triton": "triton", "cuda": "cutlass", "cpp": "cpp", "rocm": "ck"}


@dataclass(frozen=True)
class ChoiceTiming:
    """One candidate kernel of an autotuned op.

    Attributes:
        name: torch's name for the choice (``triton_mm_11``, ``mm``, ``cpp_CppMicroGemmFP32Vec_0``).
        kind: ``aten``, ``triton``, ``cutlass``, ``cpp``, ``ck`` or torch's own backend word.
        params: template parameters (BLOCK_M, num_warps, …) as torch describes them.
        time_ms: benchmarked time in milliseconds; None if the choice failed (torch: ``inf``).
        precompile_ms: precompile time in milliseconds where torch reports it (2.11+), else None.
        lookup_key: the key torch's GEMM lookup table (``lookup_table.table``, 2.10+) finds this choice
            under, device-agnostic (``"((torch.float16, [64, 128], [128, 1]), ...)+mm"``); None where torch
            built the choice without a ``KernelTemplateChoice`` (the C++ GEMM template, torch < 2.10).
        lookup_device_key: the same key with the GPU's name first, which torch tries first (CUDA only).
        lookup_entry: the choice as a table entry (``template_id``, template parameters, ``template_hash``).
    """

    name: str
    kind: str
    params: dict[str, Any]
    time_ms: float | None
    precompile_ms: float | None = None
    lookup_key: str | None = None
    lookup_device_key: str | None = None
    lookup_entry: dict[str, Any] | None = None


@dataclass(frozen=True)
class AutotuneRecord:
    """One autotuned op.

    Attributes:
        op: the op torch autotuned (``mm``, ``addmm``, ``bmm``, ``linear_unary``, …).
        shapes: input sizes; a symbolic size is its expression (``"s0"``).
        shape_hints: input sizes with symbols replaced by the hint torch benchmarked with.
        strides: input strides (same conventions as ``shapes``).
        dtypes: input dtypes (``"torch.bfloat16"``).
        choices: every candidate, fastest first.
        winner: the fastest choice's name (what the timings favour).
        benchmark_seconds: wall seconds torch spent benchmarking (0.0 when the timings came
            from a cache; None when torch did not report it).
        precompile_seconds: wall seconds torch spent precompiling choices (as above).
        from_cache: the timings came from Inductor's autotune cache (no benchmarking ran).
        compile_id: Dynamo's compile id (``"0/1"``) when known.
    """

    op: str
    shapes: list[list[int | str]]
    shape_hints: list[list[int]] | None
    strides: list[list[int | str]] | None
    dtypes: list[str]
    choices: list[ChoiceTiming]
    winner: str | None
    benchmark_seconds: float | None
    precompile_seconds: float | None
    from_cache: bool
    compile_id: str | None = None

    @property
    def signature(self) -> str:
        """``mm(560x3420, 3420x1280)``: the op and its (hinted) input shapes, as torch prints them."""
        shapes = self.shape_hints or self.shapes
        return f"{self.op}({', '.join('x'.join(str(d) for d in s) for s in shapes)})"

    def to_dict(self) -> dict[str, Any]:
        """A JSON-ready dict (``inf`` timings are already None)."""
        return asdict(self)


@dataclass(frozen=True)
class CompileEvent:
    """One Dynamo compilation.

    Attributes:
        compile_id: Dynamo's compile id (``"0/1"``: frame 0, its second compilation) when known.
        recompile: True when an earlier compilation of the same frame existed (a guard failed).
        reasons: Dynamo's guard-failure reasons for a recompile (``"tensor 'x' size mismatch at
            index 0. expected 1024, actual 2048"``); empty for a first compile.
        trigger: what started it: ``dynamo`` or, on torch 2.8+, ``lazy_backward``,
            ``cudagraph_recording`` etc.
        code: the recompiled function as ``name (file:line)``; known for recompiles.
        inputs: the recompiled frame's tensor arguments as ``{name: "torch.float32[2048, 3420]"}``.
    """

    compile_id: str | None
    recompile: bool
    reasons: list[str] = field(default_factory=list)
    trigger: str = "dynamo"
    code: str | None = None
    inputs: dict[str, str] = field(default_factory=dict)

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
    """A first-call cost torch paid inside a call: what it was, how long, and where.

    Attributes:
        kind: ``dynamo_compile`` (published by the core's observer hooks), or one of the causes
            ``ik.serving`` times and names (``inductor_knobs.serving.first_call_costs.CAUSES``).
        seconds: wall seconds it took (host side).
        detail: what torch said about it: the op and shapes, the kernel, Dynamo's recompile reason.
        started: ``time.perf_counter()`` when it started, or None when only its length is known
            (profiled ops), so nested events are not counted twice.
    """

    kind: str
    seconds: float
    detail: str = ""
    started: float | None = None

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def finite_or_none(value: float) -> float | None:
    """torch marks failed choices with ``inf``; JSON has no ``inf``, so they become None."""
    return float(value) if math.isfinite(value) else None


def format_table(records: Iterable[AutotuneRecord], top: int = 10) -> str:
    """The human table, like torch's ``AUTOTUNE mm(...)`` block, for each record.

    Args:
        records: what to show.
        top: choices shown per record (fastest first).
    """
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
    """Dynamo's id of the compile running on this thread (``"0/1"``), or None outside one.

    Relies on ``torch._guards.CompileContext.current_compile_id()`` (torch 2.4-2.15).
    """
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
        time_ms=finite_or_none(time),
        precompile_ms=None if precompile_seconds is None else 1000.0 * precompile_seconds,
        **_lookup(choice, op),
    )


def _lookup(choice: Any, op: str) -> dict[str, Any]:
    """The choice's lookup-table key (device-agnostic and per device) and entry, or nothing (see ``ChoiceTiming``)."""
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
    """Symbolic sizes as the ints torch benchmarked with.

    ``SizeVarAllocator.size_hints`` (2.4–2.11) was renamed ``optimization_hints`` (2.11+).
    """
    try:
        from torch._inductor.virtualized import V

        sizevars = V.graph.sizevars
        hints = getattr(sizevars, "optimization_hints", None) or getattr(sizevars, "size_hints")  # noqa: B009
        return [[int(h) for h in hints(s)] if s is not None else [] for s in sizes]
    except Exception:  # noqa: BLE001 - outside a graph, or a size without a hint
        return None
