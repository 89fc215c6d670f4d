"""The setup snapshot: what a compile, a measurement or a bundle ran under, computed in one place.

"Was this compiled, measured or bundled under the same setup?" has one answer, :func:`differences` of two
:class:`Setup` values: a serving bundle's identity at save and load, and the ablation fingerprint that
``--merge`` and ``--resume`` compare.  Torch facts: the variables torch's compile sets by itself
(``_set_triton_ptxas_path`` and the libdevice lookup, ``torch/_inductor/runtime/compile_tasks.py``, 2.10-2.15);
the driver's CUDA version from libcuda's ``cuDriverGetVersion``.
"""

from __future__ import annotations

import ctypes
import hashlib
import json
import os
import sys
from collections.abc import Mapping
from dataclasses import asdict, dataclass, field
from importlib import metadata
from typing import Any

from .knobs import Knobs

#: Prefixes of the variables torch, Dynamo, Inductor and Triton read.
TORCH_PREFIXES = ("TORCHINDUCTOR_", "TORCH_", "TRITON_", "TORCHDYNAMO_", "PYTORCH_")
#: Variables under :data:`TORCH_PREFIXES` that change neither what is compiled nor how it runs (files, logs, workers).
NOT_SETUP = frozenset(
    {
        "TORCHINDUCTOR_CACHE_DIR",
        "TRITON_CACHE_DIR",
        "TRITON_HOME",
        "TRITON_DUMP_DIR",
        "TRITON_OVERRIDE_DIR",
        "TORCH_HOME",
        "TORCH_EXTENSIONS_DIR",
        "TORCH_LOGS",
        "TORCH_LOGS_OUT",
        "TORCH_LOGS_FORMAT",
        "TORCH_TRACE",
        "TORCH_COMPILE_DEBUG",
        "TORCH_COMPILE_DEBUG_DIR",
        "TORCH_SHOW_CPP_STACKTRACES",
        "TORCH_CPP_LOG_LEVEL",
        "TORCHINDUCTOR_COMPILE_THREADS",
        "TORCHINDUCTOR_WORKER_START",
        "TORCHINDUCTOR_FX_GRAPH_CACHE",
        "TORCHINDUCTOR_AUTOGRAD_CACHE",
        "TORCHINDUCTOR_AUTOTUNE_LOCAL_CACHE",
        "TORCHINDUCTOR_FORCE_DISABLE_CACHES",
        "TORCHDYNAMO_VERBOSE",
        "PYTORCH_CUDA_ALLOC_CONF",
        "PYTORCH_NVML_BASED_CUDA_CHECK",
        "PYTORCH_KERNEL_CACHE_PATH",
        # how Inductor starts its compile workers; torch sets it itself (_inductor/async_compile.py, 2.10-2.15)
        "TORCH_WARM_POOL",
    }
)
#: Variables torch's compile sets to its own default when unset (see the module docstring): that value is left
#: out, so a process that compiled and one that did not (an AOT load) have the same setup.
TORCH_SETS = {
    "TRITON_PTXAS_PATH": os.path.join("bin", "ptxas"),  # under torch's package directory
    "TRITON_LIBDEVICE_PATH": os.path.join("nvvm", "libdevice", "libdevice.10.bc"),  # under CUDA_HOME
}
#: Prefixes of process-placement variables (launchers, distributed rendezvous), not part of a setup either.
NOT_SETUP_PREFIXES = ("TORCHELASTIC_", "TORCH_NCCL_", "TORCH_DISTRIBUTED_", "TORCH_CUDA_SANITIZER")


def torch_environment(environ: Mapping[str, str] | None = None) -> dict[str, str]:
    """The variables of ``environ`` (None: ``os.environ``) that change what torch, Inductor and Triton compile or run.

    Returns:
        dict[str, str]: every :data:`TORCH_PREFIXES` variable, sorted, except :data:`NOT_SETUP`,
        :data:`NOT_SETUP_PREFIXES` and a :data:`TORCH_SETS` variable at torch's own default; empty counts as set.
    """
    env = os.environ if environ is None else environ
    return {
        name: str(value)
        for name, value in sorted(env.items())
        if name.startswith(TORCH_PREFIXES)
        and name not in NOT_SETUP
        and not name.startswith(NOT_SETUP_PREFIXES)
        and not _torch_default(name, str(value))
    }


def _torch_default(name: str, value: str) -> bool:
    """Whether ``value`` is what torch's compile sets ``name`` to by itself (:data:`TORCH_SETS`)."""
    tail = TORCH_SETS.get(name)
    if tail is None:
        return False
    if name == "TRITON_PTXAS_PATH":
        torch = sys.modules.get("torch")
        where = os.path.dirname(getattr(torch, "__file__", "") or "")
        return bool(where) and os.path.normpath(value) == os.path.join(where, tail)
    return value.endswith(os.sep + tail)


def driver_version() -> str | None:
    """The CUDA version the installed driver supports (``cuDriverGetVersion``), e.g. ``"13.0"``; None without one."""
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


def _version(distribution: str) -> str | None:
    try:
        return metadata.version(distribution)
    except metadata.PackageNotFoundError:
        return None


@dataclass(frozen=True)
class Setup:
    """What one compile, measurement or bundle ran under; made by :func:`snapshot`, compared by :func:`differences`.

    Attributes:
        knobs, sources: the knobs in force (the environment's under the given ones, ``Knobs.to_dict``) and where
            each came from (``env`` or the caller's label).
        environment: the variables that change what is compiled or run (:func:`torch_environment`).
        torch, triton, cuda, driver: versions (``torch.version.cuda``; the CUDA version the driver supports).
        gpu, capability, sms: the GPU's name, full compute capability (``sm_121``) and real SM count; None off CUDA.
        cpu: ATen's CPU capability (``AVX512``) for a CPU setup.
    """

    knobs: Mapping[str, Any] = field(default_factory=dict)
    sources: Mapping[str, str] = field(default_factory=dict)
    environment: Mapping[str, str] = field(default_factory=dict)
    torch: str | None = None
    triton: str | None = None
    cuda: str | None = None
    driver: str | None = None
    gpu: str | None = None
    capability: str | None = None
    sms: int | None = None
    cpu: str | None = None

    def to_dict(self) -> dict[str, Any]:
        """The setup as JSON data (tuples become lists), equal to itself after a round trip through a file."""
        return json.loads(json.dumps(asdict(self), sort_keys=True, default=repr))  # type: ignore[no-any-return]

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> Setup:
        """A setup written by :meth:`to_dict`; unknown fields are ignored, missing ones are None (unknown)."""
        names = set(cls.__dataclass_fields__)
        return cls(**{k: v for k, v in data.items() if k in names})

    def digest(self) -> str:
        """16 hex digits of the SHA-256 of :meth:`to_dict` (without ``sources``: who set a value is not what it is)."""
        data = self.to_dict()
        data.pop("sources", None)
        return hashlib.sha256(json.dumps(data, sort_keys=True).encode()).hexdigest()[:16]

    @property
    def device(self) -> str:
        """``"NVIDIA L4 sm_89 58 SMs"`` on CUDA, ``"cpu AVX512"`` off it: the device, in one line for messages."""
        if self.gpu is not None:
            return f"{self.gpu} {self.capability} {self.sms} SMs"
        return f"cpu {self.cpu}"


def snapshot(
    knobs: Knobs | None = None,
    *,
    source: str = "knobs",
    environ: Mapping[str, str] | None = None,
    device: str | None = None,
) -> Setup:
    """The setup this process runs under: ``knobs`` over the environment's ``INDUCTOR_KNOBS_*`` ones, the torch
    variables, the versions and the device (imports torch).

    Args:
        knobs (Knobs | None): the knobs the caller applies (a block's, a bundle's recipe).
        source (str): their label in ``sources``.
        environ (Mapping[str, str] | None): the environment; None: :func:`~.changes.environ_before_knobs`.
        device (str | None): ``"cuda"``, ``"cuda:1"`` or ``"cpu"``; None: CUDA device 0 if available, else the CPU.
            The SM count is ``torch.cuda.get_device_properties``', never an emulated one.

    Returns:
        Setup: the snapshot.

    Raises:
        UnknownKnob, InvalidKnobValue: an ``INDUCTOR_KNOBS_*`` variable that env activation refuses too.
    """
    import torch

    from .changes import environ_before_knobs

    env = environ_before_knobs() if environ is None else environ
    from_env = Knobs.from_env(env).to_dict()
    given = knobs.to_dict() if knobs is not None else {}
    sources = {**dict.fromkeys(from_env, "env"), **dict.fromkeys(given, source)}
    facts: dict[str, Any] = {}
    on_cuda = device.startswith("cuda") if device is not None else torch.cuda.is_available()
    if on_cuda:
        index = torch.device(device).index if device is not None else None
        props = torch.cuda.get_device_properties(0 if index is None else index)
        facts.update(gpu=str(props.name), capability=f"sm_{props.major}{props.minor}", sms=int(props.multi_processor_count))
    else:
        facts["cpu"] = str(torch.backends.cpu.get_cpu_capability())
    return Setup(
        knobs=json.loads(json.dumps({**from_env, **given}, sort_keys=True, default=repr)),
        sources=sources,
        environment=torch_environment(env),
        torch=str(torch.__version__),
        triton=_version("triton") or _version("pytorch-triton") or _version("pytorch-triton-rocm"),
        cuda=torch.version.cuda,
        driver=driver_version() if on_cuda else None,
        **facts,
    )


#: What :func:`differences` gives for a field or key one side lacks (printed as ``absent``).
class _Absent:
    def __repr__(self) -> str:
        return "absent"


ABSENT: Any = _Absent()


def differences(first: Any, other: Any, path: str = "") -> list[tuple[str, Any, Any]]:
    """The leaves where two setups (or any JSON data) differ.

    Args:
        first, other (Setup | Mapping | Any): the values; a :class:`Setup` is compared as its :meth:`Setup.to_dict`.
        path (str): the dotted name of these values (``"environment"``).

    Returns:
        list[tuple[str, Any, Any]]: ``(dotted name, first's value, other's value)`` per differing leaf;
        :data:`ABSENT` for a key one side lacks.
    """
    first, other = (value.to_dict() if isinstance(value, Setup) else value for value in (first, other))
    if isinstance(first, Mapping) and isinstance(other, Mapping):
        out = []
        for key in sorted(set(first) | set(other), key=str):
            name = f"{path}.{key}" if path else str(key)
            out += differences(first.get(key, ABSENT), other.get(key, ABSENT), name)
        return out
    return [] if first == other else [(path, first, other)]


def describe(found: list[tuple[str, Any, Any]], first: str, other: str, *, limit: int = 6) -> str:
    """One line for messages, ``"torch: '2.13.0' (bundle) vs '2.11.0' (here); ..."``: at most ``limit`` of
    :func:`differences`' ``found``, each side named ``first``/``other``, the rest counted."""
    parts = [f"{name}: {a!r} ({first}) vs {b!r} ({other})" for name, a, b in found[:limit]]
    if len(found) > limit:
        parts.append(f"and {len(found) - limit} more")
    return "; ".join(parts)
