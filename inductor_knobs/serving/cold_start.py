"""What a cold start compiled, autotuned, Triton-compiled and captured: :class:`ColdStartRecorder`, :class:`ColdStartProof`.

A process that starts serving from a bundle (:func:`~inductor_knobs.serving.bundle.load_serving_bundle`)
still traces every frame with Dynamo (torch has no way around it), but each Inductor compile must be a
cache hit, nothing may autotune and Triton may compile nothing.  The proof comes from two independent
sources, both read inside torch:

- the compile-event channel (:mod:`inductor_knobs.core.events`): one attestation per Inductor compile,
  cache hits included (``CompileAttestation.cache``: ``"fx_graph"`` or ``"aot_autograd"``, None when
  Inductor compiled), Dynamo's compile events, autotune records, and the timed first-call costs
  (runtime benchmarks, coordinate descent, Triton compiles and loads, CUDA graph captures);
- torch's own counters (``torch._dynamo.utils.counters``: FX graph and AOTAutograd cache hits, misses
  and bypasses) and Triton's compilation listener (:func:`~inductor_knobs.serving.first_call_costs.triton_compiles`,
  Triton 3.4+), as deltas over the block.

torch's counters of what a compile did inside Inductor (``select_algorithm_autotune``, the benchmarker's
calls, ``coordesc_tuning_bench`` ...) are no proof: an FX graph cache hit adds the counts its entry
recorded when it was compiled (``counters["inductor"] += graph.counter_deltas``, ``_inductor/codecache.py``
in 2.13, "pretending these counters were incremented normally"), so a process that benchmarked nothing
reads the build's benchmarks there.  Autotune benchmarks are counted from the feedback savers' records
(torch calls them only when it selects an algorithm) and the timed runtime tunings instead.
"""

from __future__ import annotations

import importlib
import sys
from collections import Counter
from dataclasses import dataclass, field
from typing import Any

from .. import AutotuneRecord, CompileAttestation, CompileEvent, RuntimeEvent
from ..ext import Collector
from .first_call_costs import FIRST_CALL_HOOKS, triton_compiles

#: torch's counters read before and after (``group.name``); a name a release lacks reads 0.
TORCH_COUNTERS = (
    "inductor.fxgraph_cache_hit",
    "inductor.fxgraph_cache_miss",
    "inductor.fxgraph_cache_bypass",
    "aot_autograd.autograd_cache_hit",
    "aot_autograd.autograd_cache_miss",
    "aot_autograd.autograd_cache_bypass",
    "inductor.triton_bundler_read_and_emit_kernel",
    "inductor.triton_bundler_load_static_autotuner",
    "stats.unique_graphs",
)
#: torch's counters of Inductor compiles that no cache served.
MISSES = ("inductor.fxgraph_cache_miss", "inductor.fxgraph_cache_bypass")
#: First-call costs that are tuning: a cold start that pays one did not come from the caches.
TUNING = ("runtime_benchmark", "coordinate_descent")


@dataclass(frozen=True)
class ColdStartProof:
    """What a block (``ik.serving.load_serving_bundle``'s load, a benchmark's setup) compiled, autotuned and captured.

    Attributes:
        dynamo_compiles: Dynamo's compile events (first compiles and recompiles, with Dynamo's reasons).
        attestations: one per Inductor compile, read inside it: ``cache`` says whether a cache served it.
        autotune: the GEMM autotune records (``from_cache``: no benchmark ran).
        runtime: the timed first-call costs heard (``runtime_benchmark``, ``coordinate_descent``,
            ``triton_compile``, ``triton_load``, ``cudagraph_recording`` ...; ``records.CAUSES``).
        counters: torch's counters over the block (``"inductor.fxgraph_cache_hit": 2``; :data:`TORCH_COUNTERS`).
        triton: ``(real compiles, Triton cache hits)`` Triton's compilation listener reported over the
            block, or None where Triton cannot say (Triton < 3.4, or no Triton: a CPU build).
        seconds: wall seconds per phase of the block (``{"load_artifacts": 0.4, "compile": 3.1, ...}``).
        triton_kernels_restored: Triton kernels a serving bundle put into this process's Triton cache
            (:func:`~inductor_knobs.serving.triton_kernels.restore`; 0 where it carried none or the cache had them).
    """

    dynamo_compiles: list[CompileEvent] = field(default_factory=list)
    attestations: list[CompileAttestation] = field(default_factory=list)
    autotune: list[AutotuneRecord] = field(default_factory=list)
    runtime: list[RuntimeEvent] = field(default_factory=list)
    counters: dict[str, int] = field(default_factory=dict)
    triton: tuple[int, int] | None = None
    seconds: dict[str, float] = field(default_factory=dict)
    triton_kernels_restored: int = 0

    @property
    def inductor_hits(self) -> dict[str, int]:
        """Inductor compiles a cache served, by cache (``{"fx_graph": 2, "aot_autograd": 1}``)."""
        return dict(Counter(a.cache for a in self.attestations if a.cache is not None))

    @property
    def inductor_compiled(self) -> list[CompileAttestation]:
        """The Inductor compiles no cache served (Inductor lowered and generated code)."""
        return [a for a in self.attestations if a.cache is None]

    @property
    def autotune_benchmarks(self) -> int:
        """GEMM autotune benchmarks (records whose timings no cache served) and runtime tunings (benchmarks, descents)."""
        return sum(not r.from_cache for r in self.autotune) + sum(e.kind in TUNING for e in self.runtime)

    @property
    def triton_compiled(self) -> int | None:
        """Real Triton compiles (Triton's own cache missed), or None where Triton cannot say."""
        return None if self.triton is None else self.triton[0]

    @property
    def captures(self) -> int:
        """CUDA graphs recorded or captured (``ik.serving.capture_cuda_graphs``, CUDA graph trees)."""
        return sum(e.kind == "cudagraph_recording" for e in self.runtime)

    def cold(self) -> list[str]:
        """One sentence per thing compiled or tuned cold; empty when everything came from the caches."""
        found = []
        compiled = self.inductor_compiled
        if compiled:
            which = ", ".join(f"{a.graph} {a.compile_id or '?'}" for a in compiled)
            found.append(f"{len(compiled)} Inductor compile(s) no cache served ({which})")
        missed = [f"{key.split('.')[1]} {self.counters.get(key, 0)}" for key in MISSES if self.counters.get(key, 0)]
        if missed and not compiled:
            found.append(f"torch counted {', '.join(missed)}")
        fresh = [r.signature for r in self.autotune if not r.from_cache]
        if fresh:
            found.append(f"{len(fresh)} GEMM autotune benchmark(s) ({', '.join(dict.fromkeys(fresh))})")
        for kind in TUNING:
            tuned = [e.detail for e in self.runtime if e.kind == kind]
            if tuned:
                found.append(f"{len(tuned)} {kind.replace('_', ' ')}(s) ({', '.join(dict.fromkeys(tuned))})")
        if self.triton_compiled:
            found.append(f"{self.triton_compiled} Triton compile(s) (Triton's cache missed)")
        return found

    def table(self) -> str:
        """Lines for people: Dynamo traces, Inductor compiles by cache, autotune, Triton, captures, seconds per phase."""
        hits = ", ".join(f"{n} {kind}" for kind, n in sorted(self.inductor_hits.items())) or "none"
        triton = (
            "not observable (Triton < 3.4 or no Triton)"
            if self.triton is None
            else (f"{self.triton[0]} compiled, {self.triton[1]} from Triton's cache")
        )
        loads = sum(e.kind == "triton_load" for e in self.runtime)
        lines = [
            f"Dynamo compiles (traces): {len(self.dynamo_compiles)} "
            f"({sum(e.recompile for e in self.dynamo_compiles)} recompiles)",
            f"Inductor compiles: {len(self.attestations)}; cache hits: {hits}; compiled cold: {len(self.inductor_compiled)}",
            f"autotune benchmarks: {self.autotune_benchmarks}; GEMM autotune records from the cache: "
            f"{sum(r.from_cache for r in self.autotune)}",
            f"Triton: {triton}; kernel loads (precompile without a compile): {loads}; "
            f"kernels the bundle put into Triton's cache: {self.triton_kernels_restored}",
            f"CUDA graphs captured or recorded: {self.captures}",
            "torch counters: " + (", ".join(f"{k} {v}" for k, v in self.counters.items() if v) or "all 0"),
        ]
        if self.seconds:
            lines.append("seconds: " + ", ".join(f"{k} {v:.3f}" for k, v in self.seconds.items()))
        cold = self.cold()
        lines.append("COLD: " + "; ".join(cold) if cold else "nothing compiled, autotuned or Triton-compiled cold")
        return "\n".join(lines)

    def to_dict(self) -> dict[str, Any]:
        return {
            "dynamo_compiles": [e.to_dict() for e in self.dynamo_compiles],
            "inductor_compiles": len(self.attestations),
            "inductor_hits": self.inductor_hits,
            "inductor_compiled": len(self.inductor_compiled),
            "attestations": [a.to_dict() for a in self.attestations],
            "autotune_benchmarks": self.autotune_benchmarks,
            "autotune": [r.to_dict() for r in self.autotune],
            "runtime": [e.to_dict() for e in self.runtime],
            "triton_compiled": self.triton_compiled,
            "triton_cache_hits": None if self.triton is None else self.triton[1],
            "triton_kernels_restored": self.triton_kernels_restored,
            "captures": self.captures,
            "counters": dict(self.counters),
            "seconds": dict(self.seconds),
            "cold": self.cold(),
        }


class ColdStartRecorder(Collector):
    """A block that records everything compiled, autotuned and captured in it on this thread (and its tasks).

    Example::

        with ColdStartRecorder() as rec:
            compiled(x)
        print(rec.proof().table())

    Relies on the observer hooks and the compile interception (held while the block lasts), torch's
    ``counters`` and, for Triton, ``triton.knobs.compilation.listener`` (Triton 3.4+).  A compile in one
    of Inductor's compile-worker processes is heard as its parent's Dynamo and Inductor compile; its
    Triton compile is Triton's business in that worker (``ik.serving.load_serving_bundle`` compiles in-process).
    """

    patches = (FIRST_CALL_HOOKS,)

    def __init__(self) -> None:
        super().__init__(need_autotune=False)
        self.runtime: list[RuntimeEvent] = []
        self._counters_before: dict[str, int] = {}
        self._triton_before: tuple[int, int] | None = None
        self.counters: dict[str, int] = {}
        self.triton: tuple[int, int] | None = None

    def on_runtime(self, event: RuntimeEvent) -> None:
        self.runtime.append(event)

    def __enter__(self) -> ColdStartRecorder:
        entered = super().__enter__()
        self._counters_before = _read_counters()
        self._triton_before = triton_compiles()  # after the hooks are installed: the listener is in place
        return entered

    def __exit__(self, exc_type: object, exc: BaseException | None, tb: object) -> None:
        try:  # read while the hooks still hold Triton's listener; the block exits whatever happens here
            after, triton = _read_counters(), triton_compiles()
            self.counters = {k: after[k] - self._counters_before.get(k, 0) for k in after}
            before = self._triton_before
            self.triton = None if triton is None or before is None else (triton[0] - before[0], triton[1] - before[1])
        finally:
            super().__exit__(exc_type, exc, tb)

    def proof(self, seconds: dict[str, float] | None = None, *, triton_kernels_restored: int = 0) -> ColdStartProof:
        """The :class:`ColdStartProof` of the block (call it after the block), with ``seconds`` per phase and
        the Triton kernels a bundle restored in it."""
        return ColdStartProof(
            list(self.compiles), list(self.attestations), list(self.records), list(self.runtime),
            dict(self.counters), self.triton, dict(seconds or {}), triton_kernels_restored,
        )  # fmt: skip


def _read_counters() -> dict[str, int]:
    """torch's :data:`TORCH_COUNTERS` now; all 0 while Dynamo's utils are not imported (they count from their import)."""
    if "torch._dynamo.utils" not in sys.modules:
        return dict.fromkeys(TORCH_COUNTERS, 0)
    counters = importlib.import_module("torch._dynamo.utils").counters  # waits if another thread imports it now
    out = {}
    for name in TORCH_COUNTERS:
        group, key = name.split(".", 1)
        out[name] = int(counters[group][key])
    return out
