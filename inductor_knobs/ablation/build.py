"""``inductor-knobs ablate``'s plan: every option checked and turned into a :class:`.plan.Plan`
(:func:`build_plan`) before the first worker starts or the first Slurm job is submitted.

**Processes per arm** (``--repeats``; the process is the unit of the confidence intervals, see
:mod:`.stats`): 5 by default (narrower intervals); 3 with ``--quick`` and for the
main job, whose budget is 5 minutes on one H100 or H200 (6 arms × 3 processes) and 2 minutes on a
2-core CPU (2 arms × 3 processes); fewer than 3 is an error unless ``--smoke`` (1 process per arm,
quick inputs, no intervals: does every arm compile, run and match eager?).  An option on the command
line wins over ``--config``'s file, and the file over the defaults: ``--smoke`` and ``--quick`` give
their counts over the file's ``repeats`` (an explicit ``--repeats`` wins over both).

**Processes at once** (``--parallel``): that many workers per GPU (or on the CPU) start, build and
compile at the same time, ``parallel × GPUs`` on the host, whichever GPUs their repeats are on (repeat
``r`` of every arm runs on GPU ``r mod GPUs``, :func:`.plan.gpu_for_repeat`); they measure one at a time,
and only while no worker of the ablation compiles (the phase barrier of :mod:`.quiet`).  1 by default;
the main job on a GPU uses :func:`.main_job.main_job_parallel` (16 on a 16-CPU host).
"""

from __future__ import annotations

import argparse
import os
from typing import Any

from ..errors import InvalidKnobValue
from ..ext import EmulationSpec, spec_from_text
from . import main_job as main
from . import slurm_options, spec, stats, workloads
from .errors import require_extra
from .options import (
    DEFAULT_PROCESSES,
    DEFAULT_WORKLOAD,
    MAIN_JOB_GPU_WORKLOAD,
    QUICK_PROCESSES,
    SLURM_OPTIONS,
    SMOKE_PROCESSES,
)
from .plan import Plan, SlurmOptions, runs_per_lane, smallest_gpu_gib
from .workers import COMPILE_THREADS_VAR, inherited_compile_threads, physical_gpu


def _positive(name: str, value: int | None, default: int) -> int:
    if value is None:
        return default
    if value < 1:
        raise InvalidKnobValue(f"--{name}={value} is invalid: allowed an int >= 1")
    return value


def processes(value: int | None, source: str, *, quick: bool, smoke: bool, main_job: bool) -> int:
    """Processes per arm: ``value`` checked, or the default (see the module docstring).

    Args:
        value (int | None): what ``--repeats`` or the TOML's ``repeats`` says, or None.
        source (str): how to name it in an error (``--repeats=2``, ``repeats = 2 in --config 'a.toml'``).
        quick, smoke, main_job (bool): ``--quick``, ``--smoke``, and whether this is the main job.

    Returns:
        int: processes per arm.

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
            f"(the speedup's {stats.METHOD} is over processes, and its false-verdict rate is measured from "
            f"{stats.MIN_PROCESSES} per arm), or add --smoke for a run without intervals"
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


def check_plot(plot: bool) -> None:
    """Refuse ``--plot`` without matplotlib, before anything runs (not after every arm ran, when
    results.png is written).

    Args:
        plot (bool): ``--plot``.

    Raises:
        ExtraMissing: ``plot`` and matplotlib is not installed.
    """
    if plot:
        require_extra(("matplotlib",), "--plot", "or leave out --plot")


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


def build_plan(args: argparse.Namespace) -> Plan:
    """Everything validated: workload, arms, baseline, processes, device, GPUs, shard.  Nothing runs here.

    Args:
        args (argparse.Namespace): the parsed command line (:func:`.options.add_parser`).

    Returns:
        Plan: the plan to execute.

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
    # The command line wins over the file, the file over the defaults: --repeats, then the count --smoke or
    # --quick stands for, then the file's repeats (checked all the same), then the defaults.
    value = toml.get("repeats")
    count = processes(value, f"repeats = {value!r} in --config {args.config!r}", quick=quick, smoke=smoke, main_job=main_job)
    if args.repeats is not None:
        count = processes(args.repeats, f"--repeats={args.repeats}", quick=quick, smoke=smoke, main_job=main_job)
    elif smoke or args.quick:
        count = processes(None, "", quick=quick, smoke=smoke, main_job=main_job)
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
        physical_gpu(gpu, os.environ.get("CUDA_VISIBLE_DEVICES"))
    emulate = _emulation(args.emulate_sms, device, gpus)
    arms = list(toml.get("arms", [])) + [spec.parse_arm(a) for a in args.arm] + spec.parse_grid(args.grid)
    sections: dict[str, str] = {}
    baselines: dict[str, str] = {}
    skipped = None
    if main_job:
        sms = min(torch.cuda.get_device_properties(g).multi_processor_count for g in gpus) if gpus and device == "cuda" else None
        arms, sections, baselines, skipped = main.arms(sms, emulate)
    spec.check_names(arms)
    baseline = args.baseline or toml.get("baseline") or arms[0].name
    if baseline not in [a.name for a in arms]:
        raise InvalidKnobValue(f"--baseline={baseline!r} is not an arm; arms: {', '.join(a.name for a in arms)}")
    if args.baseline and baselines:  # --baseline NAME in the main job: NAME's counterpart in every section
        base = args.baseline.split("@")[0]
        baselines = {a.name: (base + a.name[len(a.name.split("@")[0]) :]) for a in arms if a.name in baselines}
    parallel = _parallel(getattr(args, "parallel", None))
    threads = getattr(args, "compile_threads", None)
    if threads is not None and (isinstance(threads, bool) or not isinstance(threads, int) or threads < 1):
        raise InvalidKnobValue(
            f"--compile-threads={threads!r} is invalid: allowed an int >= 1 (Inductor compile threads per worker)"
        )
    if threads is not None and executor == "slurm":
        raise InvalidKnobValue(
            f"--compile-threads={threads} is for the local executor; with --executor slurm each job has its own CPUs and "
            "Inductor chooses"
        )
    inherited = inherited_compile_threads()
    if threads is not None and inherited is not None and inherited != str(threads):
        raise InvalidKnobValue(
            f"--compile-threads={threads} differs from {COMPILE_THREADS_VAR}={inherited!r} in this environment, "
            "which every worker inherits: give one of the two"
        )
    plan = Plan(
        workload=workload,
        arms=arms,
        baseline=baseline,
        device=device,
        gpus=gpus,
        quick=quick,
        repeats=count,
        iters=_positive("iters", args.iters, 5 if fewer_samples else main.MAIN_JOB_GPU_ITERS if main_job and gpus else 20),
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
        parallel=1 if executor == "slurm" or parallel is None else parallel,
        compile_threads=threads,
        executor=executor,
        slurm=slurm_options,
    )
    if parallel is None and main_job and executor != "slurm":  # the default: sized by this shard's busiest GPU
        runs = max(runs_per_lane(plan.jobs(), gpus or [None]).values(), default=1)
        plan.parallel = main.main_job_parallel(device, gpus, smallest_gpu_gib(device, gpus), runs)
    return plan


def _executor(args: argparse.Namespace, toml: dict[str, Any]) -> tuple[str, SlurmOptions | None]:
    """``--executor`` (or the TOML's ``executor``) and its Slurm options, checked before anything runs.

    Returns:
        ``("local", None)`` or ``("slurm", options)``.

    Raises:
        InvalidKnobValue: an unknown executor; a Slurm option (or a ``[slurm]`` table) without the Slurm
            executor; a bad Slurm option; with the Slurm executor, no ``--out`` or no ``sbatch``.
        ExtraMissing: the Slurm executor without submitit.
    """
    given = getattr(args, "executor", None)
    if given is not None:
        executor = slurm_options.check_executor(given, f"--executor={given!r}")
    elif toml.get("executor") is not None:
        executor = slurm_options.check_executor(toml["executor"], f"executor = {toml['executor']!r} in --config {args.config!r}")
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
    options = slurm_options.make_options(
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
    slurm_options.check_available()
    return executor, options


def _parallel(value: int | None) -> int | None:
    """``--parallel`` checked, or None for its default (see the module docstring).

    Raises:
        InvalidKnobValue: below 1.
    """
    if value is None:
        return None
    if value < 1:
        raise InvalidKnobValue(f"--parallel={value} is invalid: allowed an int >= 1")
    return value
