"""Machine load around each run, and the rule that says when it changed enough to matter.

Readings (cheap, taken by the runner in the parent, where no worker of this GPU slot is running):

- ``load_before`` / ``load_after``: the 1-minute load average (``os.getloadavg()[0]``) just before a
  worker starts and just after it exits; ``start_s`` / ``end_s``: when, in seconds since the
  ablation started.
- On CUDA, ``gpu_utilization_before`` / ``_after``: percent of the last sample period in which a
  kernel ran on the run's GPU (``torch.cuda.utilization``, which needs NVML through ``pynvml``;
  left out where that is missing).  The worker adds ``gpu_clock_mhz``, the SM clock right after its
  latency samples (``torch.cuda.clock_rate``), and every worker reports ``cpu_seconds``, the CPU
  time of its process tree (itself, Inductor's compile workers and their compilers).

Why a rule is needed at all: interleaving (ABCABC…) makes a *steady* background load hit every arm
alike, and the confidence intervals widen with the noise it adds.  A load that *changes* during
the ablation hits the arms that ran at that time and biases them, and no interval shows that.

The rule (:func:`load_warnings`):

1. **CPU load.**  The 1-minute load average is an exponentially damped average of the number of
   runnable tasks with a 60 s time constant.  Part of every reading is the ablation itself, so the
   ablation's own share is rebuilt from its timeline: each run contributes its average runnable
   count ``cpu_seconds / (end_s - start_s)``, damped the same way (:func:`own_load`).  What is left,
   ``reading - own share``, is the damped *competing* load; inverting the damping between readings
   at least 15 s apart gives the mean competing load in each such window (:func:`competing_windows`;
   the damped value itself would lag a change by a minute).  It changed enough to matter when, over
   the windows of one shard (machine), it ranges over more than ``max(1.0, cpu_count / 4)``: one
   core's worth of other work appearing or going away (on a 2-core machine, half of it), or a
   quarter of a big host.
   On CPU, where the arms themselves run on those CPUs, a steady competing load above half that
   limit is also worth a warning (a busy machine), though the intervals show its noise.
2. **GPU sharing.**  A run whose GPU showed at least 25 % utilisation just before it started (when
   the ablation ran nothing on that GPU, for at least one NVML sample period) shared the GPU with
   another process.
3. **GPU clock.**  Within one table section (the same GPU or emulated GPU), SM clocks read right
   after the samples that differ by more than 10 % of the highest mean throttling or a changed
   power cap between runs.

Old results.json files without these readings produce no warning.

**With several workers per GPU at once** (``--parallel``, the main job on a GPU) rules 1 and 2 are
not applied, and the report says so.  Rule 2 has no moment when the ablation leaves the GPU idle.
Rule 1's own share counts CPU seconds, but the load average also counts tasks waiting for a CPU or
for the disk: four workers importing torch at once from a cold page cache, then compiling, raised
the 1-minute load of an H100 host with nothing else running 7.8 above their CPU seconds (16 CPUs,
the main job's first 40 s), so the rule would have flagged the ablation itself.  Rule 3 still
applies; GPU kernel time does not depend on the CPU load, and the main job's A/A control shows the
noise that latency picked up.
"""

from __future__ import annotations

import math
import os
from collections import defaultdict
from collections.abc import Mapping, Sequence
from typing import Any

#: Time constant of Linux's 1-minute load average, seconds.
LOAD_TAU_S = 60.0

#: Shortest window the competing load is estimated over (see :func:`competing_windows`).
MIN_WINDOW_S = 15.0

#: NVML's utilisation sample period is 1/6 s to 1 s depending on the GPU (``torch.cuda.utilization``).
#: The runner reads a GPU's utilisation before a run at least this long after its own previous worker
#: there exited: sooner, on an H200 whose workers exit at once, 7 of 18 runs of the main job were
#: flagged 39-59 % busy by the previous worker's last kernels.
NVML_SAMPLE_PERIOD_S = 1.0

#: Rule 2: utilisation (percent) before a run that means another process used the GPU.
GPU_BUSY_PERCENT = 25

#: Rule 3: relative spread of SM clocks within a section that means the clock changed.
CLOCK_SPREAD = 0.10


def cpu_load() -> float | None:
    """The 1-minute load average.

    Returns:
        float | None: the average, or None where the OS has none (Windows).
    """
    try:
        return float(os.getloadavg()[0])
    except (OSError, AttributeError):
        return None


def gpu_utilization(index: int) -> int | None:
    """Percent utilisation of this process's CUDA device ``index`` over NVML's last sample period.

    Args:
        index (int): the device, as torch numbers it here.

    Returns:
        int | None: the percentage, or None when it cannot be read cheaply (no ``pynvml``, no NVML,
        no such device).
    """
    try:
        import torch

        return int(torch.cuda.utilization(index))
    except Exception:  # noqa: BLE001 - a missing pynvml or NVML error only means no reading
        return None


def threshold(cpu_count: int | None) -> float:
    """Rule 1's limit on the range of the competing load.

    Args:
        cpu_count (int | None): the machine's logical CPUs (None: unknown, taken as 1).

    Returns:
        float: ``max(1.0, cpu_count / 4)``.
    """
    return max(1.0, (cpu_count or 1) / 4)


def _own_rate(run: Mapping[str, Any]) -> float:
    seconds = float(run["end_s"]) - float(run["start_s"])
    if seconds <= 0:
        return 0.0
    cpu = run.get("cpu_seconds")
    # A crashed worker reports nothing: count it as one busy process.
    return float(cpu) / seconds if isinstance(cpu, (int, float)) else 1.0


def own_load(at: float, runs: Sequence[Mapping[str, Any]]) -> float:
    """The ablation's own share of the 1-minute load average at time ``at`` (seconds since the
    ablation started): every run's average runnable count, damped with :data:`LOAD_TAU_S`.

    Args:
        at (float): seconds since the ablation started.
        runs (Sequence[Mapping[str, Any]]): records with ``start_s``, ``end_s`` and optionally ``cpu_seconds``.

    Returns:
        float: runnable tasks.
    """
    total = 0.0
    for run in runs:
        start, end = float(run["start_s"]), min(float(run["end_s"]), at)
        if end <= start:
            continue
        # Integral of rate * exp(-(at - t) / tau) dt / tau over [start, end].
        total += _own_rate(run) * (math.exp(-(at - end) / LOAD_TAU_S) - math.exp(-(at - start) / LOAD_TAU_S))
    return total


def competing_windows(runs: Sequence[Mapping[str, Any]]) -> list[tuple[str, float]]:
    """The mean competing load over consecutive windows of at least :data:`MIN_WINDOW_S` seconds.

    Every load reading of ``runs`` (one machine; before and after each run) less the ablation's own
    share (:func:`own_load`) is the damped competing load ``C``.  Between two readings ``a`` and
    ``b``, ``C(b) = C(a)·d + mean·(1 - d)`` with ``d = exp(-(b - a) / 60 s)``, so
    ``mean = (C(b) - C(a)·d) / (1 - d)``.  Windows are at least 15 s long because the kernel updates
    the average only every 5 s, and the inversion multiplies a reading's noise by ``1 / (1 - d)``
    (about 4.5 at 15 s).

    Args:
        runs (Sequence[Mapping[str, Any]]): the records of one machine, with their load readings.

    Returns:
        ``(label, mean competing load >= 0)`` per window in time order, e.g.
        ``("from before default #0 to after max-autotune-no-cudagraphs #0", 0.2)``; empty when the
        runs hold no readings or last less than one window.
    """
    timed = [r for r in runs if all(isinstance(r.get(k), (int, float)) for k in ("start_s", "end_s"))]
    readings: list[tuple[float, str, float]] = []
    for run in timed:
        name = f"{run.get('arm')} #{run.get('repeat')}"
        for when, key, at in (("before", "load_before", run["start_s"]), ("after", "load_after", run["end_s"])):
            value = run.get(key)
            if isinstance(value, (int, float)):
                readings.append((float(at), f"{when} {name}", float(value) - own_load(float(at), timed)))
    readings.sort(key=lambda r: r[0])
    windows = []
    first = 0
    for last in range(1, len(readings)):
        (t0, label0, c0), (t1, label1, c1) = readings[first], readings[last]
        if t1 - t0 < MIN_WINDOW_S:
            continue
        damping = math.exp(-(t1 - t0) / LOAD_TAU_S)
        windows.append((f"from {label0} to {label1}", max(0.0, (c1 - c0 * damping) / (1 - damping))))
        first = last
    return windows


def load_warnings(
    runs: Sequence[Mapping[str, Any]],
    cpu_count: int | None,
    section_of: Mapping[str, str],
    device: str | None = None,
    parallel: int = 1,
) -> list[str]:
    """The load warnings of an ablation (see the module docstring for the rules).

    Args:
        runs: worker records, with the runner's readings (``shard`` groups runs of one machine).
        cpu_count: logical CPUs of the machine that ran them (None: unknown, taken as 1).
        section_of: arm name -> its table section, for the clock rule.
        device: ``cpu`` adds the busy-machine rule (the measured arms themselves run on the CPUs).
        parallel: workers per GPU at once; above 1 only rule 3 applies.

    Returns:
        One sentence per warning (empty: nothing to warn about).
    """
    out = []
    by_shard: dict[Any, list[Mapping[str, Any]]] = defaultdict(list)
    for run in runs if parallel <= 1 else ():
        by_shard[run.get("shard")].append(run)
    limit = threshold(cpu_count)
    for shard, group in by_shard.items():
        windows = competing_windows(group)
        if len(windows) >= 2:
            low = min(windows, key=lambda item: item[1])
            high = max(windows, key=lambda item: item[1])
            if high[1] - low[1] > limit:
                where = f" (shard {shard})" if len(by_shard) > 1 else ""
                out.append(
                    f"machine load changed during the ablation{where}: other processes kept {low[1]:.1f} CPUs busy "
                    f"{low[0]} and {high[1]:.1f} {high[0]}, a change of more than {limit:.1f} on {cpu_count or '?'} "
                    "CPUs; arms that ran at different times saw different machines; re-run on a quieter machine"
                )
        mean = sum(value for _, value in windows) / len(windows) if windows else 0.0
        if device == "cpu" and mean > limit / 2:
            out.append(
                f"the machine was busy: other processes kept {mean:.1f} of {cpu_count or '?'} CPUs busy on average while "
                "the arms ran on those CPUs; latencies are noisy (see the intervals) and may be far from a quiet machine's"
            )
    for run in runs if parallel <= 1 else ():
        busy = run.get("gpu_utilization_before")
        if isinstance(busy, (int, float)) and busy >= GPU_BUSY_PERCENT:
            out.append(
                f"GPU {run.get('gpu')} was {busy:.0f}% busy before run {run.get('arm')} #{run.get('repeat')} started: "
                "another process shared it"
            )
    clocks: dict[str, list[float]] = defaultdict(list)
    for run in runs:
        if isinstance(run.get("gpu_clock_mhz"), (int, float)) and run["gpu_clock_mhz"] > 0:
            clocks[section_of.get(str(run.get("arm")), "")].append(float(run["gpu_clock_mhz"]))
    for section, values in clocks.items():
        if len(values) >= 2 and (max(values) - min(values)) > CLOCK_SPREAD * max(values):
            label = f" in section {section!r}" if section else ""
            out.append(
                f"GPU SM clock changed between runs{label}: {min(values):.0f} to {max(values):.0f} MHz "
                f"(more than {CLOCK_SPREAD:.0%}); throttling or a power cap changed during the ablation"
            )
    return out
