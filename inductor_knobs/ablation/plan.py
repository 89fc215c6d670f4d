"""What an ablation runs: the :class:`Plan` (arms, repeats, device, shard, executor) and, for the Slurm
executor, the :class:`SlurmOptions` of its jobs.

Both are plain data, built and validated by :mod:`.build` (and :mod:`.slurm_options`) before anything
runs, and read by the executors (:mod:`.runner`, :mod:`.slurm`); this module imports neither.
"""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, TypeVar

from .spec import Arm

_Lane = TypeVar("_Lane")

#: Minutes added to ``--timeout`` for the default Slurm time limit (the job's start and imports).
TIME_MARGIN_MIN = 5


@dataclass(frozen=True)
class SlurmOptions:
    """How each run's Slurm job is submitted (validated by :func:`.slurm_options.make_options`).

    Attributes:
        partition: ``--partition`` (None: the cluster's default).
        gpus_per_job: ``--gpus-per-node`` of each job (None: 1 with ``--device cuda``, none on CPU).
        time_min: the time limit in minutes (None: ``--timeout`` rounded up to minutes, plus
            :data:`TIME_MARGIN_MIN`).
        account: ``--account`` (None: the user's default).
        sbatch: more ``sbatch`` options, name (without ``--``) -> value (True: a flag without a value).
    """

    partition: str | None = None
    gpus_per_job: int | None = None
    time_min: int | None = None
    account: str | None = None
    sbatch: dict[str, str | bool] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        """The options as results.json's ``slurm.options`` holds them.

        Returns:
            dict[str, Any]: ``partition``, ``gpus_per_job``, ``time_min``, ``account``, ``sbatch``.
        """
        return {
            "partition": self.partition,
            "gpus_per_job": self.gpus_per_job,
            "time_min": self.time_min,
            "account": self.account,
            "sbatch": dict(self.sbatch),
        }

    def parameters(self, plan: Plan) -> dict[str, Any]:
        """The keyword arguments of submitit's ``AutoExecutor.update_parameters`` for ``plan``'s jobs.

        Args:
            plan (Plan): the ablation (its device decides the default GPUs, its timeout the default time).

        Returns:
            dict[str, Any]: ``name``, ``timeout_min`` (minutes), and ``gpus_per_node``,
            ``slurm_partition``, ``slurm_account`` and ``slurm_additional_parameters`` where they are set.
        """
        gpus = self.gpus_per_job if self.gpus_per_job is not None else (1 if plan.device == "cuda" else 0)
        minutes = self.time_min if self.time_min is not None else math.ceil(plan.timeout / 60) + TIME_MARGIN_MIN
        params: dict[str, Any] = {"name": "ik-ablate", "timeout_min": int(minutes)}
        if gpus:
            params["gpus_per_node"] = gpus
        if self.partition:
            params["slurm_partition"] = self.partition
        if self.account:
            params["slurm_account"] = self.account
        if self.sbatch:
            params["slurm_additional_parameters"] = {k.replace("-", "_"): v for k, v in self.sbatch.items()}
        return params


@dataclass
class Plan:
    """What to run.

    Attributes:
        workload: a built-in name or ``pkg.module:factory``.
        arms: the arms, baseline first unless ``baseline`` names another.
        repeats: processes per arm.
        device: ``cuda`` or ``cpu``.
        gpus: GPU indices to spread jobs over (CUDA only), as torch numbers them in this process;
            each worker gets the matching entry of this process's ``CUDA_VISIBLE_DEVICES``
            (:func:`.workers.physical_gpu`).
        quick: smaller inputs and fewer samples (for CI).
        iters: latency samples per process; warmup: iterations before sampling.
        timeout: seconds per job.
        shard: ``(i, n)``: run only jobs ``j`` with ``j % n == i``.
        emulate: ``INDUCTOR_KNOBS_EMULATE_SMS`` for every job whose arm sets none (an SM count or
            preset), or None.
        smoke: a smoke test: fewer than 3 processes per arm allowed, no intervals.
        sections: arm name -> the table section it belongs to ("" or absent: the main one).
        baselines: arm name -> the arm its speedup is relative to (absent: ``baseline``).
        profile_iters: iterations profiled for GPU kernel time (CUDA only).
        main_job: the arms are the main job's (no --arm, --grid or --config).
        emulation_skipped: why the main job has no emulated small-GPU section, or None.
        parallel: workers per GPU at once (see :mod:`.runner`); 1 on CPU.
        compile_threads: ``--compile-threads``: Inductor compile threads of each worker and the fork server, or None
            (the default of :func:`.runner.make_workers`).
        executor: where the jobs run: ``local`` (:func:`.runner.execute`, here) or ``slurm`` (one
            Slurm job per run, :func:`.slurm.execute`); the records are the same.
        slurm: the Slurm job options (``executor == "slurm"`` only).
    """

    workload: str
    arms: list[Arm]
    repeats: int = 3
    device: str = "cpu"
    gpus: list[int] = field(default_factory=list)
    quick: bool = False
    iters: int = 20
    warmup: int = 3
    timeout: float = 900.0
    shard: tuple[int, int] = (0, 1)
    baseline: str | None = None
    emulate: str | None = None
    smoke: bool = False
    sections: dict[str, str] = field(default_factory=dict)
    baselines: dict[str, str] = field(default_factory=dict)
    profile_iters: int = 5
    main_job: bool = False
    emulation_skipped: str | None = None
    parallel: int = 1
    compile_threads: int | None = None
    executor: str = "local"
    slurm: SlurmOptions | None = None

    def jobs(self) -> list[dict[str, Any]]:
        """Interleaved jobs (repeat 0 of every arm, then repeat 1, …), this shard's only.

        Returns:
            list[dict[str, Any]]: one JSON-ready job per run: ``index`` (its place in the whole
            plan), ``repeat``, ``arm`` (:meth:`.spec.Arm.to_dict`), ``workload``, ``device``,
            ``quick``, ``iters``, ``warmup``, ``seed``, ``emulate``, ``profile_iters``.
        """
        jobs: list[dict[str, Any]] = [
            {
                "index": r * len(self.arms) + a,
                "repeat": r,
                "arm": arm.to_dict(),
                "workload": self.workload,
                "device": self.device,
                "quick": self.quick,
                "iters": self.iters,
                "warmup": self.warmup,
                "seed": 0,
                "emulate": arm.emulate or self.emulate,
                "profile_iters": self.profile_iters,
            }
            for r in range(self.repeats)
            for a, arm in enumerate(self.arms)
        ]
        index, count = self.shard
        return [j for j in jobs if int(j["index"]) % count == index]


def runs_per_lane(jobs: Sequence[Mapping[str, Any]], lanes: Sequence[_Lane]) -> dict[_Lane, int]:
    """How many of ``jobs`` run on each lane (:func:`gpu_for_repeat`).

    Args:
        jobs (Sequence[Mapping[str, Any]]): jobs with ``repeat`` (:meth:`Plan.jobs`).
        lanes (Sequence[_Lane]): the GPUs, or ``[None]`` (the CPU).

    Returns:
        dict[_Lane, int]: every lane, with 0 where none runs.
    """
    counts = dict.fromkeys(lanes, 0)
    for job in jobs:
        counts[gpu_for_repeat(int(job["repeat"]), lanes)] += 1
    return counts


def gpu_for_repeat(repeat: int, gpus: Sequence[_Lane]) -> _Lane:
    """The GPU (lane) that repeat ``repeat`` of every arm runs on: ``gpus[repeat mod len(gpus)]``.

    Every arm's repeat ``r`` runs on the same GPU, so every arm has the same number of processes on each GPU
    and a difference between GPUs shifts every arm alike: no arm is confounded with a GPU.  When the repeats
    are not a multiple of the GPUs, some GPUs run one repeat more than others (3 repeats on 2 GPUs: GPU 0
    runs repeats 0 and 2, GPU 1 repeat 1), every arm alike; a rotation by arm (``(r + arm) mod len(gpus)``)
    would even out the count per GPU but give two arms different GPUs in that case.  The local executor
    compiles on the host's shared CPUs whichever GPU a run is on (:mod:`.quiet`), so the GPU with more runs
    does not lengthen the compile.

    Args:
        repeat (int): the repeat (0-based).
        gpus (Sequence): the lanes: GPU indices as torch numbers them in this process, or ``[None]`` (the CPU).

    Returns:
        the lane of ``repeat``.
    """
    return gpus[repeat % len(gpus)]


def placement_note(results: Mapping[str, Any]) -> str:
    """The report's sentence on how the repeats were placed on the GPUs, read from the records' ``gpu`` and
    ``repeat`` and results.json's ``gpus``, e.g. "Repeats were blocked by GPU: repeat r of every arm ran on GPU
    r mod 2 (GPU 0: repeats 0,2; GPU 1: repeat 1)".

    Args:
        results (Mapping[str, Any]): the results (``gpus``, ``executor``, ``runs``).

    Returns:
        str: the sentence; empty for one GPU or the CPU (nothing to place), and for records without ``gpu``.
    """
    gpus = [int(g) for g in results.get("gpus") or []]
    runs = [r for r in results.get("runs") or [] if r.get("gpu") is not None and r.get("repeat") is not None]
    if results.get("executor") == "slurm":
        return "Each run ran on its own Slurm job's GPU: repeats were not blocked by GPU" if runs else ""
    if len(gpus) < 2 or not runs:
        return ""
    seen: dict[int, set[int]] = defaultdict(set)
    for run in runs:
        seen[int(run["gpu"])].add(int(run["repeat"]))
    per_gpu = "; ".join(
        f"GPU {g}: "
        + (f"repeat{'s' if len(seen[g]) > 1 else ''} {','.join(str(r) for r in sorted(seen[g]))}" if seen[g] else "no runs")
        for g in sorted(set(gpus) | set(seen))
    )
    if all(int(r["gpu"]) == gpu_for_repeat(int(r["repeat"]), gpus) for r in runs):
        rule = (
            f"GPU r mod {len(gpus)}"
            if gpus == list(range(len(gpus)))
            else f"the (r mod {len(gpus)})-th of GPUs {','.join(map(str, gpus))}"
        )
        return f"Repeats were blocked by GPU: repeat r of every arm ran on {rule} ({per_gpu})"
    return (
        f"Repeats were not blocked by GPU: each run took whichever GPU was free, so an arm's processes may differ in "
        f"GPU from another arm's ({per_gpu})"
    )


def smallest_gpu_gib(device: str, gpus: Sequence[int]) -> float | None:
    """The memory of the smallest of ``gpus``, in GiB (``torch.cuda.get_device_properties``: the plan reads the GPUs'
    SM counts in this process, which has CUDA initialised by then; the fork server is a separate interpreter).

    Args:
        device (str): ``cuda`` or ``cpu``.
        gpus (Sequence[int]): this process's GPU indices.

    Returns:
        float | None: GiB, or None on CPU or without GPUs.
    """
    if device != "cuda" or not gpus:
        return None
    import torch

    return min(torch.cuda.get_device_properties(g).total_memory for g in gpus) / 2**30
