"""``inductor-knobs ablate``: arguments, validation before any arm runs, and output.

Every check (workload and its extra, arms, ``--repeats``, GPUs, ``--out``, ``--plot``'s matplotlib,
the files of ``--compare`` and ``--merge``, ``--executor`` and its Slurm options, submitit, ``--resume``'s
plan) happens before the first worker starts or the first Slurm job is submitted.  While the runs go,
only ``<out>/runs/`` is written (each run's record as it finishes, see :mod:`.store`; ``<out>/slurm/``
holds the Slurm jobs' files); the results files come at the end.  SIGINT and SIGTERM stop the workers
(or cancel the Slurm jobs), keep the finished runs (``results.json`` with ``"partial": true``) and exit
130 / 143 with one line.

**Executors** (``--executor``): ``local`` (the default) runs the workers here; ``slurm`` submits one
Slurm job per run (:mod:`.slurm`).  Both call the same job function, and the records, results.json
and the report are the same.  **Resuming** (``--resume``): the same command on the same ``--out`` runs
only the runs that have no record there or a failed one (:mod:`.store` has the rule).

**The main job** (no ``--arm``, ``--grid`` or ``--config``) asks "does forcing the SM gate help a real
model on a small GPU, and what does it cost to compile?".  On a GPU: a randomly initialised
BERT-base (``hf:bert-base``, 2×64 tokens, bf16), arms ``gated`` (GEMM autotuning asked for, torch's
68-SM gate as it is) and ``force_gemm_autotune`` (the gate lowered to the GPU's SMs), one table
section per GPU class: on a GPU at or above the gate with SM emulation (torch >= 2.11) an emulated
T4 (40 SMs) and an emulated L4 (58 SMs), both below the gate, plus this GPU itself, where the gate is
open for both arms (an A/A control: the two compile with the same effective settings).  On a GPU
below the gate, one section (this GPU); without emulation, only this GPU, and the report says why.
On CPU, where there is no SM gate, the GEMM-bound ``gemm_mlp`` under ``default`` and
``max-autotune-no-cudagraphs``, and the report says plainly that the CPU run tests no gate.

**Processes per arm** (``--repeats``; the process is the unit of the confidence intervals, see
:mod:`.stats`): 5 by default (nominal 95 % coverage in simulation); 3 with ``--quick`` and for the
main job, whose budget is 5 minutes on one H100 or H200 (6 arms × 3 processes) and 2 minutes on a
2-core CPU (2 arms × 3 processes); fewer than 3 is an error unless ``--smoke`` (1 process per arm,
quick inputs, no intervals: does every arm compile, run and match eager?).

**Processes at once** (``--parallel``, GPUs only): that many workers per GPU start, import, build and
compile at the same time and take turns for warm-up, samples and profiling (a lock per GPU, see
:mod:`.runner`), so measurements never overlap.  1 by default; the main job on a GPU uses
:func:`main_job_parallel` (4 on a 16-CPU host).

**Several GPUs, several machines.**  ``--gpus 0,1`` runs one worker per GPU at a time; the records
and results.json are the same as with one GPU, and ``wall_seconds`` (the whole run) makes the two
comparable.  Across nodes, give each node one shard and merge (the merged file concatenates the
shards' processes; each process is one replicate wherever it ran)::

    srun -N4 bash -c 'inductor-knobs ablate --config a.toml --shard $SLURM_NODEID/4 --out shard-$SLURM_NODEID'
    torchrun --nnodes 4 --nproc-per-node 1 ... : each rank runs
        inductor-knobs ablate --config a.toml --shard $RANK/$WORLD_SIZE --out shard-$RANK
    inductor-knobs ablate --merge shard-*/results.json --out merged --plot

(torchrun only launches: the shards do not talk to each other, so ``--nproc-per-node 1`` per node
and ``--gpus`` inside each shard.)
"""

from __future__ import annotations

import argparse
import datetime
import importlib.util
import json
import os
import socket
import sys
import time
from typing import Any

from ..emulation.emulate import EmulationSpec, spec_from_text
from ..emulation.gpu_presets import PRESETS
from ..errors import InvalidKnobValue
from . import report, runner, slurm, spec, stats, store, workloads
from .runner import Interrupted, Plan, execute

DEFAULT_WORKLOAD = "gemm_mlp"

#: The main job's model on a GPU (its inputs at the ``--quick`` size, 2×64 tokens: the size the
#: README's real-model table measured).
MAIN_JOB_GPU_WORKLOAD = "hf:bert-base"

#: Processes per arm: the default, with --quick and for the main job, with --smoke (see the docstring).
DEFAULT_PROCESSES, QUICK_PROCESSES, MAIN_JOB_PROCESSES, SMOKE_PROCESSES = 5, 3, 3, 1

#: The small GPUs the main job emulates on a big one, in table order.
MAIN_JOB_EMULATION = ("T4", "L4")

#: CPUs per worker that the main job's ``--parallel`` default leaves, and its cap.
CPUS_PER_PARALLEL_WORKER, MAX_MAIN_JOB_PARALLEL = 4, 4


def add_parser(sub: Any) -> None:
    p = sub.add_parser(
        "ablate",
        help="compare Inductor settings: isolated arms, interleaved repeats, statistics",
        description="With no arguments (the main job): on a GPU, a randomly initialised BERT-base under arms gated "
        "(GEMM autotuning, torch's 68-SM gate as it is) and force_gemm_autotune, on an emulated T4 (40 SMs) and L4 "
        "(58 SMs) below the gate and on this GPU (an A/A control); on CPU, which has no SM gate, gemm_mlp under default "
        "and max-autotune-no-cudagraphs.  Each arm x repeat is a fresh process; speedups get 95%% bootstrap intervals "
        "over processes.",
    )
    p.add_argument(
        "--workload",
        help=f"built-in ({', '.join(workloads.BUILTIN)}), a real model with random weights (hf:bert-base, "
        f"hf:tinyllama-2layer, timm:<model>), or pkg.module:factory (default {DEFAULT_WORKLOAD}; the main job on a GPU: "
        f"{MAIN_JOB_GPU_WORKLOAD})",
    )
    p.add_argument("--arm", action="append", default=[], help="NAME:knob=value,... (repeatable); 'eager' for the eager baseline")
    p.add_argument("--grid", action="append", default=[], help="knob=v1,v2 or knob=v1|v2 (repeatable; cartesian product)")
    p.add_argument("--config", help="a TOML file of arms (see examples/ablation.toml)")
    p.add_argument("--baseline", help="the arm speedups are relative to (default: the first)")
    p.add_argument(
        "--repeats",
        type=int,
        help=f"processes per arm, interleaved; the unit of the confidence intervals (default {DEFAULT_PROCESSES}; "
        f"{QUICK_PROCESSES} with --quick and for the main job; at least {stats.MIN_PROCESSES} unless --smoke)",
    )
    p.add_argument("--iters", type=int, help="latency samples per process (default 20; 5 with --quick)")
    p.add_argument("--quick", action="store_true", help="small inputs, few samples")
    p.add_argument(
        "--smoke",
        action="store_true",
        help=f"a smoke test: quick inputs, {SMOKE_PROCESSES} process per arm, no confidence intervals (CI: does every "
        "arm compile, run and match eager?)",
    )
    p.add_argument("--device", choices=("cuda", "cpu"), help="default: cuda if available")
    p.add_argument(
        "--gpus",
        help="comma-separated GPU indices to spread arms over, as torch numbers them here, i.e. positions in "
        "CUDA_VISIBLE_DEVICES when it is set (default: all visible)",
    )
    p.add_argument(
        "--emulate-sms",
        metavar="N|PRESET",
        help="run every arm under ik.emulate_gpu: an SM count or a GPU preset such as T4 (CUDA, torch >= 2.11)",
    )
    p.add_argument(
        "--parallel",
        type=int,
        help="worker processes per GPU at once: they import and compile in parallel and take turns for the "
        "measurement (a lock per GPU), so measurements never overlap (default 1; the main job on a GPU: "
        f"min({MAX_MAIN_JOB_PARALLEL}, CPUs / {CPUS_PER_PARALLEL_WORKER}))",
    )
    p.add_argument("--timeout", type=float, default=900.0, help="seconds per arm process (default 900)")
    p.add_argument(
        "--executor",
        help="where each run's process runs: local (default; here, one worker per GPU at a time) or slurm (one "
        "Slurm job per run, submitted with submitit as a job array; needs --out and pip install 'inductor-knobs[slurm]')",
    )
    p.add_argument("--slurm-partition", metavar="NAME", help="--executor slurm: the jobs' partition (default: the cluster's)")
    p.add_argument(
        "--slurm-gpus-per-job",
        type=int,
        metavar="N",
        help="--executor slurm: GPUs per job (default 1 with --device cuda, none on CPU); the run uses the first",
    )
    p.add_argument(
        "--slurm-time",
        type=int,
        metavar="MINUTES",
        help=f"--executor slurm: each job's time limit in minutes (default: --timeout in minutes + {slurm.TIME_MARGIN_MIN})",
    )
    p.add_argument("--slurm-account", metavar="NAME", help="--executor slurm: the account the jobs are charged to")
    p.add_argument(
        "--slurm-sbatch-flag",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="--executor slurm: one more sbatch option for every job, e.g. constraint=a100, cpus-per-task=8, or a bare "
        "KEY such as exclusive (repeatable)",
    )
    p.add_argument(
        "--resume",
        action="store_true",
        help="continue the ablation in --out: run only the runs with no record in <out>/runs or a failed one, keep the "
        "others (the same command and options; the executor and --timeout may differ)",
    )
    p.add_argument("--shard", help="i/n: run only this shard of the jobs (0-based i), e.g. one per node")
    p.add_argument("--out", help="a new or empty directory for results.json, results.csv, results.md (and results.png)")
    p.add_argument(
        "--overwrite",
        action="store_true",
        help="let --out be a directory with earlier results: results.json/.csv/.md/.png are removed before the run",
    )
    p.add_argument("--plot", action="store_true", help="also write results.png (needs pip install 'inductor-knobs[plot]')")
    p.add_argument(
        "--strict",
        action="store_true",
        help="exit 1 if any run failed or compiled with a knob not applied (default: only if all runs failed)",
    )
    p.add_argument("--compare", nargs=2, metavar=("OLD", "NEW"), help="print what changed between two results.json")
    p.add_argument("--merge", nargs="+", metavar="RESULTS", help="merge shard results.json files (with --out)")


def _positive(name: str, value: int | None, default: int) -> int:
    if value is None:
        return default
    if value < 1:
        raise InvalidKnobValue(f"--{name}={value} is invalid: allowed an int >= 1")
    return value


def processes(value: int | None, source: str, *, quick: bool, smoke: bool, main_job: bool) -> int:
    """Processes per arm: ``value`` checked, or the default (see the module docstring).

    Args:
        value: what ``--repeats`` or the TOML's ``repeats`` says, or None.
        source: how to name it in an error (``--repeats=2``, ``repeats = 2 in --config 'a.toml'``).

    Raises:
        InvalidKnobValue: fewer than :data:`.stats.MIN_PROCESSES` without ``smoke`` (too few for an
            interval), or fewer than 1.
    """
    if value is None:
        return SMOKE_PROCESSES if smoke else QUICK_PROCESSES if quick or main_job else DEFAULT_PROCESSES
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise InvalidKnobValue(f"{source} is invalid: allowed an int >= {1 if smoke else stats.MIN_PROCESSES}")
    if value < stats.MIN_PROCESSES and not smoke:
        raise InvalidKnobValue(
            f"{source} is too few processes per arm for a confidence interval: allowed an int >= {stats.MIN_PROCESSES} "
            f"(the bootstrap resamples processes; {DEFAULT_PROCESSES} for nominal 95% coverage), or add --smoke for a "
            "run without intervals"
        )
    return value


def _shard(text: str | None) -> tuple[int, int]:
    if text is None:
        return (0, 1)
    try:
        index, count = (int(p) for p in text.split("/"))
    except ValueError:
        index, count = -1, 0
    if not 0 <= index < count:
        raise InvalidKnobValue(f"--shard={text!r} is invalid: allowed i/n with 0 <= i < n, e.g. 0/4")
    return index, count


def _timeout(value: float) -> float:
    if not value > 0:  # also refuses nan
        raise InvalidKnobValue(f"--timeout={value} is invalid: allowed seconds > 0")
    return value


def _check_plot(plot: bool) -> None:
    """Raise InvalidKnobValue for ``--plot`` without matplotlib, before anything runs (not after
    every arm ran, when results.png is written)."""
    if plot and importlib.util.find_spec("matplotlib") is None:
        raise InvalidKnobValue(
            "--plot needs matplotlib, which is not installed: pip install 'matplotlib>=3.5' (the [plot] extra: "
            "pip install 'inductor-knobs[plot]'); or leave out --plot"
        )


def _check_out(out: str | None, overwrite: bool, resume: bool = False) -> None:
    """Raise InvalidKnobValue unless ``--out`` is new, empty, or holds earlier results and ``--overwrite``
    or ``--resume`` is given: a second run into the same directory would mix its files with the first's
    (an old results.png next to new results.json).

    Args:
        out: ``--out``, or None.
        overwrite: ``--overwrite``: earlier results are removed (after validation, :func:`_clear_out`).
        resume: ``--resume``: ``out`` must hold an earlier ablation's runs (:mod:`.store`), which are kept.
    """
    if resume and overwrite:
        raise InvalidKnobValue("--resume keeps the runs in --out and --overwrite removes them: give one of the two")
    if resume and out is None:
        raise InvalidKnobValue("--resume needs --out: the directory of the ablation to continue")
    if out is None:
        return
    if os.path.exists(out) and not os.path.isdir(out):
        raise InvalidKnobValue(f"--out {out!r} is not a directory: allowed a new or empty directory")
    if resume:
        if not store.has_runs(out):
            raise InvalidKnobValue(
                f"--resume: --out {out!r} holds no earlier ablation ({store.RUNS_DIR}/{store.PLAN_FILE} is missing); "
                "leave out --resume to start one"
            )
        return
    names = sorted(os.listdir(out)) if os.path.isdir(out) else []
    if names and not overwrite:
        shown = ", ".join(names[:4]) + (", ..." if len(names) > 4 else "")
        hint = "; or --resume to run only its missing and failed runs" if store.has_runs(out) else ""
        raise InvalidKnobValue(
            f"--out {out!r} is not empty ({shown}): allowed a new or empty directory; add --overwrite to "
            f"replace the results written there ({', '.join(report.OUTPUT_FILES)}, {store.RUNS_DIR}/; other files are "
            f"kept){hint}"
        )


def _clear_out(out: str | None, overwrite: bool) -> None:
    """With ``--overwrite``, remove what an earlier run wrote into ``--out`` (the result files and the
    kept runs); only after validation."""
    if out is None or not overwrite:
        return
    for name in report.OUTPUT_FILES:
        path = os.path.join(out, name)
        if os.path.isfile(path):
            os.remove(path)
    store.clear(out)


def _load(path: str, option: str) -> dict[str, Any]:
    """Read one results.json named by ``--compare`` or ``--merge``.

    Raises:
        InvalidKnobValue: unreadable, not JSON, or not an ablation's results (the message names the file).
    """
    source = f"{option} {path!r}"
    try:
        with open(path, encoding="utf-8") as src:
            data = json.load(src)
    except OSError as err:
        raise InvalidKnobValue(f"{source} cannot be read: {err.strerror or err}") from err
    except ValueError as err:  # JSONDecodeError and UnicodeDecodeError
        raise InvalidKnobValue(f"{source} is not JSON ({err}): allowed a results.json written by ablate --out") from err
    return report.check(data, source)


def _emulation(text: str | None, device: str, gpus: list[int]) -> EmulationSpec | None:
    """Check ``--emulate-sms`` here, before any arm runs (the workers re-check on the GPU)."""
    if text is None:
        return None
    import torch

    emulation = spec_from_text(text, source=f"--emulate-sms={text!r}")
    if device != "cuda":
        raise InvalidKnobValue(f"--emulate-sms={text!r} needs --device cuda (emulation runs on a CUDA green context)")
    physical = min(torch.cuda.get_device_properties(g).multi_processor_count for g in gpus)
    if emulation.sms > physical:
        raise InvalidKnobValue(
            f"--emulate-sms={text!r} is not allowed: {emulation.sms} SMs; allowed 1..{physical}, the GPU's SM count"
        )
    return emulation


def _emulated_sections(sms: int) -> tuple[tuple[str, ...], str | None]:
    """Which emulated small GPUs the main job adds on a GPU of ``sms`` SMs.

    Returns:
        ``(presets, None)``, or ``((), why not)``.
    """
    import torch

    from ..core import torch_compat

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


def _main_job_arms(
    sms: int | None, emulate: EmulationSpec | None
) -> tuple[list[spec.Arm], dict[str, str], dict[str, str], str | None]:
    """The main job's arms, their sections, each arm's baseline, and why a section is missing (or None)."""
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


def main_job_parallel(device: str, gpus: list[int]) -> int:
    """The main job's ``--parallel`` default: 1 on CPU, else min(4, CPUs per GPU / 4)."""
    if device != "cuda":
        return 1
    per_gpu = (os.cpu_count() or 1) // max(1, len(gpus))
    return max(1, min(MAX_MAIN_JOB_PARALLEL, per_gpu // CPUS_PER_PARALLEL_WORKER))


def build_plan(args: argparse.Namespace) -> Plan:
    """Everything validated: workload, arms, baseline, processes, device, GPUs, shard.  Nothing runs here.

    Returns:
        The plan to execute.

    Raises:
        InvalidKnobValue, UnknownKnob: a bad option value (the message names the option).
    """
    import torch

    toml: dict[str, Any] = spec.load_toml(args.config) if args.config else {}
    executor, slurm_options = _executor(args, toml)
    if executor == "slurm" and args.gpus:
        raise InvalidKnobValue(
            f"--gpus={args.gpus!r} picks GPUs of this machine for the local executor; with --executor slurm each job gets "
            "its own (--slurm-gpus-per-job)"
        )
    if executor == "slurm" and getattr(args, "parallel", None) not in (None, 1):
        raise InvalidKnobValue(f"--parallel={args.parallel} is for the local executor; with --executor slurm every run is a job")
    main_job = not (args.arm or args.grid or args.config)
    device = args.device or ("cuda" if torch.cuda.is_available() else "cpu")
    default = MAIN_JOB_GPU_WORKLOAD if main_job and device == "cuda" else DEFAULT_WORKLOAD
    workload = args.workload or toml.get("workload") or default
    workloads.resolve(workload)  # a missing extra (transformers, timm) is an error here, before anything runs
    smoke = bool(getattr(args, "smoke", False))
    # The main job's model runs at its --quick size on a GPU (the size the README's table measured),
    # with the full number of samples.
    model_size = main_job and device == "cuda" and not args.workload and not toml.get("workload")
    quick = bool(args.quick or toml.get("quick", False) or smoke or model_size)
    fewer_samples = bool(args.quick or toml.get("quick", False) or smoke)
    if args.repeats is not None:
        count = processes(args.repeats, f"--repeats={args.repeats}", quick=quick, smoke=smoke, main_job=main_job)
    else:
        value = toml.get("repeats")
        count = processes(value, f"repeats = {value!r} in --config {args.config!r}", quick=quick, smoke=smoke, main_job=main_job)
    # On Slurm the GPUs are the jobs': a login node without one submits --device cuda all the same.
    remote_gpus = executor == "slurm" and device == "cuda" and not torch.cuda.is_available()
    if device == "cuda" and not torch.cuda.is_available() and not remote_gpus:
        raise InvalidKnobValue(f"--device cuda: torch {torch.__version__} sees no CUDA GPU")
    if remote_gpus and main_job:
        raise InvalidKnobValue(
            "the main job on a GPU reads the GPU's SM count where it is submitted, and this machine has none: give the arms "
            "(--arm, --grid or --config) to run on the Slurm jobs' GPUs, or submit from a machine with the jobs' GPU"
        )
    if remote_gpus and args.emulate_sms:
        raise InvalidKnobValue(
            f"--emulate-sms={args.emulate_sms!r} is checked against the GPU's SM count where it is submitted, and this machine "
            "has none: submit from a machine with the jobs' GPU"
        )
    visible = torch.cuda.device_count() if device == "cuda" else 0
    gpus = list(range(visible))
    if args.gpus:
        try:
            gpus = [int(g) for g in args.gpus.split(",")]
        except ValueError:
            gpus = [-1]
        missing = [g for g in gpus if not 0 <= g < visible]
        if missing:
            raise InvalidKnobValue(f"--gpus={args.gpus!r} names GPU(s) {missing} that do not exist: {visible} visible ({device})")
    for gpu in gpus if device == "cuda" else []:  # each worker's CUDA_VISIBLE_DEVICES, checked before anything runs
        runner.physical_gpu(gpu, os.environ.get("CUDA_VISIBLE_DEVICES"))
    emulate = _emulation(args.emulate_sms, device, gpus)
    arms = list(toml.get("arms", [])) + [spec.parse_arm(a) for a in args.arm] + spec.parse_grid(args.grid)
    sections: dict[str, str] = {}
    baselines: dict[str, str] = {}
    skipped = None
    if main_job:
        sms = min(torch.cuda.get_device_properties(g).multi_processor_count for g in gpus) if gpus and device == "cuda" else None
        arms, sections, baselines, skipped = _main_job_arms(sms, emulate)
    spec.check_names(arms)
    baseline = args.baseline or toml.get("baseline") or arms[0].name
    if baseline not in [a.name for a in arms]:
        raise InvalidKnobValue(f"--baseline={baseline!r} is not an arm; arms: {', '.join(a.name for a in arms)}")
    if args.baseline and baselines:  # --baseline NAME in the main job: NAME's counterpart in every section
        base = args.baseline.split("@")[0]
        baselines = {a.name: (base + a.name[len(a.name.split("@")[0]) :]) for a in arms if a.name in baselines}
    parallel = _parallel(getattr(args, "parallel", None), device, gpus, main_job)
    return Plan(
        workload=workload,
        arms=arms,
        baseline=baseline,
        device=device,
        gpus=gpus,
        quick=quick,
        repeats=count,
        iters=_positive("iters", args.iters, 5 if fewer_samples else 20),
        warmup=1 if fewer_samples else 3,
        timeout=_timeout(args.timeout),
        shard=_shard(args.shard),
        emulate=args.emulate_sms.strip() if emulate else None,
        smoke=smoke,
        sections=sections,
        baselines=baselines,
        profile_iters=2 if fewer_samples else 5,
        main_job=main_job,
        emulation_skipped=skipped,
        parallel=1 if executor == "slurm" else parallel,
        executor=executor,
        slurm=slurm_options,
    )


#: The command line's Slurm options: attribute -> option.
SLURM_OPTIONS = {
    "slurm_partition": "--slurm-partition",
    "slurm_gpus_per_job": "--slurm-gpus-per-job",
    "slurm_time": "--slurm-time",
    "slurm_account": "--slurm-account",
    "slurm_sbatch_flag": "--slurm-sbatch-flag",
}


def _executor(args: argparse.Namespace, toml: dict[str, Any]) -> tuple[str, slurm.SlurmOptions | None]:
    """``--executor`` (or the TOML's ``executor``) and its Slurm options, checked before anything runs.

    Returns:
        ``("local", None)`` or ``("slurm", options)``.

    Raises:
        InvalidKnobValue: an unknown executor; a Slurm option (or a ``[slurm]`` table) without the Slurm
            executor; a bad Slurm option; with the Slurm executor, no ``--out``, no submitit (the message
            names ``pip install 'inductor-knobs[slurm]'``) or no ``sbatch``.
    """
    given = getattr(args, "executor", None)
    if given is not None:
        executor = slurm.check_executor(given, f"--executor={given!r}")
    elif toml.get("executor") is not None:
        executor = slurm.check_executor(toml["executor"], f"executor = {toml['executor']!r} in --config {args.config!r}")
    else:
        executor = "local"
    used = [option for attr, option in SLURM_OPTIONS.items() if getattr(args, attr, None) not in (None, [])]
    if executor != "slurm":
        if used:
            raise InvalidKnobValue(f"{used[0]} needs --executor slurm (the {executor} executor submits no Slurm jobs)")
        if "slurm" in toml and given is None:
            raise InvalidKnobValue(
                f'--config {args.config!r} has a [slurm] table but no executor = "slurm": add it to the file, or '
                "--executor slurm (--executor local runs the file here and ignores the table)"
            )
        return executor, None
    options = slurm.make_options(
        partition=getattr(args, "slurm_partition", None),
        gpus_per_job=getattr(args, "slurm_gpus_per_job", None),
        time_min=getattr(args, "slurm_time", None),
        account=getattr(args, "slurm_account", None),
        flags=list(getattr(args, "slurm_sbatch_flag", None) or []),
        table=toml.get("slurm"),
        table_source=f"[slurm] in --config {args.config!r}",
    )
    if not args.out:
        raise InvalidKnobValue(
            "--executor slurm needs --out: the jobs' pickles, results and logs go to <out>/slurm, which the nodes must "
            "see (a shared file system)"
        )
    slurm.check_available()
    return executor, options


def _parallel(value: int | None, device: str, gpus: list[int], main_job: bool) -> int:
    """``--parallel`` checked, or its default (see the module docstring).

    Raises:
        InvalidKnobValue: below 1, or above 1 on CPU (the measured arms would share the CPUs with
            compiling ones).
    """
    if value is None:
        return main_job_parallel(device, gpus) if main_job else 1
    if value < 1:
        raise InvalidKnobValue(f"--parallel={value} is invalid: allowed an int >= 1")
    if value > 1 and device != "cuda":
        raise InvalidKnobValue(
            f"--parallel={value} needs --device cuda: on CPU the measured arm would share the CPUs with the compiling "
            "ones; allowed 1"
        )
    return value


def _results(plan: Plan, conflicts: dict[str, list[str]]) -> dict[str, Any]:
    """results.json before the runs: the plan, the environment, the machine (schema :data:`.report.SCHEMA`)."""
    arms = []
    for arm in plan.arms:
        entry = {**arm.to_dict(), "overrides_mode": conflicts[arm.name]}
        if arm.name in plan.sections:
            entry.update(section=plan.sections[arm.name], baseline=plan.baselines.get(arm.name, plan.baseline))
        arms.append(entry)
    return {
        "schema": report.SCHEMA,
        "workload": plan.workload,
        "device": plan.device,
        "repeats": plan.repeats,
        "iters": plan.iters,
        "quick": plan.quick,
        "smoke": plan.smoke,
        "main_job": plan.main_job,
        "emulation_skipped": plan.emulation_skipped,
        "parallel": plan.parallel,
        "baseline": plan.baseline,
        "arms": arms,
        "shard": list(plan.shard),
        "gpus": list(plan.gpus) if plan.device == "cuda" else [],
        "emulate_sms": plan.emulate,
        "environment": environment(plan),
        "machine": {"host": socket.gethostname(), "cpu_count": os.cpu_count()},
        "started": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        "runs": [],
        "partial": False,
    }


def environment(plan: Plan) -> dict[str, Any]:
    """The torch version, the device's name and ``doctor``'s report, for results.json."""
    import torch

    from .. import doctor

    if plan.device == "cuda" and plan.gpus:
        name = torch.cuda.get_device_name(plan.gpus[0])
    elif plan.device == "cuda":  # --executor slurm from a machine without a GPU
        name = "the Slurm jobs' GPUs"
    else:
        name = f"CPU ({torch.backends.cpu.get_cpu_capability()})"
    return {"torch": torch.__version__, "device_name": name, "doctor": doctor.collect()}


def run(args: argparse.Namespace) -> int:
    """Run the subcommand.

    Returns:
        The exit status: 0; 1 if every run failed (or, with ``--strict``, any failed or was NOT
        APPLIED); 128 + the signal's number (130 SIGINT, 143 SIGTERM) when interrupted.

    Raises:
        KnobsError: bad input, before any arm runs (the CLI prints it as one line).
    """
    try:
        with runner.signals_raise():
            return _run(args)
    except Interrupted as stop:  # before or after the arms ran: nothing to keep
        print(f"inductor-knobs: interrupted by {stop.name}", file=sys.stderr)
        return stop.status


def _run(args: argparse.Namespace) -> int:
    if args.compare:
        old, new = (_load(p, "--compare") for p in args.compare)
        for line in report.differences(old, new):
            print(f"warning: {line}", file=sys.stderr)
        print(report.compare(old, new))
        return 0
    entered = time.perf_counter()
    resume = bool(getattr(args, "resume", False))
    if resume and args.merge:
        raise InvalidKnobValue("--resume continues an ablation's runs; --merge runs nothing: give one of the two")
    _check_plot(args.plot)
    _check_out(args.out, args.overwrite, resume)
    if args.merge:
        results = report.merge([_load(p, "--merge") for p in args.merge])
        _clear_out(args.out, args.overwrite)
    else:
        plan = build_plan(args)
        conflicts = {a.name: a.conflicts() for a in plan.arms}
        for name, items in conflicts.items():
            for item in items:  # shown before anything runs
                print(f"arm {name}: {item} (the knob wins: knob > options > mode > default)", file=sys.stderr)
        results = _results(plan, conflicts)
        jobs = plan.jobs()
        runs = store.RunStore(args.out) if args.out else None
        if resume and runs is not None:  # the plan is checked here, before anything runs
            kept = runs.begin(jobs, resume=True)
        else:
            _clear_out(args.out, args.overwrite)
            kept = runs.begin(jobs, resume=False) if runs is not None else {}
        todo = [job for job in jobs if int(job["index"]) not in kept]
        print(
            f"ablate: workload {plan.workload}, {len(plan.arms)} arms x {plan.repeats} process(es) on "
            f"{results['environment']['device_name']}"
            + (f", {plan.parallel} at once per GPU" if plan.parallel > 1 else "")
            + (f", shard {plan.shard[0]}/{plan.shard[1]}" if plan.shard[1] > 1 else "")
            + (", one Slurm job per run" if plan.executor == "slurm" else "")
            + (f"; resuming: {len(kept)} of {len(jobs)} runs kept, {len(todo)} to run" if resume else ""),
            file=sys.stderr,
        )
        results["executor"] = plan.executor
        if resume:
            results["resumed_runs"] = len(kept)
        start = time.perf_counter()
        results["setup_seconds"] = start - entered
        try:
            fresh = _execute(plan, args.out, todo, runs, results)
        except Interrupted as stop:
            with runner.signals_ignored():  # a second Ctrl-C must not lose the finished runs
                results["wall_seconds"] = time.perf_counter() - start
                done = sorted([*kept.values(), *stop.runs], key=lambda r: r["index"])
                return _interrupted(args, results, Interrupted(stop.signum, done, len(jobs)))
        results["runs"] = sorted([*kept.values(), *fresh], key=lambda r: r["index"])
        results["wall_seconds"] = time.perf_counter() - start
    print(report.markdown(results))
    for warning in report.load_warnings(results):
        print(f"warning: {warning}", file=sys.stderr)
    if args.out:
        writing = time.perf_counter()
        for path in report.write(results, args.out, plot=args.plot):
            print(f"wrote {path}", file=sys.stderr)
        print(
            f"(writing the results{' and the plot' if args.plot else ''} took {time.perf_counter() - writing:.1f} s)",
            file=sys.stderr,
        )
    failed = [r for r in results["runs"] if not r.get("ok") or r.get("not_applied")]
    crashed = [r for r in results["runs"] if not r.get("ok")]
    return 1 if results["runs"] and (len(crashed) == len(results["runs"]) or (args.strict and failed)) else 0


def _execute(
    plan: Plan, out: str | None, jobs: list[dict[str, Any]], runs: store.RunStore | None, results: dict[str, Any]
) -> list[dict[str, Any]]:
    """Run ``jobs`` with ``plan.executor``; every record is kept in ``runs`` as it finishes.

    The two executors differ only in where :func:`.runner.call_job` runs: here, in one thread per GPU
    (:func:`.runner.execute`), or in one Slurm job per run (:func:`.slurm.execute`, which also fills
    ``results["slurm"]`` with its options, folder and job ids).

    Returns:
        The new records, by job index.

    Raises:
        Interrupted: SIGINT or SIGTERM (the workers stopped, the Slurm jobs cancelled).
        SlurmSubmitFailed: ``sbatch`` refused the jobs.
    """
    save = runs.save if runs is not None else None
    if plan.executor != "slurm":
        return execute(plan, jobs=jobs, on_record=save)
    assert out is not None and plan.slurm is not None  # build_plan requires both for the Slurm executor
    folder = os.path.abspath(os.path.join(out, "slurm"))
    submitted = slurm.SlurmRun()
    results["slurm"] = {"options": plan.slurm.to_dict(), "folder": folder, "job_ids": {}}
    try:
        return slurm.execute(plan, folder, jobs=jobs, on_record=save, run=submitted)
    finally:
        results["slurm"]["job_ids"] = {str(index): job for index, job in sorted(submitted.job_ids.items())}


def _interrupted(args: argparse.Namespace, results: dict[str, Any], stop: Interrupted) -> int:
    """Report and keep the runs that finished before ``stop``; returns its exit status."""
    results.update(runs=stop.runs, partial=True, interrupted=stop.name, planned_runs=stop.planned)
    if stop.runs:
        print(report.markdown(results))
    # No plot: whoever pressed Ctrl-C wants the prompt back, not a matplotlib import.
    paths = report.write(results, args.out) if args.out else []
    where = f"; partial results in {paths[0]}" if paths else ""
    print(
        f"inductor-knobs: interrupted by {stop.name}: {len(stop.runs)} of {stop.planned} runs finished, "
        f"{'Slurm jobs cancelled' if results.get('executor') == 'slurm' else 'workers stopped'}{where}"
        + ("; --resume runs the rest" if args.out else ""),
        file=sys.stderr,
    )
    return stop.status
