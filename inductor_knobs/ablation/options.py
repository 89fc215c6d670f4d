"""``inductor-knobs ablate``'s command line: the options (:func:`add_parser`) and their defaults.

The values are checked by :mod:`.build` (and, for ``--out``, :mod:`.outdir`) before anything runs;
:mod:`.command` runs the subcommand.
"""

from __future__ import annotations

from typing import Any

from . import outdir, stats, workloads
from .main_job import CPUS_PER_PARALLEL_WORKER, MAX_MAIN_JOB_PARALLEL
from .plan import TIME_MARGIN_MIN

DEFAULT_WORKLOAD = "gemm_mlp"

#: The main job's model on a GPU (its inputs at the ``--quick`` size, 2×64 tokens: the size the
#: README's real-model table measured).
MAIN_JOB_GPU_WORKLOAD = "hf:bert-base"

#: Processes per arm: the default, with --quick and for the main job, with --smoke (see :mod:`.command`).
DEFAULT_PROCESSES, QUICK_PROCESSES, MAIN_JOB_PROCESSES, SMOKE_PROCESSES = 5, 3, 3, 1

#: The command line's Slurm options: attribute -> option.
SLURM_OPTIONS = {
    "slurm_partition": "--slurm-partition",
    "slurm_gpus_per_job": "--slurm-gpus-per-job",
    "slurm_time": "--slurm-time",
    "slurm_account": "--slurm-account",
    "slurm_sbatch_flag": "--slurm-sbatch-flag",
}


def add_parser(sub: Any) -> None:
    """Add the ``ablate`` subcommand and its options.

    Args:
        sub (argparse._SubParsersAction): the CLI's subparsers (``parser.add_subparsers()``).
    """
    p = sub.add_parser(
        "ablate",
        help="compare Inductor settings: isolated arms, interleaved repeats, statistics",
        description="With no arguments (the main job): on a GPU, a randomly initialised BERT-base under arms gated "
        "(GEMM autotuning, torch's 68-SM gate as it is) and force_gemm_autotune, on an emulated T4 (40 SMs) and L4 "
        "(58 SMs) below the gate and on this GPU (an A/A control); on CPU, which has no SM gate, gemm_mlp under default "
        "and max-autotune-no-cudagraphs.  Each arm x repeat is a fresh process; speedups get 95% t-intervals "
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
    p.add_argument(
        "--config",
        help="a TOML file of arms and settings (see examples/ablation.toml); an option given here wins over the file, "
        "and the file over the defaults: --smoke and --quick set the processes per arm over the file's repeats, and "
        "--repeats over both",
    )
    p.add_argument("--baseline", help="the arm speedups are relative to (default: the first)")
    p.add_argument(
        "--repeats",
        type=int,
        help=f"processes per arm, interleaved; the unit of the confidence intervals (default: the --config file's "
        f"repeats, else {DEFAULT_PROCESSES}; {QUICK_PROCESSES} with --quick and for the main job, {SMOKE_PROCESSES} with "
        f"--smoke; at least {stats.MIN_PROCESSES} unless --smoke)",
    )
    p.add_argument("--iters", type=int, help="latency samples per process (default 20; main job on a GPU 200; 5 with --quick)")
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
        help="worker processes per GPU (or on the CPU) at once: they compile in parallel, then measure one at a "
        "time while none of them compiles (default 1; the main job on a GPU: "
        f"min({MAX_MAIN_JOB_PARALLEL}, CPUs per GPU / {CPUS_PER_PARALLEL_WORKER:g}), fewer where memory is short)",
    )
    p.add_argument(
        "--compile-threads",
        type=int,
        metavar="N",
        help="Inductor compile threads of each worker (TORCHINDUCTOR_COMPILE_THREADS; local executor; default with "
        "--parallel above 1: CPUs / (GPUs x parallel), else Inductor's own choice)",
    )
    p.add_argument("--timeout", type=float, default=900.0, help="seconds per arm process (default 900)")
    p.add_argument(
        "--executor",
        help="where each run's process runs: local (default; here, one worker per GPU at a time) or slurm (one "
        "Slurm job per run, submitted with submitit as a job array; needs --out and submitit, from "
        "pip install 'inductor-knobs[ablate]')",
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
        help=f"--executor slurm: each job's time limit in minutes (default: --timeout in minutes + {TIME_MARGIN_MIN})",
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
        "others (the same command and options; the executor and --timeout may differ); refused, unless --allow-mixed, "
        "where the kept runs' fingerprints differ from this run's, as --merge refuses shards",
    )
    p.add_argument("--shard", help="i/n: run only this shard of the jobs (0-based i), e.g. one per node")
    p.add_argument("--out", help="a new or empty directory for results.json, results.csv, results.md (and results.png)")
    p.add_argument(
        "--overwrite",
        action="store_true",
        help=f"let --out be a directory with earlier results: the new run writes into <out>/{outdir.STAGING} and, only if "
        "it exits 0, its results.json/.csv/.md (and .png) and runs/ replace the earlier ones there (an earlier results "
        "file it did not write is removed; other files are kept); a run that fails or is interrupted leaves the earlier "
        "results unchanged",
    )
    p.add_argument(
        "--plot", action="store_true", help="also write results.png (needs matplotlib, from pip install 'inductor-knobs[ablate]')"
    )
    p.add_argument(
        "--strict",
        action="store_true",
        help="exit 1 if any run failed or compiled with a knob not applied (default: only if all runs failed)",
    )
    p.add_argument("--compare", nargs=2, metavar=("OLD", "NEW"), help="print what changed between two results.json")
    p.add_argument(
        "--merge",
        nargs="+",
        metavar="RESULTS",
        help="merge shard results.json files (with --out); refuses a run given twice, and runs whose fingerprints "
        "(versions, GPU and compute capability, TORCHINDUCTOR_*/TORCH_*/TRITON_* variables, an arm's settings, the "
        "workload) differ",
    )
    p.add_argument(
        "--allow-mixed",
        action="store_true",
        help="--merge and --resume: pool runs whose fingerprints differ, or runs from before fingerprints, on purpose "
        "(the report says the data is mixed and lists the differences); a run given twice is still refused",
    )
