"""The main job (``inductor-knobs ablate`` with no ``--arm``, ``--grid`` or ``--config``): its arms, its
table sections and its ``--parallel`` default.

It asks "does forcing the SM gate help a real model on a small GPU, and what does it cost to
compile?".  On a GPU: arms ``gated`` (GEMM autotuning asked for, torch's 68-SM gate as it is) and
``force_gemm_autotune`` (the gate lowered to the GPU's SMs), one table section per GPU class: on a
GPU at or above the gate with SM emulation (torch >= 2.11) an emulated T4 (40 SMs) and an emulated L4
(58 SMs), both below the gate, plus this GPU itself, where the gate is open for both arms (an A/A
control: the two compile with the same effective settings).  On a GPU below the gate, one section
(this GPU); without emulation, only this GPU, and the report says why.  On CPU, where there is no SM
gate, ``default`` and ``max-autotune-no-cudagraphs``, and the report says plainly that the CPU run
tests no gate.
"""

from __future__ import annotations

from ..ext import GPU_PRESETS as PRESETS
from ..ext import EmulationSpec
from . import spec
from .quiet import equal_batch, memory_cap, usable_cpus

#: The small GPUs the main job emulates on a big one, in table order.
MAIN_JOB_EMULATION = ("T4", "L4")

#: Latency samples per process of the main job on a GPU (``--iters`` default; 20 elsewhere).  One sample
#: is about a millisecond there; 200 cost a fifth of a second per process.
MAIN_JOB_GPU_ITERS = 200

#: CPUs per worker that the main job's ``--parallel`` default leaves, and its cap: 16 on a 16-CPU GPU node, so that
#: the phase barrier's live cap (2 x parallel, :func:`.quiet.live_cap`) holds all 18 runs in one batch.  The later
#: repeats wait for the Triton binaries the others are building (:mod:`.kernel_share`) instead of building them
#: again, so a compile slot more costs a process's Python work, not its binaries.  Measured on one H200 node (16
#: CPUs, torch 2.11, triton 3.6, 2026-11-29), one run after another (``bench/main_job_ab.sh``): 12 at once 116.7 s
#: and 116.1 s wall, 14 at once 104.7 s, 16 at once 97.4 s, 18 at once 122.9 s (two more heavy compiles from the
#: start slowed every cold one: 85 s against 67 s at 16), and 9 at once without shared in-flight binaries 134.1 s; on
#: another node 18 at once 107.4 s against 122.6 s at 9, both with them.
CPUS_PER_PARALLEL_WORKER, MAX_MAIN_JOB_PARALLEL = 1.0, 16


def _emulated_sections(sms: int) -> tuple[tuple[str, ...], str | None]:
    """Which emulated small GPUs the main job adds on a GPU of ``sms`` SMs.

    Returns:
        ``(presets, None)``, or ``((), why not)``.
    """
    import torch

    from ..ext import torch_compat

    threshold = torch_compat.installed(strict=False).torch_min_sms
    if sms < threshold:
        return (), (
            f"this GPU has {sms} SMs, below torch's {threshold}-SM gate, so the gate is closed here already and its "
            "section shows the effect directly; there is no full-GPU A/A control"
        )
    green = getattr(torch.cuda, "GreenContext", None)
    if green is None or not hasattr(green, "Stream"):
        return (), (
            f"SM emulation needs torch >= 2.11 (torch.cuda.GreenContext with Stream()); torch {torch.__version__} has none, "
            "so only the A/A control on this GPU runs"
        )
    return MAIN_JOB_EMULATION, None


def arms(sms: int | None, emulate: EmulationSpec | None) -> tuple[list[spec.Arm], dict[str, str], dict[str, str], str | None]:
    """The main job's arms, their sections, each arm's baseline, and why a section is missing.

    Args:
        sms (int | None): the GPU's SM count (the smallest of ``--gpus``), or None on CPU.
        emulate (EmulationSpec | None): ``--emulate-sms``, checked, or None.

    Returns:
        tuple: the arms, arm name -> its section label, arm name -> its baseline, and why there is
        no emulated section (or None).
    """
    if sms is None:  # CPU: no gate to test
        return spec.cpu_arms(), {}, {}, None
    if emulate is not None:  # --emulate-sms: one section, every arm emulated
        return spec.gate_arms(emulate.sms), {}, {}, None
    presets, skipped = _emulated_sections(sms)
    arms: list[spec.Arm] = []
    sections: dict[str, str] = {}
    baselines: dict[str, str] = {}
    for preset in presets:
        small = PRESETS[preset]
        section = spec.gate_arms(small.sms, emulate=preset, suffix=f"@{preset}")
        for arm in section:
            sections[arm.name] = f"emulated {preset} ({small.sms} SMs, below the gate)"
            baselines[arm.name] = section[0].name
        arms += section
    full = spec.gate_arms(sms)
    if presets:  # the control has its own section after the emulated ones
        for arm in full:
            sections[arm.name] = f"this GPU ({sms} SMs, above the gate): A/A control"
            baselines[arm.name] = full[0].name
    return arms + full, sections, baselines, skipped


def main_job_parallel(device: str, gpus: list[int], gpu_gib: float | None = None, runs: int | None = None) -> int:
    """The main job's ``--parallel`` default: 1 on CPU, else min(16, CPUs per GPU), counting the CPUs this process may
    run on (:func:`.quiet.usable_cpus`).  Where the GPU's memory (:data:`.quiet.GPU_GIB_PER_WORKER` a worker) or the
    host's available memory (:data:`.quiet.GIB_PER_WORKER` a worker) holds fewer live workers than a GPU's ``runs``
    (:func:`.quiet.memory_cap`), the runs go in batches of the barrier (:func:`.quiet.live_cap`), and the default is
    the size of equal batches (:func:`.quiet.equal_batch`):
    each batch ends with its slots idle while its slowest compile finishes, so a short last batch gains nothing.

    Args:
        device (str): ``cuda`` or ``cpu``.
        gpus (list[int]): the GPUs the runs are spread over.
        gpu_gib (float | None): the memory of the smallest of them, in GiB (None: not counted).
        runs (int | None): the most runs one GPU holds (None: not counted); never more workers than that.

    Returns:
        int: workers per GPU at once.
    """
    if device != "cuda":
        return 1
    lanes = max(1, len(gpus))
    parallel = min(MAX_MAIN_JOB_PARALLEL, int(usable_cpus() // lanes / CPUS_PER_PARALLEL_WORKER))
    held = memory_cap(lanes, gpu_gib)
    if held is not None:
        parallel = min(parallel, held if runs is None else equal_batch(runs, held))
    return max(1, min(parallel, runs or parallel))
