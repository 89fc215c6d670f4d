"""Warm restart: save what torch compiled (and autotuned) in this process, load it in the next.

The file holds torch's own cache artifacts (``torch.compiler.save_cache_artifacts``, torch 2.7+:
FX graph, AOTAutograd and autotune caches) behind a one-line JSON header that names the torch,
triton and device it was built on and the knobs it was built under.  :func:`load_compile_cache`
reads only the header (plain JSON) before deciding; the artifacts themselves are pickled data,
i.e. code, so the file and its directory must belong to the current user and not be writable by
anyone else.

Layout: ``MAGIC`` line, header JSON line, then the artifact bytes.
"""

from __future__ import annotations

import hashlib
import json
import os
import stat
import tempfile
from importlib import metadata
from typing import Any

from . import torch_compat
from .errors import CompileCacheRefused, InvalidKnobValue, NotSupportedOnThisTorch
from .knobs import Knobs

MAGIC = b"inductor_knobs compile cache v1\n"
#: Header fields that must match the loading process exactly.
IDENTITY = ("torch", "triton", "device", "knobs_digest")


def identity(knobs: Knobs) -> dict[str, Any]:
    """What a cache file is keyed on: torch and triton versions, the device, and the knobs.

    The device is ``cuda:<name> sm_<major><minor> <N> SMs`` for the current CUDA device, else
    ``cpu:<ATen CPU capability>`` (``cpu:AVX512``): kernels are built for exactly that.
    """
    import torch

    if torch.cuda.is_available():
        props = torch.cuda.get_device_properties(torch.cuda.current_device())
        device = f"cuda:{props.name} sm_{props.major}{props.minor} {props.multi_processor_count} SMs"
    else:
        device = f"cpu:{torch.backends.cpu.get_cpu_capability()}"
    try:
        triton = metadata.version("triton")
    except metadata.PackageNotFoundError:
        triton = None
    return {
        "torch": torch.__version__,
        "triton": triton,
        "device": device,
        "knobs_digest": knobs.digest(),
        "knobs": knobs.to_dict(),
    }


def save_compile_cache(path: str | os.PathLike[str], knobs: Any = None) -> dict[str, Any]:
    """Write every cache artifact torch recorded in this process to ``path`` (mode 0600, atomically).

    Args:
        path: the file to write.
        knobs: the knobs the artifacts were built under: an :class:`~inductor_knobs.knobs.Knobs`,
            an ``ik.compile`` result (its knobs are used), or None (no knobs).

    Returns:
        The header written: identity (see :func:`identity`), artifact counts, payload sha256.

    Raises:
        NotSupportedOnThisTorch: torch < 2.7 (no cache artifacts API).
        CompileCacheRefused: torch recorded no artifacts (nothing compiled, or caches disabled,
            e.g. ``fx_graph_cache=False`` or ``TORCHINDUCTOR_FORCE_DISABLE_CACHES=1``).
    """
    import torch

    _require_artifacts_api("save_compile_cache")
    result = torch.compiler.save_cache_artifacts()
    if result is None:
        raise CompileCacheRefused(
            f"save_compile_cache({os.fspath(path)!r}): torch {torch.__version__} recorded no cache artifacts in this "
            "process; compile something first, with Inductor's caches on (fx_graph_cache, autotune_local_cache)"
        )
    payload, info = result
    header = {
        **identity(_knobs_of(knobs)),
        "artifacts": {str(k): len(v) for k, v in getattr(info, "artifacts", {}).items()},
        "payload_sha256": hashlib.sha256(payload).hexdigest(),
    }
    directory = os.path.dirname(os.path.abspath(path))
    fd, tmp = tempfile.mkstemp(dir=directory, prefix=".inductor_knobs-cache-")  # created 0600
    try:
        with os.fdopen(fd, "wb") as out:
            out.write(MAGIC + json.dumps(header, sort_keys=True).encode() + b"\n" + payload)
        os.replace(tmp, path)
    except BaseException:
        os.unlink(tmp)
        raise
    return header


def load_compile_cache(path: str | os.PathLike[str], knobs: Any = None, *, allow_unsafe: bool = False) -> dict[str, Any]:
    """Load a file written by :func:`save_compile_cache` into torch's caches, after checking it.

    Call it before the first compilation; then compiling the same model under the same knobs
    hits the caches and autotunes nothing.

    Args:
        path: the file.
        knobs: the knobs this process compiles under (as for :func:`save_compile_cache`); must
            equal the knobs the file was built under.
        allow_unsafe: skip the ownership and permission checks (only for files you trust).

    Returns:
        The file's header.

    Raises:
        NotSupportedOnThisTorch: torch < 2.7.
        CompileCacheRefused: the file (or its directory) is not owned by the current user or is
            writable by others; it is not a cache file; its torch, triton, device or knobs differ
            from this process's (the message lists each difference); its payload is corrupt.
    """
    import torch

    _require_artifacts_api("load_compile_cache")
    where = os.fspath(path)
    if not allow_unsafe:
        _check_private(where)
    with open(where, "rb") as src:
        magic, header_line, payload = src.readline(), src.readline(), src.read()
    try:
        header = json.loads(header_line) if magic == MAGIC else None
    except ValueError:
        header = None
    if not isinstance(header, dict):
        raise CompileCacheRefused(f"load_compile_cache({where!r}): not an inductor_knobs compile cache file")
    here = identity(_knobs_of(knobs))
    differences = [f"{key}: file {header.get(key)!r}, here {here[key]!r}" for key in IDENTITY if header.get(key) != here[key]]
    if differences:
        raise CompileCacheRefused(
            f"load_compile_cache({where!r}) refused: built for another setup ({'; '.join(differences)}). "
            f"File knobs: {header.get('knobs')}; here: {here['knobs']}. Rebuild the cache in this setup"
        )
    if hashlib.sha256(payload).hexdigest() != header.get("payload_sha256"):
        raise CompileCacheRefused(
            f"load_compile_cache({where!r}) refused: the payload does not match its sha256 (truncated or edited)"
        )
    torch.compiler.load_cache_artifacts(payload)
    return header


def _require_artifacts_api(what: str) -> None:
    import torch

    if not torch_compat.installed().has_cache_artifacts:
        raise NotSupportedOnThisTorch(
            f"{what} needs torch.compiler.save_cache_artifacts/load_cache_artifacts (torch 2.7+); torch "
            f"{torch.__version__} has neither. Point TORCHINDUCTOR_CACHE_DIR at a private persistent directory instead"
        )


def _knobs_of(knobs: Any) -> Knobs:
    if knobs is None:
        return Knobs()
    if isinstance(knobs, Knobs):
        return knobs
    backend = getattr(knobs, "_inductor_knobs_backend", None)
    if backend is not None:
        return backend.knobs  # type: ignore[no-any-return]
    raise InvalidKnobValue(f"knobs={knobs!r} is invalid: allowed an ik.Knobs, an ik.compile result or None")


def _check_private(path: str) -> None:
    """Refuse a file (or its directory) that another user owns or can write: its payload is unpickled."""
    if not hasattr(os, "getuid"):  # pragma: no cover - Windows: no POSIX ownership to check
        return
    uid = os.getuid()
    try:
        st = os.stat(path)
    except FileNotFoundError as err:
        raise CompileCacheRefused(f"load_compile_cache({path!r}): no such file") from err
    directory = os.path.dirname(os.path.realpath(path))
    dst = os.stat(directory)
    problems = []
    if st.st_uid != uid:
        problems.append(f"the file is owned by uid {st.st_uid}, not by you (uid {uid})")
    if st.st_mode & (stat.S_IWGRP | stat.S_IWOTH):
        problems.append(f"the file is writable by group or others (mode {stat.S_IMODE(st.st_mode):o})")
    if dst.st_uid not in (uid, 0):
        problems.append(f"its directory {directory} is owned by uid {dst.st_uid}")
    if dst.st_mode & (stat.S_IWGRP | stat.S_IWOTH) and not dst.st_mode & stat.S_ISVTX:
        mode = stat.S_IMODE(dst.st_mode)
        problems.append(f"its directory {directory} is writable by group or others without the sticky bit (mode {mode:o})")
    if problems:
        raise CompileCacheRefused(
            f"load_compile_cache({path!r}) refused: the file holds pickled data, i.e. code, and {'; '.join(problems)}. "
            "Fix the ownership/permissions (chmod 600), or pass allow_unsafe=True for a file you trust"
        )
