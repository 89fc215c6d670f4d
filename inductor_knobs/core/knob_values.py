"""The check of each knob's value: types, ranges, and names the installed torch knows, normalised.

:class:`~inductor_knobs.core.knobs.Knobs` runs each row's check (``Knob.check``) on construction and on
each ``INDUCTOR_KNOBS_*`` variable, without importing ``torch._inductor``; GEMM backend names come from
the patch module for the installed release (``TorchPatches.gemm_backends``).
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterable, Mapping
from typing import Any

from ..errors import InvalidKnobValue
from .messages import torch_version

SEARCH_SPACES = ("DEFAULT", "EXHAUSTIVE")
#: ``torch.nn.attention.SDPBackend`` names a knob may list (the installed torch may lack some: checked when applied).
SDPA_BACKENDS = ("FLASH_ATTENTION", "EFFICIENT_ATTENTION", "CUDNN_ATTENTION", "MATH", "OVERRIDEABLE")
MAX_SMS = 1024


def fail(label: str, value: object, allowed: str) -> InvalidKnobValue:
    return InvalidKnobValue(f"{label}={value!r} is invalid on torch {torch_version()}: allowed {allowed}")


def check_bool(label: str, value: object) -> bool:
    if not isinstance(value, bool):
        raise fail(label, value, "True or False")
    return value


def check_min_sms(label: str, value: object) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= MAX_SMS:
        raise fail(label, value, f"an int SM count from 1 to {MAX_SMS}")
    return value


def check_backends(label: str, value: object) -> str:
    names: list[str]
    if isinstance(value, str):
        names = [n.strip().upper() for n in value.split(",")]
    elif isinstance(value, Iterable):
        names = [str(n).strip().upper() for n in value]
    else:
        raise fail(label, value, "a comma-separated string or a list of backend names")
    names = list(dict.fromkeys(n for n in names if n))
    known = _known_backends()
    unknown = [n for n in names if known and n not in known]
    if not names or unknown:
        raise fail(label, value, f"a non-empty subset of {', '.join(sorted(known))}")
    return ",".join(names)


def _known_backends() -> frozenset[str]:
    from .torch_compat import release_of, select

    version = torch_version()
    if version == "not installed":
        return frozenset()
    return select(version, strict=False).gemm_backends(release_of(version))


def check_sdpa_backends(label: str, value: object) -> str:
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
        raise fail(label, value, f"a non-empty list of {', '.join(SDPA_BACKENDS)} (in priority order)")
    return ",".join(names)


def check_search_space(label: str, value: object) -> str:
    if not isinstance(value, str) or value.upper() not in SEARCH_SPACES:
        raise fail(label, value, " or ".join(SEARCH_SPACES))
    return value.upper()


def check_directory(label: str, value: object) -> str:
    """An absolute directory path that exists and is writable, or can be created (its nearest
    existing ancestor is a writable directory)."""
    if not isinstance(value, (str, os.PathLike)) or not str(value):
        raise fail(label, value, "a directory path")
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
        raise fail(label, value, f"a directory that exists and is writable or can be created ({probe} {what})")
    return path


def check_trace(label: str, value: object) -> bool | str:
    if isinstance(value, bool):
        return value
    if isinstance(value, (str, os.PathLike)):
        return check_directory(label, value)
    raise fail(label, value, "True, False or a directory path for trace files")


def check_capture_sizes(label: str, value: object) -> tuple[int | tuple[int, ...], ...]:
    """``triton.cudagraph_capture_sizes``: the int keys CUDA graph trees record (one symbolic int input: an int
    each; several: a tuple of ints each), all >= 1; a list is read as a tuple, duplicates dropped."""
    allowed = "a non-empty tuple of positive ints (or of tuples of positive ints, one per dynamic int input)"
    if isinstance(value, (str, bytes, Mapping)) or not isinstance(value, Iterable):
        raise fail(label, value, allowed)
    sizes: list[int | tuple[int, ...]] = []
    for item in value:
        if _positive(item):
            size: int | tuple[int, ...] = item  # type: ignore[assignment]
        elif isinstance(item, (tuple, list)) and item and all(_positive(i) for i in item):
            size = tuple(item)
        else:
            raise fail(label, value, allowed)
        if size not in sizes:
            sizes.append(size)
    if not sizes:
        raise fail(label, value, allowed)
    return tuple(sizes)


def _positive(item: object) -> bool:
    return isinstance(item, int) and not isinstance(item, bool) and item >= 1


def check_lookup_table(label: str, value: object) -> dict[str, list[dict[str, Any]]]:
    from .lookup_table import load_table

    return load_table(label, value)


def check_on_mismatch(label: str, value: object) -> str:
    if not isinstance(value, str) or value.strip().lower() not in ("raise", "warn"):
        raise fail(label, value, "'raise' (KnobNotApplied) or 'warn' (KnobNotAppliedWarning)")
    return value.strip().lower()


def config_key(key: str) -> str:
    """An Inductor config key as torch spells it: ``-`` read as ``_``, as ``torch.compile(options=)`` does."""
    return key.replace("-", "_")


def check_positive_int(label: str, value: object) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise fail(label, value, "a positive int")
    return value


def check_config(
    label: str, value: object, value_checks: Mapping[str, Callable[[str, object], Any]]
) -> tuple[tuple[str, Any], ...]:
    """``config=``: a mapping of dotted Inductor config keys to values, each key that a named knob sets checked by
    that knob's check (``value_checks``), sorted into pairs; types are checked against the installed config in plan."""
    if isinstance(value, tuple) and all(isinstance(p, tuple) and len(p) == 2 for p in value):
        value = dict(value)  # already normalised (e.g. re-validated)
    if not isinstance(value, Mapping) or not all(isinstance(k, str) and k for k in value):
        raise fail(label, value, "a mapping of dotted Inductor config keys to values")
    out = {}
    for key, item in value.items():
        name = config_key(key)
        check = value_checks.get(name)
        out[name] = check(f"{label}[{name!r}]", item) if check is not None and item is not None else item
    return tuple(sorted(out.items()))
