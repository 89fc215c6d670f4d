"""Warm restart: save what torch compiled (and autotuned) in this process, load it in the next.

The file holds torch's own cache artifacts (``torch.compiler.save_cache_artifacts``, torch 2.7+:
FX graph, AOTAutograd and autotune caches) behind a one-line JSON header that names the torch,
triton and device it was built on and the knobs it was built under.  :func:`load_compile_cache`
reads only the header (plain JSON) before deciding; the artifacts themselves are pickled data,
i.e. code, so the file and every directory on its path must belong to the current user (or root
for directories) and not be writable by anyone else, and the file is opened once, without following
a symbolic link, and checked and read through that one descriptor.

Layout: ``MAGIC`` line, header JSON line, then the artifact bytes.
"""

from __future__ import annotations

import hashlib
import json
import os
from typing import Any

from .. import Knobs
from ..errors import InvalidKnobValue, NotSupportedOnThisTorch
from ..ext import ENV_PREFIX, atomic_write, setup, torch_compat
from .cache_opener import open_checked, unsafe_code_directories  # noqa: F401 - unsafe_code_directories: tests use it here
from .errors import CompileCacheRefused

MAGIC = b"inductor_knobs compile cache v1\n"
#: Header fields that must match the loading process exactly.
IDENTITY = ("torch", "triton", "device", "knobs_digest")
#: The header field that holds the setup snapshot (:class:`~inductor_knobs.core.setup.Setup`).
SETUP = "setup"
#: The setup fields compared besides :data:`IDENTITY` (the driver is not: a newer one runs the same kernels).
SETUP_FIELDS = ("knobs", "environment", "cuda", "capability")
#: The header field that holds the sha256 of the rest of the header (files written before it have none).
HEADER_SHA = "header_sha256"


def identity(knobs: Knobs) -> dict[str, Any]:
    """What a cache file or bundle is keyed on: the setup snapshot it was built under (:mod:`inductor_knobs.core.setup`).

    ``setup`` is the whole snapshot: ``knobs`` layered over the environment's ``INDUCTOR_KNOBS_*`` knobs, the
    torch variables, the versions and the device.  ``torch``, ``triton``, ``device`` (``"<GPU> sm_<major><minor>
    <N> SMs"`` or ``"cpu <capability>"``), ``knobs_digest`` and ``knobs`` (the given knobs) repeat parts of it for
    messages and readers of the header.
    """
    found = setup.snapshot(knobs, source="bundle")
    return {
        "torch": found.torch,
        "triton": found.triton,
        "device": found.device,
        "knobs_digest": knobs.digest(),
        "knobs": knobs.to_dict(),
        SETUP: found.to_dict(),
    }


def save_compile_cache(path: str | os.PathLike[str], knobs: Any = None) -> dict[str, Any]:
    """Write every cache artifact torch recorded in this process to ``path`` (mode 0600, atomically).

    Args:
        path: the file to write.
        knobs: the knobs the artifacts were built under: an :class:`~inductor_knobs.core.knobs.Knobs`,
            an ``ik.compile`` result (its knobs are used), or None (no knobs).

    Returns:
        The header written: identity (see :func:`identity`), artifact counts, payload sha256.

    Raises:
        NotSupportedOnThisTorch: torch < 2.7 (no cache artifacts API).
        CompileCacheRefused: torch recorded no artifacts (nothing compiled, or caches disabled,
            e.g. ``fx_graph_cache=False`` or ``TORCHINDUCTOR_FORCE_DISABLE_CACHES=1``).
    """
    _require_artifacts_api("save_compile_cache")
    payload, header = saved_artifacts(f"save_compile_cache({os.fspath(path)!r})", _knobs_of(knobs))
    return write_file(path, header, payload)


def saved_artifacts(label: str, knobs: Knobs, tail: bytes = b"") -> tuple[bytes, dict[str, Any]]:
    """Every cache artifact torch recorded in this process, and the header that names who built them.

    Args:
        label (str): who asks, starting the message (``"save_compile_cache('x')"``).
        knobs (Knobs): the knobs the artifacts were built under.
        tail (bytes): more of the payload, after torch's artifacts (a serving bundle's Triton kernels,
            :mod:`inductor_knobs.serving.triton_kernels`); the header's sha256 covers it with them.

    Returns:
        tuple[bytes, dict[str, Any]]: the payload (``torch.compiler.save_cache_artifacts``, torch 2.7+,
        then ``tail``) and the header: :func:`identity`, artifact counts, the payload's sha256.

    Raises:
        CompileCacheRefused: torch recorded no artifacts.
    """
    import torch

    result = torch.compiler.save_cache_artifacts()
    if result is None:
        raise CompileCacheRefused(
            f"{label}: torch {torch.__version__} recorded no cache artifacts in this "
            "process; compile something first, with Inductor's caches on (fx_graph_cache, autotune_local_cache)"
        )
    payload, info = result
    payload += tail
    return payload, payload_header(knobs, payload, _artifact_counts(info))


def payload_header(knobs: Knobs, payload: bytes, artifacts: dict[str, int]) -> dict[str, Any]:
    """The header fields that name who built ``payload``: :func:`identity`, torch's artifact counts per kind
    (``{}`` for a payload that holds none, an AOT bundle's package) and the payload's sha256."""
    return {**identity(knobs), "artifacts": artifacts, "payload_sha256": hashlib.sha256(payload).hexdigest()}


def write_file(path: str | os.PathLike[str], header: dict[str, Any], payload: bytes) -> dict[str, Any]:
    """Write ``MAGIC``, the header (with its own sha256, ``header_sha256``) and ``payload`` to ``path``.

    The file is created 0600 beside ``path`` and renamed over it (the package's one atomic writer,
    :func:`~inductor_knobs.ext.atomic_write`), so a reader sees the old file or the whole new one.

    Returns:
        dict[str, Any]: the header as written (``header_sha256`` included).
    """
    header = {**header, HEADER_SHA: _header_digest(header)}
    with atomic_write(path, binary=True, mode=0o600) as out:
        out.write(MAGIC + json.dumps(header, sort_keys=True).encode() + b"\n" + payload)
    return header


def load_compile_cache(path: str | os.PathLike[str], knobs: Any = None, *, allow_unsafe: bool = False) -> dict[str, Any]:
    """Load a file written by :func:`save_compile_cache` into torch's caches, after checking it.

    Call it before the first compilation; then compiling the same model under the same knobs
    hits the caches and autotunes nothing.

    The file is opened once, without following a symbolic link as its last component
    (``O_NOFOLLOW``); ownership and mode are read from that descriptor (``fstat``) and the header
    and payload are read from it too, so nothing can be swapped between the check and the read.
    Every directory on the way to the file (the one holding the given name, its ancestors up to
    ``/``, and the targets of any symbolic links among them) must be owned by root or you and not
    writable by group or others unless it has the sticky bit, as OpenSSH's ``StrictModes`` demands
    of ``~/.ssh`` (``safe_path`` in OpenSSH's ``misc.c``).

    Args:
        path (str | os.PathLike[str]): the file.
        knobs (Knobs | ik.compile result | None): the knobs this process compiles under (as for
            :func:`save_compile_cache`); must equal the knobs the file was built under.
        allow_unsafe (bool): skip the ownership, permission and symbolic-link checks (only for
            files you trust); the header, identity, sha256 and artifact-count checks still run.

    Returns:
        dict[str, Any]: the file's header.

    Raises:
        NotSupportedOnThisTorch: torch < 2.7 (``torch.compiler.load_cache_artifacts`` missing).
        CompileCacheRefused: the path is a symbolic link; the file is not a regular file, is not
            owned by the current user or is writable by others; a directory on its path is owned by
            another user, is writable by others without the sticky bit, or is reached through a
            symbolic link another user owns; it is not a cache file; its header does not match its
            sha256; its torch, triton, device or knobs differ from this process's (the message lists
            each difference); its payload is corrupt; torch (``torch.compiler.load_cache_artifacts``,
            torch 2.7+: returns ``None`` when it cannot deserialize the payload, else a ``CacheInfo``)
            loaded nothing or fewer artifacts of some kind than the header records.
    """
    _require_artifacts_api("load_compile_cache")
    where = os.fspath(path)
    label = f"load_compile_cache({where!r})"
    header, payload = read_file(where, allow_unsafe, label)
    if isinstance(header.get("serving"), dict) and header["serving"].get("aot") is not None:
        raise CompileCacheRefused(
            f"{label} refused: an AOT serving bundle holds a package, not torch's caches; "
            "load it with ik.serving.load_serving_bundle"
        )
    refuse_differences(label, header, identity(_knobs_of(knobs)))
    check_payload(label, header, payload)
    load_payload(label, header, payload)
    return header


def read_file(path: str, allow_unsafe: bool, label: str) -> tuple[dict[str, Any], bytes]:
    """The header and payload of a file :func:`write_file` wrote, read through one checked descriptor.

    Args:
        path (str): the file, as the caller named it.
        allow_unsafe (bool): skip the ownership, permission and symbolic-link checks (:func:`open_checked`).
        label (str): who asks, starting every message (``"load_compile_cache('x')"``).

    Returns:
        tuple[dict[str, Any], bytes]: the header (a JSON object) and the payload, not yet checked
        against this process.

    Raises:
        CompileCacheRefused: the checks of :func:`open_checked`; not a file this module wrote; a
            header whose ``header_sha256`` does not match it (files written before it existed have none).
    """
    with os.fdopen(open_checked(path, allow_unsafe, label), "rb") as src:
        magic, header_line = src.readline(), src.readline()
        try:
            header = json.loads(header_line) if magic == MAGIC else None
        except ValueError:
            header = None
        if not isinstance(header, dict):
            raise CompileCacheRefused(f"{label}: not an inductor_knobs compile cache file")
        if HEADER_SHA in header and header[HEADER_SHA] != _header_digest(header):
            raise CompileCacheRefused(f"{label} refused: the header does not match its sha256 (edited or corrupt)")
        return header, src.read()


def refuse_differences(label: str, header: dict[str, Any], here: dict[str, Any], fields: tuple[str, ...] = IDENTITY) -> None:
    """Raise naming every difference between the setup ``header`` was built under and this process's (``here``).

    Compared: ``fields`` of the header, then the setup snapshots' :data:`SETUP_FIELDS` (the knobs in force, the
    torch variables, the CUDA version, the GPU's compute capability); a knob set by an ``INDUCTOR_KNOBS_*``
    variable on either side is named by its variable.

    Raises:
        CompileCacheRefused: one or more differ (``"torch: file '2.11.0', here '2.13.0'; ..."``), or the header has
            no setup snapshot.
    """
    differences = [f"{k}: file {header.get(k)!r}, here {here.get(k)!r}" for k in fields if header.get(k) != here.get(k)]
    built = header.get(SETUP)
    if not isinstance(built, dict):
        differences.append(f"{SETUP}: none in the file (written by another inductor_knobs release)")
    else:
        mine = here[SETUP]
        for name, a, b in setup.differences({k: built.get(k) for k in SETUP_FIELDS}, {k: mine.get(k) for k in SETUP_FIELDS}):
            knob = name.partition(".")[2] if name.startswith("knobs.") else None
            if knob is not None and "env" in (built.get("sources", {}).get(knob), mine.get("sources", {}).get(knob)):
                name = ENV_PREFIX + knob.upper()  # a knob of an INDUCTOR_KNOBS_* variable, on either side
            differences.append(f"{name}: file {a!r}, here {b!r}")
    if differences:
        raise CompileCacheRefused(
            f"{label} refused: built for another setup ({'; '.join(differences)}). "
            f"File knobs: {header.get('knobs')}; here: {here.get('knobs')}. Rebuild the cache in this setup"
        )


def check_payload(label: str, header: dict[str, Any], payload: bytes) -> None:
    """Refuse a payload that does not match the header's sha256, or a header whose artifact counts are malformed.

    Raises:
        CompileCacheRefused: either problem (nothing is loaded).
    """
    if hashlib.sha256(payload).hexdigest() != header.get("payload_sha256"):
        raise CompileCacheRefused(f"{label} refused: the payload does not match its sha256 (truncated or edited)")
    expected = header.get("artifacts", {})
    if not isinstance(expected, dict) or not all(
        isinstance(k, str) and isinstance(n, int) and not isinstance(n, bool) and n >= 0 for k, n in expected.items()
    ):
        raise CompileCacheRefused(
            f"{label} refused: the header's artifact counts {expected!r} are malformed "
            "(allowed: an object mapping artifact kinds to counts, as save_compile_cache writes)"
        )


def load_payload(label: str, header: dict[str, Any], payload: bytes) -> dict[str, int]:
    """Load a payload :func:`check_payload` accepted into torch's caches, and check what torch loaded.

    Returns:
        dict[str, int]: the artifacts torch loaded, per kind.

    Raises:
        CompileCacheRefused: torch loaded nothing or fewer artifacts than the header records.
    """
    import torch

    expected = header.get("artifacts", {})
    # The sha256 only proves the payload is the one the header was written with, not that torch
    # can read it: load_cache_artifacts logs a warning and returns None when deserializing fails
    # (torch/compiler/_cache.py, CacheArtifactManager.deserialize), which used to pass silently.
    # torch 2.7: torch/compiler/_cache.py imported before Dynamo cycles back into itself
    # (remote_cache -> torch._dynamo -> pgo -> torch.compiler._cache) and raises ImportError, as in
    # a serving process that loads before its first compile.  Importing Dynamo first breaks the cycle.
    import torch._dynamo

    info = torch.compiler.load_cache_artifacts(payload)
    loaded = _artifact_counts(info)
    if info is None or not sum(loaded.values()):
        raise CompileCacheRefused(
            f"{label} refused: torch {torch.__version__} loaded no artifacts from the payload "
            f"(load_cache_artifacts returned {'None: it could not deserialize it' if info is None else 'nothing'}); "
            f"the header records {expected or 'no counts'}. Rebuild the cache with save_compile_cache"
        )
    short = [f"{kind}: {loaded.get(kind, 0)} of {n}" for kind, n in sorted(expected.items()) if loaded.get(kind, 0) < n]
    if short:
        # Torch has already written the artifacts it did read into its caches; they are the ones
        # the sha256 vouches for, so they are left there, but the caller must know the load is partial.
        raise CompileCacheRefused(
            f"{label} refused: torch {torch.__version__} loaded fewer artifacts than the header "
            f"records ({'; '.join(short)}). Rebuild the cache with save_compile_cache"
        )
    return loaded


def _header_digest(header: dict[str, Any]) -> str:
    """sha256 of the header's JSON without its own ``header_sha256`` (keys sorted, as written)."""
    rest = {key: value for key, value in header.items() if key != HEADER_SHA}
    return hashlib.sha256(json.dumps(rest, sort_keys=True).encode()).hexdigest()


def _artifact_counts(info: Any) -> dict[str, int]:
    """How many artifacts of each kind a torch ``CacheInfo`` lists; ``{}`` for None.

    torch 2.8+ (``torch/compiler/_cache.py``): ``CacheInfo.artifacts`` maps the artifact type
    (``"inductor"``, ``"autotune"``, ``"aot_autograd"``, ``"pgo"``, ``"precompile"``) to a list
    of keys.  torch 2.7: a dataclass with one list per kind (``inductor_artifacts``,
    ``autotune_artifacts``, ``aot_autograd_artifacts``, ``pgo_artifacts``), named here without
    the ``_artifacts`` suffix so both layouts give the same keys.
    """
    if info is None:
        return {}
    artifacts = getattr(info, "artifacts", None)
    if isinstance(artifacts, dict):
        return {str(kind): len(keys) for kind, keys in artifacts.items()}
    counts = {}
    for name in dir(info):
        keys = getattr(info, name, None) if name.endswith("_artifacts") and not name.startswith("_") else None
        if isinstance(keys, list):
            counts[name[: -len("_artifacts")]] = len(keys)
    return counts


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
