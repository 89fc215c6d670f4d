"""The errors of ``inductor-knobs ablate``, in the package's one hierarchy (:class:`~inductor_knobs.errors.KnobsError`),
and the check that its extra is installed (:func:`require_extra`).

Bad options, arms and values are :class:`~inductor_knobs.errors.InvalidKnobValue` and
:class:`~inductor_knobs.errors.UnknownKnob`, as everywhere in the package; these are the ablation's own.
"""

from __future__ import annotations

import importlib.util

from ..errors import KnobsError

#: What installs the ablation's dependencies (the ``[ablate]`` extra of ``pyproject.toml``).
INSTALL_HINT = "pip install 'inductor-knobs[ablate]'"

#: The modules of the extra that every ``ablate`` imports: scipy (the bootstrap intervals, :mod:`.stats`) and
#: tqdm (the progress bar).  matplotlib (``--plot``) and submitit (``--executor slurm``) are checked where asked for.
REQUIRED = ("scipy", "tqdm")


class ExtraMissing(KnobsError, ImportError):
    """``inductor-knobs ablate`` needs a module of the ``[ablate]`` extra that is not installed; nothing ran.
    The message names the module and :data:`INSTALL_HINT`."""


class SlurmSubmitFailed(KnobsError, RuntimeError):
    """``ablate --executor slurm``: ``sbatch`` refused the ablation's jobs (no partition, no account, a bad
    option, slurmctld unreachable); nothing was submitted."""


class MergeRefused(KnobsError, ValueError):
    """``ablate --merge`` refused its files: the same run twice, files of different ablations, or (unless
    ``--allow-mixed``) runs whose fingerprints differ or files without fingerprints; or ``ablate --resume``
    refused to pool the kept runs with new ones whose fingerprints differ (unless ``--allow-mixed``).  The
    message names the files, the run or arm, and each differing field with both values."""


def require_extra(modules: tuple[str, ...], needed_by: str, otherwise: str = "") -> None:
    """Raise :class:`ExtraMissing` unless every module of ``modules`` can be imported (checked with
    :func:`importlib.util.find_spec`, which imports nothing but a dotted name's parents; a ``None`` in
    ``sys.modules`` counts as missing, as ``import`` treats it).

    Args:
        modules (tuple[str, ...]): top-level module names, e.g. :data:`REQUIRED` or ``("matplotlib",)``.
        needed_by (str): what needs them, for the message (``"ablate"``, ``"--plot"``).
        otherwise (str): the way around it, appended to the message (``"or leave out --plot"``).

    Raises:
        ExtraMissing: the first missing module; the one-line message names it, ``needed_by`` and :data:`INSTALL_HINT`.
    """
    for module in modules:
        try:
            missing = importlib.util.find_spec(module) is None
        except ValueError:  # in sys.modules without a __spec__ (a stand-in): importable
            missing = False
        if missing:
            rest = f"; {otherwise}" if otherwise else ""
            raise ExtraMissing(f"{needed_by} needs {module}, which is not installed: {INSTALL_HINT}{rest}")
