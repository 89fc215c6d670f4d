"""Where a run's numbers come from: every record's ``run_id`` and ``fingerprint``.

Every record gets a ``run_id`` (a uuid4, :func:`new_run_id`) from the job function that every executor
calls (:func:`.job.call_job`), and the Slurm executor gives one to a job that died without a record.  A
rerun (``--resume``) is a new run with a new id.

The ``fingerprint`` is computed by the worker (:func:`collect`), where the facts are, right after it
imports torch and before it applies the arm's knobs, from the package's one setup snapshot
(:func:`inductor_knobs.core.setup.snapshot`), laid out flat:

- ``inductor_knobs``, ``torch``, ``triton`` (None: not installed) and ``cuda`` (``torch.version.cuda``;
  None: a CPU build): the versions;
- ``cuda_driver`` (the CUDA version the driver supports, e.g. ``"12.8"``), ``gpu`` (the run's GPU's
  name), ``gpu_capability`` (its full compute capability, major and minor: ``"sm_121"``) and ``gpu_sms``
  (its real SM count, never an emulated one): None on CPU runs;
- ``torch_env``: the ``TORCHINDUCTOR_*``, ``TORCH_*`` and ``TRITON_*`` variables of the worker's
  environment before the arm's knobs apply, which torch and Triton read (``TORCHINDUCTOR_MAX_AUTOTUNE=1``
  autotunes every arm), less those that only place files or logs
  (:func:`inductor_knobs.core.setup.torch_environment`);
- ``workload`` (what each process builds and how it measures it: the workload's name, device,
  ``quick``, seed, samples, warm-up and profiled iterations, and ``source``: the SHA-256 of a
  ``module:factory`` workload's module file, or the transformers / timm version of a real model) and
  ``workload_hash`` (16 hex digits of its SHA-256);
- ``settings``: the arm's effective settings, the same values the worker applies: ``knobs`` (the
  :class:`~inductor_knobs.core.knobs.Knobs` it activates from its ``INDUCTOR_KNOBS_*`` variables, as
  :meth:`~inductor_knobs.core.knobs.Knobs.to_dict`), ``knobs_digest``, ``compile_args`` (what it passes
  to ``torch.compile``), ``eager`` and ``emulate`` (``INDUCTOR_KNOBS_EMULATE_SMS``).

A run whose worker reported nothing (killed at its timeout, a Slurm job that died) gets the part its
parent knows (:func:`partial`: ``workload``, ``workload_hash``, ``settings``); the version and GPU
fields are then absent, meaning unknown.  ``ablate --merge`` and ``ablate --resume`` compare fingerprints
(:mod:`.merge`), field by field with :func:`compare` (:func:`inductor_knobs.core.setup.differences`).
"""

from __future__ import annotations

import hashlib
import importlib.util
import json
import sys
import uuid
from collections.abc import Mapping
from importlib import metadata
from typing import Any

from .. import Knobs
from ..ext import EMULATE_SMS_VAR, setup

#: The fingerprint fields that describe the machine and its software (compared across every run of a merge).
ENVIRONMENT_FIELDS = (
    "inductor_knobs",
    "torch",
    "triton",
    "cuda",
    "cuda_driver",
    "gpu",
    "gpu_capability",
    "gpu_sms",
    "torch_env",
)

#: The fingerprint fields that describe what an arm ran (compared across the runs of one arm).
RUN_FIELDS = ("workload", "workload_hash", "settings")

#: The job keys that belong to the workload spec (see the module docstring).
WORKLOAD_KEYS = ("workload", "device", "quick", "seed", "iters", "warmup", "profile_iters")


def new_run_id() -> str:
    """A new run id.

    Returns:
        str: a random uuid4, e.g. ``"0b7c6a3e-…"``.
    """
    return str(uuid.uuid4())


def _json(value: Any) -> Any:
    """``value`` as JSON would give it back (tuples become lists), so that a fingerprint compares equal
    to itself after a round trip through results.json."""
    return json.loads(json.dumps(value, sort_keys=True, default=repr))


def _version(distribution: str) -> str | None:
    try:
        return metadata.version(distribution)
    except metadata.PackageNotFoundError:
        return None


def _file_digest(module: str) -> str | None:
    """SHA-256 of the file that defines ``module`` (imported or importable), or None if there is none."""
    loaded = sys.modules.get(module)
    path = getattr(loaded, "__file__", None)
    if path is None:
        try:
            found = importlib.util.find_spec(module)
        except (ImportError, ValueError):
            found = None
        path = found.origin if found is not None and found.has_location else None
    if not path:
        return None
    try:
        with open(path, "rb") as src:
            return "sha256:" + hashlib.sha256(src.read()).hexdigest()
    except OSError:
        return None


def workload_source(name: str) -> str | None:
    """What, besides its name and this package, decides what a workload builds.

    Args:
        name (str): ``--workload`` (a built-in, ``hf:…``, ``timm:…`` or ``module:factory``).

    Returns:
        str | None: ``"transformers 4.56.1"`` / ``"timm 1.0.19"`` for a real model, the SHA-256 of a
        ``module:factory`` workload's module file, or None for a built-in (this package's version
        covers it) and a module whose file cannot be read.
    """
    from . import models, workloads

    if name in workloads.BUILTIN:
        return None
    if models.is_model(name):
        extra = "transformers" if name.startswith("hf:") else "timm"
        return f"{extra} {_version(extra)}"
    return _file_digest(name.partition(":")[0])


def workload_spec(job: Mapping[str, Any]) -> dict[str, Any]:
    """What one process of ``job`` builds and how it measures it (see the module docstring).

    Args:
        job (Mapping[str, Any]): a job of :meth:`.plan.Plan.jobs`.

    Returns:
        dict[str, Any]: the :data:`WORKLOAD_KEYS` of the job and ``source`` (:func:`workload_source`).
    """
    spec = {key: job.get(key) for key in WORKLOAD_KEYS}
    spec["source"] = workload_source(str(job.get("workload")))
    return _json(spec)


def digest(value: Any) -> str:
    """16 hex digits of the SHA-256 of ``value``'s canonical JSON.

    Args:
        value (Any): JSON-ready data.

    Returns:
        str: the digest.
    """
    return hashlib.sha256(json.dumps(value, sort_keys=True, default=repr).encode()).hexdigest()[:16]


def settings(arm: Mapping[str, Any], environ: Mapping[str, str]) -> dict[str, Any]:
    """The arm's effective settings, as the worker applies them.

    Args:
        arm (Mapping[str, Any]): the job's arm (:meth:`.spec.Arm.to_dict`): its ``compile_args`` and ``eager``.
        environ (Mapping[str, str]): the worker's environment (its ``INDUCTOR_KNOBS_*`` variables, which
            env activation applies; :func:`.workers.knob_env` builds them).

    Returns:
        dict[str, Any]: ``knobs``, ``knobs_digest``, ``compile_args``, ``eager``, ``emulate``.

    Raises:
        UnknownKnob, InvalidKnobValue: a variable that env activation would refuse too.
    """
    knobs = Knobs.from_env(environ)
    return {
        "knobs": _json(knobs.to_dict()),
        "knobs_digest": knobs.digest(),
        "compile_args": _json(dict(arm.get("compile_args") or {})),
        "eager": bool(arm.get("eager")),
        "emulate": environ.get(EMULATE_SMS_VAR) or None,
    }


def partial(job: Mapping[str, Any], environ: Mapping[str, str]) -> dict[str, Any]:
    """The fingerprint of a run whose worker reported none: what the parent knows (no versions, no GPU).

    Args:
        job (Mapping[str, Any]): the job.
        environ (Mapping[str, str]): its worker's ``INDUCTOR_KNOBS_*`` variables.

    Returns:
        dict[str, Any]: ``workload``, ``workload_hash`` and ``settings``.
    """
    spec = workload_spec(job)
    return {"workload": spec, "workload_hash": digest(spec), "settings": settings(job["arm"], environ)}


def collect(job: Mapping[str, Any], environ: Mapping[str, str] | None = None) -> dict[str, Any]:
    """The worker's fingerprint (see the module docstring); call it before the arm's knobs are applied.

    Args:
        job (Mapping[str, Any]): the job the worker runs.
        environ (Mapping[str, str] | None): the worker's environment; None: ``os.environ`` as it was before the
            knobs set their variables (``TORCH_CUDNN_SDPA_AVOID_RECOMPILE``, set by the startup hook for an arm's
            knob, is in ``settings``, not ``torch_env``: :func:`inductor_knobs.core.setup.snapshot`).

    Returns:
        dict[str, Any]: every field of :data:`ENVIRONMENT_FIELDS` and :data:`RUN_FIELDS`.
    """
    from .. import __version__
    from ..ext import environ_before_knobs

    environ = environ_before_knobs() if environ is None else environ

    device = str(job.get("device", "cpu"))
    # before the arm's knobs apply: the GPU's real SM count, never an emulated one
    found = setup.snapshot(environ=environ, device="cuda:0" if device.startswith("cuda") else "cpu")
    return {
        "inductor_knobs": __version__,
        "torch": found.torch,
        "triton": found.triton,
        "cuda": found.cuda,
        "cuda_driver": found.driver,
        "gpu": found.gpu,
        "gpu_capability": found.capability,
        "gpu_sms": found.sms,
        "torch_env": dict(found.environment),
        **partial(job, environ),
    }


def compare(field: str, first: Mapping[str, Any], other: Mapping[str, Any]) -> list[tuple[str, Any, Any]]:
    """Where two runs' fingerprints differ in one top-level ``field``: the one comparison of ``--merge`` and
    ``--resume`` (:mod:`.merge`).

    Args:
        field (str): a field of :data:`ENVIRONMENT_FIELDS` or :data:`RUN_FIELDS` (``workload`` covers
            ``workload_hash`` too; ``settings`` is meaningful between runs of one arm).
        first (Mapping[str, Any]): one fingerprint.
        other (Mapping[str, Any]): the other.

    Returns:
        list[tuple[str, Any, Any]]: ``(dotted name, first's value, other's value)`` per differing leaf (a
        variable of ``torch_env`` by its name: ``torch_env.TORCHINDUCTOR_MAX_AUTOTUNE``; a side's missing
        key is :data:`ABSENT`); empty where either fingerprint lacks ``field`` (unknown is not compared).
    """
    if field not in first or field not in other:
        return []
    found = setup.differences(first[field], other[field], field)
    if field == "workload" and not found and first.get("workload_hash") != other.get("workload_hash"):
        found = [("workload_hash", first.get("workload_hash"), other.get("workload_hash"))]
    return found


#: What :func:`compare` gives for a key one side lacks.
ABSENT = setup.ABSENT
