"""The Triton kernels a serving bundle carries: Triton's cache entries of what the served model launches, put back on load.

Why: Inductor's FX graph cache entry, and the Triton bundle of cubins in it (``TritonBundler``), is written
when the graph compiles.  The kernels tuned at their first run afterwards (coordinate descent,
``CachingAutotuner.coordinate_descent_tuning``) are compiled then, so torch's cache artifacts lack them;
a loading process finds their configs in the autotune cache and calls ``triton.compile`` for each
(``recheck_autotune_cache`` -> ``_precompile_config``), a full Triton compile on an empty
``TRITON_CACHE_DIR`` (29 on an H100 for a Llama, torch 2.11, Triton 3.6).  So the bundle carries the
Triton cache directory of every launcher of every ``CachingAutotuner`` this process loaded
(:func:`collect`), and the load writes the ones this process's cache lacks before torch loads its
artifacts (:func:`restore`): those ``triton.compile`` calls are then Triton cache hits.

In the file (:mod:`inductor_knobs.serving.bundle_format`): the serving section's ``"triton_kernels"``
(plain JSON, covered by the header's sha256) lists each kernel's key, device index and files with their
sizes; the files' bytes follow torch's artifacts at the end of the payload, in that order (the header's
``payload_sha256`` covers both).  Triton's ``.json`` files name the absolute paths of the files beside
them (``__grp__<kernel>.json``'s ``child_paths``); they are stored with :data:`PLACEHOLDER` for the
directory and written with this process's, as ``TritonBundler`` does with ``[REPLACE]``.

Where (torch 2.8-2.14, see :class:`inductor_knobs.patches.hooks.TorchHooks`): ``PyCodeCache.modules``,
``CachingAutotuner.launchers[i].cache_hash`` (``triton_hash_to_path_key`` of Triton's hash: the
directory name ``triton.runtime.cache.get_cache_manager`` uses) and ``triton_meta["device"]``; the
directory is torch's ``triton_cache_dir(device)``, which ``CachingAutotuner`` exports as ``TRITON_CACHE_DIR``.
"""

from __future__ import annotations

import json
import os
import shutil
import tempfile
from dataclasses import dataclass
from typing import Any

from .errors import CompileCacheRefused

#: Stands for a kernel's own directory in its ``.json`` files while in a bundle.
PLACEHOLDER = "@@inductor_knobs_triton_kernel_dir@@"
#: Longest file or directory name accepted (Linux ``NAME_MAX``).
NAME_MAX = 255


@dataclass(frozen=True)
class Kernel:
    """One Triton cache entry: the key directory's name, the device index it is for, its files.

    Attributes:
        key: the directory name in Triton's cache (``triton_hash_to_path_key`` of the kernel's hash).
        device: the CUDA device index (``torch._inductor.runtime.runtime_utils.triton_cache_dir(device)``).
        files: ``(file name, bytes)``, ``.json`` files with :data:`PLACEHOLDER` for the directory.
    """

    key: str
    device: int
    files: tuple[tuple[str, bytes], ...]


@dataclass(frozen=True)
class Carried:
    """What :func:`collect` found: the kernels to carry, and how many launchers' directories it could not read."""

    kernels: tuple[Kernel, ...] = ()
    not_found: int = 0


def collect() -> Carried:
    """The Triton cache entries of every launcher of every ``CachingAutotuner`` this process loaded.

    What cannot be found is skipped, and counted: a launcher without ``cache_hash``, a directory
    that is gone or is a symbolic link, a file name that is not plain (:func:`plain_name`), a
    ``.json`` that already holds :data:`PLACEHOLDER`.  Without Triton (a CPU build) or without
    the names above (:class:`~inductor_knobs.patches.hooks.TorchHooks`), nothing is carried.

    Returns:
        Carried: one :class:`Kernel` per (device, key), in the order found.
    """
    found = _launched()
    if found is None:
        return Carried()
    cache_dir, keys = found
    kernels, not_found = [], 0
    for device, key in keys:
        kernel = _read(cache_dir(device), key, device)
        if kernel is None:
            not_found += 1
        else:
            kernels.append(kernel)
    return Carried(tuple(kernels), not_found)


def pack(carried: Carried) -> tuple[dict[str, Any], bytes]:
    """The serving section's ``"triton_kernels"`` entry and the bytes that follow torch's artifacts.

    Returns:
        tuple[dict[str, Any], bytes]: ``{"kernels": [{"key", "device", "files": [[name, size], ...]}],
        "carried": n, "bytes": total, "not_found": m}`` and the files' bytes in that order.
    """
    entries, blob = [], bytearray()
    for kernel in carried.kernels:
        entries.append({"key": kernel.key, "device": kernel.device, "files": [[name, len(data)] for name, data in kernel.files]})
        for _, data in kernel.files:
            blob += data
    manifest = {"kernels": entries, "carried": len(entries), "bytes": len(blob), "not_found": carried.not_found}
    return manifest, bytes(blob)


def unpack(label: str, manifest: Any, payload: bytes) -> tuple[bytes, tuple[Kernel, ...]]:
    """Split a bundle's payload into torch's artifacts and the :class:`Kernel` s carried, checking every name.

    Args:
        label (str): who asks, starting every message (``"load_serving_bundle('x')"``).
        manifest (Any): the serving section's ``"triton_kernels"``; None (a bundle written before it): none carried.
        payload (bytes): the payload whose sha256 the header's matched.

    Returns:
        tuple[bytes, tuple[Kernel, ...]]: torch's payload, and the kernels to :func:`restore`.

    Raises:
        CompileCacheRefused: a malformed entry, a key or file name that is not a plain name
            (``/``, ``..``, an absolute path, ...), a name twice, sizes that do not add up to the
            payload, or a ``__grp__`` file naming a path outside its own directory; nothing is written.
    """
    if manifest is None:
        return payload, ()
    try:
        entries, total = manifest["kernels"], manifest["bytes"]
        if not isinstance(entries, list) or manifest["carried"] != len(entries) or not _count(total) or total > len(payload):
            raise ValueError(f"counts {manifest.get('carried')!r}/{total!r} for {len(entries)} kernels and {len(payload)} bytes")
        start = len(payload) - total
        kernels, seen, offset = [], set(), start
        for entry in entries:
            key, device, files = entry["key"], entry["device"], entry["files"]
            where = f"kernel {key!r}"
            _check_name(label, where, key)
            if not _count(device) or (device, key) in seen:
                raise ValueError(f"{where}: device {device!r} (a device index, each key once per device)")
            seen.add((device, key))
            names: set[str] = set()
            read = []
            for name, size in files:
                _check_name(label, f"{where} file", name)
                if name in names or not _count(size) or offset + size > len(payload):
                    raise ValueError(f"{where} file {name!r}: size {size!r} (each name once, within the payload)")
                names.add(name)
                read.append((name, payload[offset : offset + size]))
                offset += size
            kernels.append(Kernel(key, device, tuple(read)))
        if offset != len(payload):
            raise ValueError(f"the files' sizes add up to {offset - start} bytes, the header records {total}")
        for kernel in kernels:
            for name, data in kernel.files:
                if name.startswith("__grp__"):
                    _check_group(label, f"kernel {kernel.key!r}", name, data)
    except CompileCacheRefused:
        raise
    except (KeyError, TypeError, ValueError) as err:
        raise CompileCacheRefused(
            f"{label} refused: its Triton kernels entry does not read back ({err}); nothing was written. "
            "Rebuild the bundle with ik.serving.save_serving_bundle"
        ) from err
    return payload[:start], tuple(kernels)


def restore(kernels: tuple[Kernel, ...]) -> int:
    """Write each kernel into this process's Triton cache where its key directory does not exist yet.

    The directory is torch's ``triton_cache_dir(device)`` (``TRITON_CACHE_DIR``, else
    ``<Inductor cache>/triton/<device>``), as ``TritonBundler.read_and_emit`` uses.  A kernel is
    written into a fresh private directory beside its key (0700, files 0600, opened exclusively
    without following links) and renamed to the key at once, so a reader sees all of it or nothing.
    An existing key (Triton's own entry, a link, an empty directory) is left alone: never overwritten.

    Args:
        kernels (tuple[Kernel, ...]): what :func:`unpack` accepted (its names are plain names).

    Returns:
        int: the kernels written.

    Raises:
        OSError: the cache directory cannot be created or written.
    """
    if not kernels:
        return 0
    cache_dir = _torch_function("triton_cache_dir")
    if cache_dir is None:
        return 0
    written = 0
    for kernel in kernels:
        base = cache_dir(kernel.device)
        target = os.path.join(base, kernel.key)
        if os.path.lexists(target):
            continue
        os.makedirs(base, mode=0o700, exist_ok=True)
        staging = tempfile.mkdtemp(prefix=f"tmp.ik_{kernel.key[:16]}.", dir=base)  # 0700, a name no one else has
        try:
            for name, data in kernel.files:
                if name.endswith(".json"):
                    data = data.replace(PLACEHOLDER.encode(), json.dumps(target)[1:-1].encode())
                flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_CLOEXEC", 0)
                with os.fdopen(os.open(os.path.join(staging, name), flags, 0o600), "wb") as out:
                    out.write(data)
            # rename(2) of a directory fails on an existing non-empty directory or a non-directory
            # (a link included), and only replaces an empty directory: nothing written is lost.
            try:
                os.rename(staging, target)
            except OSError:
                if not os.path.lexists(target):
                    raise
                continue  # another process (Triton itself) made the key meanwhile: theirs stays
            written += 1
        finally:
            shutil.rmtree(staging, ignore_errors=True)
    return written


def plain_name(name: Any) -> bool:
    """Whether ``name`` is a plain file or directory name: 1-255 characters of letters, digits, ``_``, ``-``
    and ``.``, not starting with ``.`` (no ``/``, ``..``, absolute path, hidden or empty name).

    Triton's keys are base32, base64url or hex; its files are ``<kernel name>.<ext>`` and
    ``__grp__<kernel name>.json``, kernel names being Inductor's identifiers.
    """
    return (
        isinstance(name, str)
        and 0 < len(name) <= NAME_MAX
        and not name.startswith(".")
        and all(c.isascii() and (c.isalnum() or c in "_-.") for c in name)
    )


def _launched() -> tuple[Any, list[tuple[int, str]]] | None:
    """torch's ``triton_cache_dir`` and the ``(device, key)`` of every launcher loaded, deduplicated; None without them."""
    cache_dir, loaded, autotuner = (_torch_function(a) for a in ("triton_cache_dir", "loaded_code_modules", "autotuner_class"))
    if cache_dir is None or loaded is None or autotuner is None:  # no Triton: triton_heuristics does not import
        return None
    modules = list(loaded)
    keys: dict[tuple[int, str], None] = {}
    for module in modules:
        for value in list(vars(module).values()):
            if not isinstance(value, autotuner):
                continue
            device = getattr(value, "triton_meta", {}).get("device", 0)
            for launcher in list(getattr(value, "launchers", ())):
                key = getattr(launcher, "cache_hash", None)
                if isinstance(key, str) and _count(device):
                    keys[(device, key)] = None
    return cache_dir, list(keys)


def _read(base: str, key: str, device: int) -> Kernel | None:
    """The files of ``base/key`` (regular files only, not following links), or None where that cannot be carried."""
    if not plain_name(key):
        return None
    directory = os.path.join(base, key)
    try:
        if os.path.islink(directory) or not os.path.isdir(directory):
            return None
        files = []
        with os.scandir(directory) as entries:
            for entry in sorted(entries, key=lambda e: e.name):
                if entry.is_dir(follow_symlinks=False) and entry.name.startswith("tmp."):
                    continue  # Triton's and torch's own staging directories
                if not entry.is_file(follow_symlinks=False) or not plain_name(entry.name):
                    return None
                with open(entry.path, "rb") as src:
                    data = src.read()
                if entry.name.endswith(".json"):
                    if PLACEHOLDER.encode() in data:
                        return None
                    data = data.replace(json.dumps(directory)[1:-1].encode(), PLACEHOLDER.encode())
                files.append((entry.name, data))
    except OSError:
        return None
    if not files or any(_group_problem(data) for name, data in files if name.startswith("__grp__")):
        return None  # a group naming files elsewhere would be refused at load: not carried
    return Kernel(key, device, tuple(files))


def _check_name(label: str, where: str, name: Any) -> None:
    if not plain_name(name):
        raise CompileCacheRefused(
            f"{label} refused: its Triton kernels entry names {where} {name!r}, not a plain name (allowed: 1-{NAME_MAX} "
            "letters, digits, '_', '-', '.', not starting with '.'; no '/', '..' or absolute path): a tampered or "
            "foreign bundle; nothing was written. Rebuild the bundle with ik.serving.save_serving_bundle"
        )


def _check_group(label: str, where: str, name: str, data: bytes) -> None:
    problem = _group_problem(data)
    if problem is not None:
        raise CompileCacheRefused(
            f"{label} refused: its Triton kernels entry {where} file {name!r} names {problem!r}, not a file of its own "
            "directory: a tampered or foreign bundle; nothing was written. Rebuild the bundle with ik.serving.save_serving_bundle"
        )


def _group_problem(data: bytes) -> str | None:
    """The first path a ``__grp__`` file names outside its own directory (``PLACEHOLDER/<plain name>``), or None.

    Triton's ``FileCacheManager.put_group`` writes ``{"child_paths": {file name: absolute path}}`` and
    ``get_group`` reads those paths (``triton/runtime/cache.py``).
    """
    try:
        children = json.loads(data)["child_paths"]
        bad = [str(p) for c, p in children.items() if not plain_name(c) or p != f"{PLACEHOLDER}/{c}"]
    except (ValueError, KeyError, TypeError, AttributeError):
        return "(not Triton's group JSON)"
    return bad[0] if bad else None


def _count(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value >= 0


def _torch_function(attribute: str) -> Any:
    """The torch function :class:`~inductor_knobs.patches.hooks.TorchHooks` names as ``attribute``, or None."""
    from ..ext import resolve, torch_compat

    try:
        owner, name = resolve(getattr(torch_compat.installed(), attribute))
        return getattr(owner, name)
    except (ImportError, AttributeError):
        return None
