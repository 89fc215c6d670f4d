"""Plain-words notes printed above an ablation's table: what this run can and cannot show.

Every claim about what the runs did comes from their measured fields, never from what an arm was
expected to do: compile time (``compile_seconds``), autotuning (``autotune_seconds`` and, where the
worker could observe it, ``autotune_observed``, ``autotune_ops`` and ``autotune_choices``: the
candidates benchmarked), and the GEMM implementations the compiled code calls (``gemm_calls``, read
from the generated code by :mod:`.kernels`).  Where the data cannot tell (a torch that does not report
autotuning, a file from before a field existed), the note says so instead of guessing.

- On CPU, the SM gate is a CUDA matter: the note says so, and then what each arm measured.
- On a GPU, the main job's note says how its sections were set up (emulated T4 and L4 below the
  68-SM gate, this GPU as the A/A control) and what each arm measured there, or why there is no
  emulated section.
- How the latency was kept apart from compilation (:func:`quiet_note`: the barrier, the CPUs the
  measuring processes were pinned to, and whether the records' clocks show any overlap) and how the
  processes started (:func:`start_note`: forked from the fork server, with what it preloaded, or new
  interpreters and why).
"""

from __future__ import annotations

import statistics
from collections.abc import Mapping, Sequence
from typing import Any

from .plan import placement_note
from .summary import compile_source

#: The knobs that only move the CUDA SM gate (``preset`` covers ``force_gemm_autotune``).
GATE_KNOBS = ("min_sms", "preset")

#: What each ``gemm_calls`` kind is (:mod:`.kernels` names them).
GEMM_KINDS = {
    "triton template": "autotuned Triton GEMM templates",
    "cpp gemm template": "Inductor's C++ GEMM template",
    "cutlass template": "CUTLASS GEMM templates",
    "ck template": "CK GEMM templates",
}


#: What a ratio measured under small-GPU emulation is, said wherever one is reported (report header, notes, plot title).
EMULATION_MEANS = (
    "emulation is SM confinement on the host GPU, which keeps the host's memory bandwidth and L2: "
    "its ratios rank the choices; they are not a small GPU's numbers"
)


def gemm_summary(calls: Mapping[str, int]) -> str:
    """``{"aten.mm": 4}`` as ``aten.mm×4``.

    Args:
        calls (Mapping[str, int]): GEMM implementation -> calls (a record's ``gemm_calls``).

    Returns:
        str: the calls, sorted by name; ``-`` when empty.
    """
    return ", ".join(f"{name}×{count}" for name, count in sorted(calls.items())) or "-"


def _touches_gate(results: Mapping[str, Any]) -> bool:
    return bool(results.get("main_job")) or any(
        k in (arm.get("knobs") or {}) for arm in results.get("arms", []) for k in GATE_KNOBS
    )


def autotune_evidence(arm: str, runs: Sequence[Mapping[str, Any]]) -> str:
    """What the successful runs of one arm recorded about autotuning, in words.

    Args:
        arm (str): the arm's name.
        runs (Sequence[Mapping[str, Any]]): the arm's records (failed ones are left out).

    Returns:
        str: e.g. ``no autotune benchmarks were recorded in any run of default (autotune_seconds 0 in
        all 3 runs)``, or ``max-autotune recorded autotune benchmarks in 3 of 3 runs: 120 candidates over 4
        ops, autotune_seconds 2.1 s (median)``; empty when no run of the arm succeeded.
    """
    good = [r for r in runs if r.get("ok")]
    if not good:
        return ""
    if any(r.get("autotune_observed") is False for r in good):
        return (
            f"this torch does not report autotuning to inductor-knobs, so whether {arm} benchmarked GEMM "
            "candidates was not measured"
        )
    seconds = [float(r.get("autotune_seconds") or 0.0) for r in good]
    choices = [int(r["autotune_choices"]) for r in good if isinstance(r.get("autotune_choices"), int)]
    tuned = [r for r in good if float(r.get("autotune_seconds") or 0.0) > 0 or int(r.get("autotune_choices") or 0) > 0]
    if not tuned:
        if len(good) == 1:
            return f"no autotune benchmarks were recorded in the one run of {arm} (autotune_seconds 0)"
        return f"no autotune benchmarks were recorded in any run of {arm} (autotune_seconds 0 in all {len(good)} runs)"
    text = f"{arm} recorded autotune benchmarks in {len(tuned)} of {len(good)} runs"
    if choices:
        ops = max(int(r.get("autotune_ops") or 0) for r in good)
        text += f": {statistics.median(choices):.0f} candidates over {ops} op(s) per run (median)"
    return text + f", autotune_seconds {statistics.median(seconds):.2f} s (median)"


def gemm_evidence(arm: str, row: Mapping[str, Any]) -> str:
    """What one arm's compiled code calls for its GEMMs (its summary row's ``gemm_calls``), in words.

    Args:
        arm (str): the arm's name.
        row (Mapping[str, Any]): its summary row.

    Returns:
        str: e.g. ``default's compiled code calls aten.mm×4 (ATen's GEMM kernels)``.
    """
    calls = row.get("gemm_calls") or {}
    if not calls:
        return f"no GEMM call was found in {arm}'s compiled code"
    kinds = [GEMM_KINDS[k] for k in sorted(calls) if k in GEMM_KINDS]
    if any(k.startswith("aten.") for k in calls):
        kinds.append("ATen's GEMM kernels")
    what = f" ({'; '.join(kinds)})" if kinds else ""
    varies = " in its first process (the processes differ: see the table)" if row.get("gemm_varies") else ""
    return f"{arm}'s compiled code calls {gemm_summary(calls)}{what}{varies}"


def measured(results: Mapping[str, Any], row: Mapping[str, Any]) -> str:
    """One arm's measured compile cost, autotuning and GEMM calls, in words (empty if none succeeded).

    Args:
        results (Mapping[str, Any]): the results (their ``runs`` and ``arms``).
        row (Mapping[str, Any]): the arm's summary row.

    Returns:
        str: a sentence without a final full stop.
    """
    if "median_ms" not in row:
        return ""
    name = str(row["arm"])
    arm: Mapping[str, Any] = next((a for a in results.get("arms", []) if a.get("name") == name), {})
    if arm.get("eager"):
        return f"{name} ran eagerly (nothing compiled)"
    runs = [r for r in results.get("runs", []) if r.get("arm") == name]
    how = "cold" if compile_source(row) == "cold" else "in later repeats sharing Triton binaries (no cold run of it finished)"
    parts = [f"{name} compiled {how} in {row['compile_seconds']:.1f} s"] if row.get("compile_seconds") is not None else []
    parts += [autotune_evidence(name, runs), gemm_evidence(name, row)]
    return "; ".join(p for p in parts if p)


def cpu_note(results: Mapping[str, Any], rows: Sequence[Mapping[str, Any]]) -> str:
    """The CPU note: no SM gate here, then what each arm measured.

    Args:
        results (Mapping[str, Any]): the results.
        rows (Sequence[Mapping[str, Any]]): their summary rows.

    Returns:
        str: one paragraph.
    """
    measured_rows = [r for r in rows if "median_ms" in r]
    kernels = {gemm_summary(r["gemm_calls"]) for r in measured_rows if r.get("gemm_calls")}
    if len(kernels) == 1 and len(measured_rows) > 1:
        same = (
            f" Every compiled arm's code calls the same GEMM kernels ({kernels.pop()}), so their latency "
            "differences are not GEMM choices."
        )
    elif len(kernels) > 1:
        same = " The arms' compiled code calls different GEMM kernels (column GEMM kernels)."
    else:
        same = ""
    gate = (
        "so the main job on CPU runs no gate arm (`force_gemm_autotune` could change nothing here)"
        if results.get("main_job")
        else "`min_sms` and `force_gemm_autotune` only move that gate, so on CPU they cannot change which GEMM runs"
    )
    facts = [m for m in (measured(results, r) for r in rows) if m]
    shown = (" What the runs measured: " + "; ".join(facts) + ".") if facts else ""
    return (
        "**This is a CPU run: it tests no SM gate.** torch's `is_big_gpu` gate (68 SMs) decides whether Inductor "
        f"autotunes Triton GEMM templates on a CUDA GPU; a CPU has no such gate, {gate}.{shown}{same} The verdict "
        "column says whether the arms differ in latency at all. What it cannot show: whether forcing the gate helps a "
        "model on a small GPU. For that, run `inductor-knobs ablate` on a CUDA machine."
    )


def gpu_note(results: Mapping[str, Any], rows: Sequence[Mapping[str, Any]] = ()) -> str:
    """The main job's note on a GPU: how its sections were set up, what each arm measured there, and
    what is missing.

    Args:
        results (Mapping[str, Any]): the results (``arms`` with ``section`` and ``emulate``, ``runs``).
        rows (Sequence[Mapping[str, Any]]): their summary rows (none: the setup only).

    Returns:
        str: one paragraph, or empty.
    """
    skipped = results.get("emulation_skipped")
    emulated: list[str] = []
    for arm in results.get("arms", []):
        if arm.get("emulate") and arm.get("section") and arm["section"] not in emulated:
            emulated.append(arm["section"])
    parts = []
    if emulated:
        parts.append(
            f"**Does forcing the SM gate help `{results.get('workload')}` on a small GPU?** Sections {', '.join(emulated)}: "
            "`gated` asks for GEMM autotuning with torch's 68-SM gate as it is, which is closed below 68 SMs; "
            "`force_gemm_autotune` lowers the gate to the section's SM count. The last section is this GPU, above "
            "the gate, where it is open for both arms: an A/A control, whose expected verdict is no detectable "
            "difference. Read GPU kernel time for the GEMM choice and compile s for the price of forcing. "
            f"{EMULATION_MEANS[0].upper()}{EMULATION_MEANS[1:]}." + _graphs(results)
        )
    bound = latency_bound(rows)
    if bound:
        parts.append(bound + ".")
    by_section: dict[str, list[str]] = {}
    for row in rows:
        fact = measured(results, row)
        if fact:
            by_section.setdefault(str(row.get("section") or "this GPU"), []).append(fact)
    if by_section and emulated:
        parts.append("What the runs measured: " + " ".join(f"In {s}: {'; '.join(f)}." for s, f in by_section.items()))
    if skipped:
        parts.append(f"**No emulated small-GPU sections:** {skipped}.")
    return " ".join(parts)


def _graphs(results: Mapping[str, Any]) -> str:
    knobs = [a.get("knobs") or {} for a in results.get("arms", []) if not a.get("eager")]
    if knobs and all(str(k.get("cudagraphs", "")).lower() in ("1", "true", "yes", "on") for k in knobs):
        return ' Every arm runs Inductor\'s CUDA graphs (knob `cudagraphs`), as `mode="max-autotune"` would.'
    return ""


def latency_bound(rows: Sequence[Mapping[str, Any]]) -> str:
    """Per section, the baseline's GPU kernel time against its latency: is the latency kernel-bound?

    Args:
        rows (Sequence[Mapping[str, Any]]): the summary rows.

    Returns:
        str: e.g. ``GPU kernel time against latency per iteration: T4 1.05 of 5.80 ms (mostly host time)``,
        or empty without kernel times.
    """
    parts = []
    for row in rows:
        if row.get("arm") == row.get("baseline") and row.get("kernel_ms") and row.get("median_ms"):
            share = float(row["kernel_ms"]) / float(row["median_ms"])
            where = "mostly kernel time" if share >= 0.5 else "mostly host time"
            parts.append(f"{row.get('section') or 'this GPU'} {row['kernel_ms']:.2f} of {row['median_ms']:.2f} ms ({where})")
    return ("GPU kernel time against latency per iteration: " + "; ".join(parts)) if parts else ""


def notes(results: Mapping[str, Any], rows: Sequence[Mapping[str, Any]]) -> list[str]:
    """The notes for ``results``.

    Args:
        results (Mapping[str, Any]): the results.
        rows (Sequence[Mapping[str, Any]]): their summary rows.

    Returns:
        list[str]: paragraphs, possibly none (the results' own ``notes`` first).
    """
    out = list(results.get("notes") or [])
    placed = placement_note(results)
    if placed:
        out.append(placed + ".")
    if results.get("device") == "cpu" and _touches_gate(results):
        out.append(cpu_note(results, rows))
    elif results.get("device") == "cuda" and results.get("main_job"):
        note = gpu_note(results, rows)
        if note:
            out.append(note)
    return out


def cpu_ranges(cpus: Sequence[int]) -> str:
    """``[0, 1, 2, 3, 8]`` as ``0-3,8``.

    Args:
        cpus (Sequence[int]): CPU numbers.

    Returns:
        str: runs of consecutive CPUs joined with commas.
    """
    groups: list[list[int]] = []
    for cpu in sorted(set(cpus)):
        if groups and groups[-1][-1] == cpu - 1:
            groups[-1].append(cpu)
        else:
            groups.append([cpu])
    return ",".join(f"{g[0]}-{g[-1]}" if len(g) > 1 else str(g[0]) for g in groups)


def quiet_overlaps(runs: Sequence[Mapping[str, Any]]) -> int | None:
    """How many times a run's measurement overlapped another run's start, build or compile, from the
    records' clocks (``started_at`` and the worker's ``phase_spans``, one host's monotonic clock).

    Args:
        runs (Sequence[Mapping[str, Any]]): the records of one local ablation.

    Returns:
        int | None: the count of (measuring run, compiling run) pairs that overlap; None when the
        records do not have the clocks (older files, Slurm, failed runs only).
    """
    timed = [r for r in runs if r.get("ok") and r.get("phase_spans") and isinstance(r.get("started_at"), (int, float))]
    if len(timed) < 2:
        return None
    busy = [(r["index"], float(r["started_at"]), float(r["phase_spans"]["compile"][1])) for r in timed]
    count = 0
    for r in timed:
        begin, end = float(r["phase_spans"]["wait"][1]), float(r["phase_spans"]["extras"][1])
        count += sum(1 for index, a, b in busy if index != r["index"] and a < end and begin < b)
    return count


def quiet_note(results: Mapping[str, Any]) -> str:
    """How the latency was kept apart from compilation, from the records (see :mod:`.quiet`).

    Args:
        results (Mapping[str, Any]): the results.

    Returns:
        str: a sentence, or empty for files from before the barrier with one process at a time.
    """
    runs = [r for r in results.get("runs", []) if r.get("ok")]
    if results.get("executor") == "slurm":
        return (
            "each run was its own Slurm job: there is no barrier across jobs, so a run may have measured while another "
            "job on its node compiled (`--slurm-sbatch-flag exclusive` gives every job a node of its own)"
        )
    quiet = next((r["quiet"] for r in runs if isinstance(r.get("quiet"), dict)), None)
    if quiet is None:
        parallel = int(results.get("parallel") or 1)
        if parallel <= 1:
            return ""
        return f"{parallel} processes per GPU compiled at once and measured one at a time beside the others"
    host = " on the whole host" if int(quiet.get("lanes") or 1) > 1 else ""
    text = f"latency was measured one process at a time{host} while no worker of this ablation compiled"
    if int(quiet.get("parallel") or 1) > 1:
        text += f" (a phase barrier: up to {quiet['parallel']} compiled at once, and a compiled worker waited for its turn)"
    turns = [r for r in runs if r.get("autotune_lock_turns") is not None]
    if turns:
        waited = sum(float(r.get("autotune_lock_wait_seconds") or 0.0) for r in turns)
        text += (
            f"; the workers sharing a GPU autotuned one benchmark at a time ({sum(int(r['autotune_lock_turns']) for r in turns)} "
            f"turns in {len(turns)} runs, {waited:.1f} s waited in all, counted in their compile time)"
        )
    pinned = sorted({cpu_ranges(r["measure_cpus"]) for r in runs if r.get("measure_cpus")})
    errors = sorted({str(r["pin_error"]) for r in runs if r.get("pin_error")})
    if pinned:
        text += f"; each measuring process was pinned to CPUs {' or '.join(pinned)}"
    if errors:
        text += f"; not pinned where {errors[0]}"
    overlaps = quiet_overlaps(results.get("runs", []))
    if overlaps is not None:
        text += (
            "; the records' clocks confirm that no measurement overlapped another run's start or compile"
            if overlaps == 0
            else f"; **the records' clocks show {overlaps} measurement(s) overlapping another run's compile**"
        )
    return text


def start_note(results: Mapping[str, Any]) -> str:
    """How the runs' processes started (:mod:`.forkserver`), from the records.

    Args:
        results (Mapping[str, Any]): the results.

    Returns:
        str: a sentence, or empty for files from before the fork server.
    """
    runs = [r for r in results.get("runs", []) if r.get("start")]
    if not runs:
        return ""
    forked = [r for r in runs if r["start"] == "forkserver"]
    servers = {r["server"]["id"]: r["server"] for r in forked if isinstance(r.get("server"), dict)}
    parts = []
    if servers:
        seconds = sum(float(s.get("start_seconds") or 0.0) for s in servers.values())
        modules = sorted({m for s in servers.values() for m in s.get("preloaded", [])}, key=lambda m: (m != "torch", m))
        stopped = {m: why for s in servers.values() for m, why in (s.get("stopped") or {}).items()}
        parts.append(
            f"{len(forked)} of {len(runs)} runs were forked from a fork server that imported {', '.join(modules)} once "
            f"({seconds:.1f} s, while the command set up, in no run's time), so a run's import column is only what "
            "it imported itself"
        )
        if stopped:
            parts.append("not preloaded: " + "; ".join(f"{m} ({why})" for m, why in sorted(stopped.items())))
    plain = [r for r in runs if r["start"] != "forkserver"]
    if plain:
        why = sorted({str(r["start_note"]) for r in plain if r.get("start_note")})
        parts.append(f"{len(plain)} of {len(runs)} runs started as new interpreters" + (f" ({'; '.join(why)})" if why else ""))
    return "; ".join(parts)
