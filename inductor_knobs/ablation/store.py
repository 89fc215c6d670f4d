"""Finished runs on disk, so that an ablation can be resumed: ``<out>/runs/``.

Whatever runs the jobs (the local threads or Slurm, see :mod:`.runner` and :mod:`.slurm`), every
record is written here the moment it comes back, one file per run (``run-<index>.json``, the job's
index in the plan), atomically (:func:`~inductor_knobs.ext.write_json`: a temporary file in
the same directory, then :func:`os.replace`), so a reader (or a rerun after a crash) sees a whole
record or none.  ``plan.json`` holds the plan's jobs.  Under ``--overwrite`` the store is the staging
directory's (``<out>/.ablate-next/runs``) until the new run has succeeded (see :mod:`.outdir`).

**The resume rule** (``ablate --resume``): the same command on the same ``--out`` runs only the jobs
that have no record there or whose record failed (``"ok": false``); the others are kept as they are.
The plan must match: the jobs of the new command (workload, arms, repeats, device, quick, iters,
warmup, emulation, shard) must be those of ``plan.json``, or nothing runs.  The timeout and the
executor may differ (a run started on Slurm can be finished locally, and the other way round).  The kept
runs' fingerprints are compared with this run's as ``--merge`` compares shards
(:func:`.merge.check_resume`): before anything runs, with what the parent knows of each new run (the
workload and the arm's settings: a changed workload file is refused at once), and again with the
workers' records (versions, GPU, the torch variables); a difference is refused unless ``--allow-mixed``.
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping, Sequence
from typing import Any

from ..errors import InvalidKnobValue
from ..ext import write_json

#: The directory under ``--out`` that holds the records and the plan.
RUNS_DIR = "runs"

#: The plan's file in :data:`RUNS_DIR`.
PLAN_FILE = "plan.json"


def has_runs(out: str) -> bool:
    """Whether ``out`` holds an ablation's ``runs/plan.json`` (something to resume).

    Args:
        out (str): an ``--out`` directory (or its staging directory, see :mod:`.outdir`).

    Returns:
        bool: the plan file exists.
    """
    return os.path.isfile(os.path.join(out, RUNS_DIR, PLAN_FILE))


def _difference(old: Sequence[Mapping[str, Any]], new: Sequence[Mapping[str, Any]]) -> str:
    """One phrase naming the first way two job lists differ."""
    if len(old) != len(new):
        return f"{len(old)} jobs there, {len(new)} now"
    for was, now in zip(old, new):
        for key in sorted(set(was) | set(now)):
            if was.get(key) != now.get(key):
                return f"job {now.get('index', '?')}'s {key} was {was.get(key)!r}, now {now.get(key)!r}"
    return "the jobs differ"  # pragma: no cover - equal lists are not compared


class RunStore:
    """The records of one ablation under ``<out>/runs``.

    Args:
        out (str): the directory that holds ``runs/``: ``--out``, or its staging directory (made if missing).
    """

    def __init__(self, out: str) -> None:
        self.out = out
        self.path = os.path.join(out, RUNS_DIR)

    def record_path(self, index: int) -> str:
        """The file of the run with job index ``index``.

        Args:
            index (int): the job's index in the plan.

        Returns:
            str: ``<out>/runs/run-<index>.json``.
        """
        return os.path.join(self.path, f"run-{int(index)}.json")

    def begin(self, jobs: list[dict[str, Any]], resume: bool) -> dict[int, dict[str, Any]]:
        """Start (or, with ``resume``, continue) the ablation whose jobs are ``jobs``.

        Args:
            jobs (list[dict[str, Any]]): the plan's jobs (:meth:`.plan.Plan.jobs`), written to ``plan.json``.
            resume (bool): keep the successful records of an earlier run of the same plan.

        Returns:
            dict[int, dict[str, Any]]: job index -> the kept record, for every job of ``jobs`` whose earlier run succeeded
            (empty without ``resume``).

        Raises:
            InvalidKnobValue: ``resume`` and there is no earlier run in ``out``, or its plan differs
                (the message names the first difference).
        """
        plan_path = os.path.join(self.path, PLAN_FILE)
        jobs = json.loads(json.dumps(list(jobs)))  # as the file will hold them (tuples become lists)
        if not resume:
            os.makedirs(self.path, exist_ok=True)
            write_json(plan_path, {"jobs": jobs}, indent=1)
            return {}
        try:
            with open(plan_path, encoding="utf-8") as src:
                before = json.load(src)["jobs"]
        except FileNotFoundError:
            raise InvalidKnobValue(
                f"--resume: --out {self.out!r} holds no earlier ablation ({RUNS_DIR}/{PLAN_FILE} is missing); "
                "leave out --resume to start one"
            ) from None
        except (OSError, ValueError, KeyError, TypeError) as err:
            raise InvalidKnobValue(f"--resume: {plan_path!r} cannot be read ({err}); use --overwrite to start again") from err
        if before != jobs:
            raise InvalidKnobValue(
                f"--resume: this command's plan is not the one in --out {self.out!r} ({_difference(before, jobs)}); "
                "give the same workload, arms, repeats and options, or --overwrite to start again"
            )
        kept = {}
        for job in jobs:
            record = self.load(int(job["index"]))
            if record is not None and record.get("ok"):
                kept[int(job["index"])] = record
        return kept

    def load(self, index: int) -> dict[str, Any] | None:
        """The record of job ``index``.

        Args:
            index (int): the job's index in the plan.

        Returns:
            dict[str, Any] | None: the record, or None (none written, or unreadable: it runs again).
        """
        try:
            with open(self.record_path(index), encoding="utf-8") as src:
                record = json.load(src)
        except (OSError, ValueError):
            return None
        return record if isinstance(record, dict) else None

    def save(self, record: Mapping[str, Any]) -> None:
        """Write one finished run's record (atomically; a later record of the same job replaces it).

        Args:
            record (Mapping[str, Any]): the record (its ``index`` names the file).

        Raises:
            OSError: it could not be written (the file is as it was).
        """
        write_json(self.record_path(int(record["index"])), dict(record), indent=1)
