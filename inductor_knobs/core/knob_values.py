"""The check of each knob's value: types, ranges, and names the installed torch knows, normalised.

:class:`~inductor_knobs.core.knobs.Knobs` runs :data:`CHECKS` on construction (and on each
``INDUCTOR_KNOBS_*`` variable), without importing ``torch._inductor``; GEMM backend names come from
the patch module for the installed release (``TorchPatches.gemm_backends``).  ``config=`` entries
for the Inductor keys a named knob sets get that knob's check (:data:`VALUE_CHECKS`).
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Mapping
from typing import Any

from ..errors import InvalidKnobValue
from .messages import torch_version

SEARCH_SPACES = ("DEFAULT", "EXHAUSTIVE")
#: ``torch.nn.attention.SDPBackend`` names a knob may list (the installed torch may lack some: checked when applied).
SDPA_BACKENDS = ("FLASH_ATTENTION", "EFFICIENT_ATTENTION", "CUDNN_ATTENTION", "MATH", "OVERRIDEABLE")
MAX_SMS = 1024


def _fail(label: str, value: object, allowed: str) -> InvalidKnobValue:
    return InvalidKnobValue(f"{label}={value!r} is invalid on torch {torch_version()}: allowed {allowed}")


def _check_bool(label: str, value: object) -> bool:
    if not isinstance(value, bool):
        raise _fail(label, value, "True or False")
    return value


def _check_min_sms(label: str, value: object) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= MAX_SMS:
        raise _fail(label, value, f"an int SM count from 1 to {MAX_SMS}")
    return value


def _check_backends(label: str, value: object) -> str:
    names: list[str]
    if isinstance(value, str):
        names = [n.strip().upper() for n in value.split(",")]
    elif isinstance(value, Iterable):
        names = [str(n).strip().upper() for n in value]
    else:
        raise _fail(label, value, "a comma-separated string or a list of backend names")
    names = list(dict.fromkeys(n for n in names if n))
    known = _known_backends()
    unknown = [n for n in names if known and n not in known]
    if not names or unknown:
        raise _fail(label, value, f"a non-empty subset of {', '.join(sorted(known))}")
    return ",".join(names)


def _known_backends() -> frozenset[str]:
    from .torch_compat import release_of, select

    version = torch_version()
    if version == "not installed":
        return frozenset()
    return select(version, strict=False).gemm_backends(release_of(version))


def _check_sdpa_backends(label: str, value: object) -> str:
    """SDPA backend names in priority order (``SDPBackend`` members or their names, any case), comma-joined."""
    if isinstance(value, str):
        items: list[object] = list(value.split(","))
    elif isinstance(value, Iterable):
        items = list(value)
    else:
        items = [value]
    names = [str(getattr(i, "name", i)).strip().upper() for i in items]
    names = list(dict.fromkeys(n for n in names if n))
    if not names or any(n not in SDPA_BACKENDS for n in names):
        raise _fail(label, value, f"a non-empty list of {', '.join(SDPA_BACKENDS)} (in priority order)")
    return ",".join(names)


def _check_search_space(label: str, value: object) -> str:
    if not isinstance(value, str) or value.upper() not in SEARCH_SPACES:
        raise _fail(label, value, " or ".join(SEARCH_SPACES))
    return value.upper()


def _check_directory(label: str, value: object) -> str:
    """An absolute directory path that exists and is writable, or can be created (its nearest
    existing ancestor is a writable directory)."""
    if not isinstance(value, (str, os.PathLike)) or not str(value):
        raise _fail(label, value, "a directory path")
    path = os.path.abspath(os.fspath(value))
    probe = path
    while not os.path.exists(probe):
        probe = os.path.dirname(probe)
    what = "is not a directory" if not os.path.isdir(probe) else None
    if what is None:
        import tempfile

        try:  # os.access says yes to root even on /proc: make (and remove) a directory to know
            os.rmdir(tempfile.mkdtemp(prefix=".inductor_knobs-probe-", dir=probe))
        except OSError as err:
            what = f"is not writable ({err.strerror})"
    if what is not None:
        raise _fail(label, value, f"a directory that exists and is writable or can be created ({probe} {what})")
    return path


def _check_trace(label: str, value: object) -> bool | str:
    if isinstance(value, bool):
        return value
    if isinstance(value, (str, os.PathLike)):
        return _check_directory(label, value)
    raise _fail(label, value, "True, False or a directory path for trace files")


def _check_capture_sizes(label: str, value: object) -> tuple[int | tuple[int, ...], ...]:
    """``triton.cudagraph_capture_sizes``: the int keys CUDA graph trees record (one symbolic int input: an int
    each; several: a tuple of ints each), all >= 1; a list is read as a tuple, duplicates dropped."""
    allowed = "a non-empty tuple of positive ints (or of tuples of positive ints, one per dynamic int input)"
    if isinstance(value, (str, bytes, Mapping)) or not isinstance(value, Iterable):
        raise _fail(label, value, allowed)
    sizes: list[int | tuple[int, ...]] = []
    for item in value:
        if _positive(item):
            size: int | tuple[int, ...] = item  # type: ignore[assignment]
        elif isinstance(item, (tuple, list)) and item and all(_positive(i) for i in item):
            size = tuple(item)
        else:
            raise _fail(label, value, allowed)
        if size not in sizes:
            sizes.append(size)
    if not sizes:
        raise _fail(label, value, allowed)
    return tuple(sizes)


def _positive(item: object) -> bool:
    return isinstance(item, int) and not isinstance(item, bool) and item >= 1


def _check_lookup_table(label: str, value: object) -> dict[str, list[dict[str, Any]]]:
    from .lookup_table import load_table

    return load_table(label, value)


def _check_on_mismatch(label: str, value: object) -> str:
    if not isinstance(value, str) or value.strip().lower() not in ("raise", "warn"):
        raise _fail(label, value, "'raise' (KnobNotApplied) or 'warn' (KnobNotAppliedWarning)")
    return value.strip().lower()


#: Inductor config keys whose values get the same check as the named knob that sets them, so
#: ``config={"max_autotune_gemm_backends": ...}`` is validated exactly like ``gemm_backends=...``.
#: Types are checked against the installed config's declared types when applied (``plan``).
VALUE_CHECKS = {
    "max_autotune_gemm_backends": lambda label, value: _check_backends(label, value),
    "max_autotune_gemm_search_space": lambda label, value: _check_search_space(label, value),
    "trace.debug_dir": lambda label, value: None if value is None else _check_directory(label, value),
    "triton.cudagraph_capture_sizes": lambda label, value: _check_capture_sizes(label, value),
    "lookup_table.table": lambda label, value: _check_lookup_table(label, value),
}


def config_key(key: str) -> str:
    """An Inductor config key as torch spells it: ``-`` read as ``_``, as ``torch.compile(options=)`` does."""
    return key.replace("-", "_")


def _check_config(label: str, value: object) -> tuple[tuple[str, Any], ...]:
    if isinstance(value, tuple) and all(isinstance(p, tuple) and len(p) == 2 for p in value):
        value = dict(value)  # already normalised (e.g. re-validated)
    if not isinstance(value, Mapping) or not all(isinstance(k, str) and k for k in value):
        raise _fail(label, value, "a mapping of dotted Inductor config keys to values")
    out = {}
    for key, item in value.items():
        name = config_key(key)
        check = VALUE_CHECKS.get(name)
        out[name] = check(f"{label}[{name!r}]", item) if check is not None and item is not None else item
    return tuple(sorted(out.items()))


#: Knob name -> the check of its value (label, value) -> the normalised value.
CHECKS = {
    "min_sms": _check_min_sms,
    "gate_rocm_xpu": _check_bool,
    "max_autotune": _check_bool,
    "max_autotune_gemm": _check_bool,
    "gemm_backends": _check_backends,
    "gemm_search_space": _check_search_space,
    "coordinate_descent_tuning": _check_bool,
    "cudagraphs": _check_bool,
    "trace": _check_trace,
    "sdpa_backends": _check_sdpa_backends,
    "tunableop": _check_bool,
    "cudnn_sdpa_avoid_recompile": _check_bool,
    "cudagraph_capture_sizes": _check_capture_sizes,
    "lookup_table": _check_lookup_table,
    "config": _check_config,
    "on_mismatch": _check_on_mismatch,
    "strict": _check_bool,
}
