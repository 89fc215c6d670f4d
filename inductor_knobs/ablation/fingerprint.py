"""Where a run's numbers come from: every record's ``run_id`` and ``fingerprint``.

Every record gets a ``run_id`` (a uuid4, :func:`new_run_id`) from the job function that every executor
calls (:func:`.job.call_job`), and the Slurm executor gives one to a job that died without a record.  A
rerun (``--resume``) is a new run with a new id.

The ``fingerprint`` is computed by the worker (:func:`collect`), where the facts are, right after it
imports torch and before it applies the arm's knobs:

- ``inductor_knobs``, ``torch``, ``triton`` (None: not installed) and ``cuda`` (``torch.version.cuda``;
  None: a CPU build): the versions;
- ``cuda_driver`` (the CUDA version the driver supports, e.g. ``"12.8"``), ``gpu`` (the run's GPU's
  name) and ``gpu_sms`` (its real SM count, never an emulated one): None on CPU runs;
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
fields are then absent, meaning unknown.  ``ablate --merge`` compares fingerprints (:mod:`.merge`).
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

from ..core.knobs import EMULATE_SMS_VAR, Knobs

#: The fingerprint fields that describe the machine and its software (compared across every run of a merge).
ENVIRONMENT_FIELDS = ("inductor_knobs", "torch", "triton", "cuda", "cuda_driver", "gpu", "gpu_sms")

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


def _cuda_facts(device: str) -> dict[str, Any]:
    """``cuda_driver``, ``gpu`` and ``gpu_sms`` of the worker's GPU (its device 0), None off CUDA."""
    facts: dict[str, Any] = {"cuda_driver": None, "gpu": None, "gpu_sms": None}
    if not device.startswith("cuda"):
        return facts
    import torch

    props = torch.cuda.get_device_properties(0)  # before the arm's knobs: never an emulated SM count
    facts.update(gpu=str(props.name), gpu_sms=int(props.multi_processor_count), cuda_driver=driver_version())
    return facts


def driver_version() -> str | None:
    """The CUDA version the installed driver supports, from the driver itself (``cuDriverGetVersion``).

    Returns:
        str | None: e.g. ``"13.0"``; None where no CUDA driver library loads or it does not answer.
    """
    import ctypes

    for name in ("libcuda.so.1", "libcuda.so", "nvcuda.dll"):
        try:
            library = ctypes.CDLL(name)
        except OSError:
            continue
        version = ctypes.c_int()
        try:
            if library.cuDriverGetVersion(ctypes.byref(version)) == 0:  # CUDA_SUCCESS
                return f"{version.value // 1000}.{version.value % 1000 // 10}"
        except (AttributeError, OSError):
            pass
    return None


def collect(job: Mapping[str, Any], environ: Mapping[str, str]) -> dict[str, Any]:
    """The worker's fingerprint (see the module docstring); call it before the arm's knobs are applied.

    Args:
        job (Mapping[str, Any]): the job the worker runs.
        environ (Mapping[str, str]): the worker's environment (``os.environ``).

    Returns:
        dict[str, Any]: every field of :data:`ENVIRONMENT_FIELDS` and :data:`RUN_FIELDS`.
    """
    import torch

    from .. import __version__

    return {
        "inductor_knobs": __version__,
        "torch": str(torch.__version__),
        "triton": _version("triton") or _version("pytorch-triton") or _version("pytorch-triton-rocm"),
        "cuda": torch.version.cuda,
        **_cuda_facts(str(job.get("device", "cpu"))),
        **partial(job, environ),
    }


def differences(first: Any, other: Any, path: str = "") -> list[tuple[str, Any, Any]]:
    """The leaves where two fingerprints (or parts of them) differ.

    Args:
        first (Any): one value (a dict is compared key by key).
        other (Any): the other.
        path (str): the dotted name of these values (``"settings.knobs"``).

    Returns:
        list[tuple[str, Any, Any]]: ``(dotted name, first's value, other's value)`` per differing leaf;
        a key missing on one side has the value :data:`ABSENT` there.
    """
    if isinstance(first, Mapping) and isinstance(other, Mapping):
        out = []
        for key in sorted(set(first) | set(other), key=str):
            name = f"{path}.{key}" if path else str(key)
            out += differences(first.get(key, ABSENT), other.get(key, ABSENT), name)
        return out
    return [] if first == other else [(path, first, other)]


class _Absent:
    """A key one side lacks (printed as ``absent``)."""

    def __repr__(self) -> str:
        return "absent"


#: What :func:`differences` gives for a missing key.
ABSENT: Any = _Absent()
