"""``--out``: which directories an ablation may write into, and what ``--overwrite`` removes."""

from __future__ import annotations

import os

from ..errors import InvalidKnobValue
from . import store
from .files import OUTPUT_FILES


def check_out(out: str | None, overwrite: bool, resume: bool = False) -> None:
    """Raise InvalidKnobValue unless ``--out`` is new, empty, or holds earlier results and ``--overwrite``
    or ``--resume`` is given: a second run into the same directory would mix its files with the first's
    (an old results.png next to new results.json).

    Args:
        out (str | None): ``--out``, or None.
        overwrite (bool): ``--overwrite``: earlier results are removed (after validation, :func:`clear_out`).
        resume (bool): ``--resume``: ``out`` must hold an earlier ablation's runs (:mod:`.store`), which are kept.

    Raises:
        InvalidKnobValue: as above, or ``--resume`` with ``--overwrite`` or without ``--out``.
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
            f"replace the results written there ({', '.join(OUTPUT_FILES)}, {store.RUNS_DIR}/; other files are "
            f"kept){hint}"
        )


def clear_out(out: str | None, overwrite: bool) -> None:
    """With ``--overwrite``, remove what an earlier run wrote into ``--out`` (the result files and the
    kept runs); only after validation.

    Args:
        out (str | None): ``--out``, or None.
        overwrite (bool): ``--overwrite``.
    """
    if out is None or not overwrite:
        return
    for name in OUTPUT_FILES:
        path = os.path.join(out, name)
        if os.path.isfile(path):
            os.remove(path)
    store.clear(out)
