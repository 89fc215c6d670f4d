"""Where a run's numbers come from: every record's ``run_id`` and ``fingerprint``.

Every record gets a ``run_id`` (a uuid4, :func:`new_run_id`) from the job function that every executor
calls (:func:`.job.call_job`), and the Slurm executor gives one to a job that died without a record.  A
rerun (``--resume``) is a new run with a new id.

The ``fingerprint`` is computed by the worker (:func:`collect`), where the facts are, right after it
imports torch and before it applies the arm's knobs:

- ``inductor_knobs``, ``torch``, ``triton`` (None: not installed) and ``cuda`` (``torch.version.cuda``;
  None: a CPU build): the versions;
- ``cuda_driver`` (the CUDA version the driver supports, e.g. ``"12.8"``), ``gpu`` (the run's GPU's
  name), ``gpu_capability`` (its full compute capability, major and minor: ``"sm_121"``) and ``gpu_sms``
  (its real SM count, never an emulated one): None on CPU runs;
- ``torch_env``: the ``TORCHINDUCTOR_*``, ``TORCH_*`` and ``TRITON_*`` variables of the worker's
  environment before the arm's knobs apply (:func:`torch_environment`), which torch and Triton read
  (``TORCHINDUCTOR_MAX_AUTOTUNE=1`` autotunes every arm), less :data:`TORCH_ENV_EXCLUDED`;
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
(:mod:`.merge`), field by field with :func:`compare`.
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

#: The prefixes of the environment variables torch, Inductor and Triton read (:func:`torch_environment`).
TORCH_ENV_PREFIXES = ("TORCHINDUCTOR_", "TORCH_", "TRITON_")

#: Variables of :data:`TORCH_ENV_PREFIXES` left out of ``torch_env`` (a name, or a prefix ending in ``_``):
#: they differ from one process or machine to the next by nature and do not change the code torch compiles.
TORCH_ENV_EXCLUDED = (
    # Each run's own empty Inductor cache, and its own Triton cache or the ablation's shared kernel directory
    # (workers.base_env): paths, which change where code is kept, not the code.
    "TORCHINDUCTOR_CACHE_DIR",
    "TRITON_CACHE_DIR",
    # How many processes compile at once: the ablation sets it from --parallel and the CPUs (workers.base_env);
    # torch/_inductor/config.py:1354 (2.13) decide_compile_threads() reads it to size the compile pool, not the code.
    "TORCHINDUCTOR_COMPILE_THREADS",
    # Where torch.hub keeps downloads (torch/hub.py:184, 2.13); the ablation's models have random weights.
    "TORCH_HOME",
    # torchrun's per-process restart count, run id, ... (torch/distributed/elastic/agent/server/local_elastic_agent.py:426).
    "TORCHELASTIC_",
)

#: The fingerprint fields that describe what an arm ran (compared across the runs of one arm).
RUN_FIELDS = ("workload", "workload_hash", "settings")

#: The job keys that belong to the workload spec (see the module docstring).
WORKLOAD_KEYS = ("workload", "device", "quick", "seed", "iters", "warmup", "profile_iters")


def torch_environment(environ: Mapping[str, str]) -> dict[str, str]:
    """The variables of ``environ`` that torch, Inductor and Triton read: every ``TORCHINDUCTOR_*``,
    ``TORCH_*`` and ``TRITON_*`` one (:data:`TORCH_ENV_PREFIXES`) less :data:`TORCH_ENV_EXCLUDED`.

    Torch reads them at import and at compile time (e.g. torch/_inductor/config.py: ``max_autotune =
    os.environ.get("TORCHINDUCTOR_MAX_AUTOTUNE") == "1"``, line 514 on 2.13), so two processes whose values
    differ may compile different code under the same knobs.  ``PYTORCH_*`` variables are not included.

    Args:
        environ (Mapping[str, str]): an environment (a worker's ``os.environ``).

    Returns:
        dict[str, str]: name -> value (as strings), sorted by name.
    """
    names = sorted(k for k in environ if k.startswith(TORCH_ENV_PREFIXES))
    excluded = [e for e in TORCH_ENV_EXCLUDED if not e.endswith("_")]
    prefixes = tuple(e for e in TORCH_ENV_EXCLUDED if e.endswith("_"))
    return {k: str(environ[k]) for k in names if k not in excluded and not (prefixes and k.startswith(prefixes))}


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
    """``cuda_driver``, ``gpu``, ``gpu_capability`` and ``gpu_sms`` of the worker's GPU (its device 0), None off CUDA."""
    facts: dict[str, Any] = {"cuda_driver": None, "gpu": None, "gpu_capability": None, "gpu_sms": None}
    if not device.startswith("cuda"):
        return facts
    import torch

    props = torch.cuda.get_device_properties(0)  # before the arm's knobs: never an emulated SM count
    facts.update(
        gpu=str(props.name),
        gpu_capability=f"sm_{props.major}{props.minor}",
        gpu_sms=int(props.multi_processor_count),
        cuda_driver=driver_version(),
    )
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
        "torch_env": torch_environment(environ),
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
    found = differences(first[field], other[field], field)
    if field == "workload" and not found and first.get("workload_hash") != other.get("workload_hash"):
        found = [("workload_hash", first.get("workload_hash"), other.get("workload_hash"))]
    return found


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
