"""``--out``: which directories an ablation may write into, and how ``--overwrite`` replaces earlier results.

Every file in ``--out`` is written whole or not at all (:func:`~inductor_knobs.ext.atomic_write`).

**``--overwrite`` replaces the earlier results only after the new run succeeded.**  While it runs, the
new run writes its run store and its results files into a staging directory inside ``--out``
(:data:`STAGING`, ``<out>/.ablate-next``: on the same file system, so that publishing is renames).
When the command finished with exit status 0, :meth:`Target.publish` moves the new results files over
the old ones (each an atomic :func:`os.replace`), removes the earlier results files this run did not
write (an old results.png without ``--plot``), replaces ``<out>/runs`` with the new one and removes
the staging directory.  An interrupted run (SIGINT, SIGTERM), one that failed (an error, ``sbatch``
refusing the jobs) or one that exits non-zero (every run failed, or ``--strict``) publishes nothing:
the earlier results and ``<out>/runs`` are as they were, and the new run's files stay in the staging
directory, whose path the command prints.  Other files in ``--out`` are never touched; ``<out>/slurm``
is shared (Slurm job ids do not repeat, so new jobs' files never replace old ones).

**With ``--resume``**: ``--resume`` continues the staged run if there is one (an ``--overwrite`` run
that was interrupted or failed), and publishes it when it succeeds; otherwise it continues the run in
``<out>/runs`` in place.  A new ``--overwrite`` removes a staged run left behind and starts again.
"""

from __future__ import annotations

import os
import shutil
from dataclasses import dataclass

from ..errors import InvalidKnobValue
from . import store
from .files import OUTPUT_FILES

#: The staging directory of an ``--overwrite`` run, under ``--out``.
STAGING = ".ablate-next"


def check_out(out: str | None, overwrite: bool, resume: bool = False) -> None:
    """Raise unless ``--out`` is new, empty, or holds earlier results and ``--overwrite`` or ``--resume``
    is given: a second run into the same directory would mix its files with the first's (an old
    results.png next to new results.json).

    Args:
        out (str | None): ``--out``, or None.
        overwrite (bool): ``--overwrite``: the earlier results are replaced once the new run succeeded.
        resume (bool): ``--resume``: ``out`` must hold an earlier ablation's runs (:mod:`.store`), in
            ``<out>/runs`` or staged by an unfinished ``--overwrite``.

    Raises:
        InvalidKnobValue: as above, or ``--resume`` with ``--overwrite`` or without ``--out``.
    """
    if resume and overwrite:
        raise InvalidKnobValue("--resume keeps the runs in --out and --overwrite replaces them: give one of the two")
    if resume and out is None:
        raise InvalidKnobValue("--resume needs --out: the directory of the ablation to continue")
    if out is None:
        return
    if os.path.exists(out) and not os.path.isdir(out):
        raise InvalidKnobValue(f"--out {out!r} is not a directory: allowed a new or empty directory")
    resumable = store.has_runs(out) or store.has_runs(os.path.join(out, STAGING))
    if resume:
        if not resumable:
            raise InvalidKnobValue(
                f"--resume: --out {out!r} holds no earlier ablation ({store.RUNS_DIR}/{store.PLAN_FILE} is missing); "
                "leave out --resume to start one"
            )
        return
    names = sorted(os.listdir(out)) if os.path.isdir(out) else []
    if names and not overwrite:
        shown = ", ".join(names[:4]) + (", ..." if len(names) > 4 else "")
        hint = "; or --resume to run only its missing and failed runs" if resumable else ""
        raise InvalidKnobValue(
            f"--out {out!r} is not empty ({shown}): allowed a new or empty directory; add --overwrite to "
            f"replace the results written there ({', '.join(OUTPUT_FILES)}, {store.RUNS_DIR}/; other files are "
            f"kept) once the new run has succeeded{hint}"
        )


@dataclass(frozen=True)
class Target:
    """Where one command writes.

    Attributes:
        out: ``--out``.
        root: where the run store and the results files go while the command runs: ``out``, or its
            staging directory (:data:`STAGING`).
        staged: ``root`` is the staging directory: the results reach ``out`` only through :meth:`publish`.
    """

    out: str
    root: str
    staged: bool

    def prepare(self) -> None:
        """Make ``root``; a staging directory left by an earlier ``--overwrite`` is removed first."""
        if self.staged:
            shutil.rmtree(self.root, ignore_errors=True)
        os.makedirs(self.root, exist_ok=True)

    def publish(self, written: list[str]) -> list[str]:
        """Replace the earlier results in ``out`` with the staged ones (see the module docstring).

        Args:
            written (list[str]): the results files written into ``root``.

        Returns:
            list[str]: their paths in ``out``.
        """
        if not self.staged:
            return written
        final = []
        for path in written:  # each one replaces its old version atomically
            final.append(os.path.join(self.out, os.path.basename(path)))
            os.replace(path, final[-1])
        for name in OUTPUT_FILES:  # an earlier result this run did not write (results.png without --plot)
            path = os.path.join(self.out, name)
            if path not in final and os.path.isfile(path):
                os.remove(path)
        runs, staged_runs = os.path.join(self.out, store.RUNS_DIR), os.path.join(self.root, store.RUNS_DIR)
        if os.path.isdir(runs):  # out of the way first: a directory cannot replace a non-empty one
            os.replace(runs, os.path.join(self.root, store.RUNS_DIR + ".old"))
        if os.path.isdir(staged_runs):
            os.replace(staged_runs, runs)
        shutil.rmtree(self.root, ignore_errors=True)
        return final


def target(out: str | None, overwrite: bool, resume: bool) -> Target | None:
    """Where this command writes (call it after :func:`check_out`).

    Args:
        out (str | None): ``--out``, or None.
        overwrite (bool): ``--overwrite``.
        resume (bool): ``--resume``.

    Returns:
        Target | None: None without ``--out``; the staging directory with ``--overwrite`` on a
        non-empty ``out`` and with ``--resume`` of a staged run; ``out`` itself otherwise.
    """
    if out is None:
        return None
    staging = os.path.join(out, STAGING)
    if resume:
        staged = store.has_runs(staging)
    else:
        staged = overwrite and os.path.isdir(out) and bool(os.listdir(out))
    return Target(out, staging if staged else out, staged)
