"""CUTLASS for Inductor from the ``nvidia-cutlass`` wheel, for users without a CUTLASS checkout.

Inductor reads a CUTLASS *checkout* at ``cuda.cutlass_dir`` (torch 2.4–2.10) or ``cutlass.cutlass_dir``
(2.11+, :meth:`TorchPatches.cutlass_dir_key`); under it (2.13, 2.15):

- ``torch/_inductor/codegen/cutlass/utils.py:try_import_cutlass`` links ``<dir>/python/{cutlass_library,
  cutlass_cppgen,pycute}`` into the cache, appends that to ``sys.path`` and imports them (2.4: only
  ``cutlass_library``, ``codegen/cuda/cutlass_utils.py``);
- ``torch/_inductor/codegen/cuda/compile_utils.py:_cutlass_paths`` puts ``<dir>/include`` and
  ``<dir>/tools/{library/include,library/src,util/include}`` on nvcc's include path.

The wheel (4.2.0.0) has those packages top-level and the C++ under ``cutlass_library/source``;
:func:`resolve` makes a private directory of links with the checkout's layout under :func:`cache_root`.
"""

from __future__ import annotations

import contextlib
import errno
import hashlib
import importlib.util
import os
import re
import secrets
import stat
from collections.abc import Mapping
from dataclasses import dataclass
from importlib import metadata
from typing import NoReturn

from ..errors import PipCutlassUnavailable
from .files import unsafe_directories, who

DISTRIBUTION = "nvidia-cutlass"
INSTALL_HINT = "pip install 'inductor-knobs[cutlass]'"
#: The top-level packages torch imports (``try_import_cutlass``), each linked under ``python/``.
PACKAGES = ("cutlass_library", "cutlass_cppgen", "pycute")
#: Directories of the wheel's ``cutlass_library/source`` that torch passes to nvcc (``_cutlass_paths``).
SOURCE_DIRS = ("include/cutlass", "include/cute", "tools/library/include", "tools/library/src", "tools/util/include")
#: Bumped whenever :func:`layout` changes, so a directory of an older layout is never reused.
LAYOUT_VERSION = 1


@dataclass(frozen=True)
class Installed:
    """An installed ``nvidia-cutlass``: its version and the real path of its ``site-packages``."""

    version: str
    site: str


@dataclass(frozen=True)
class PipCutlass:
    """The generated directory (real path; the config key's value) and its links (relative path -> target).

    ``ready``: it exists and passed the checks (False only from ``resolve(create=False)`` before it is made).
    """

    version: str
    site: str
    directory: str
    links: Mapping[str, str]
    ready: bool


def find_distribution() -> Installed | None:
    """The ``nvidia-cutlass`` on ``sys.path`` (``importlib.metadata``, imports nothing), or None."""
    dist: metadata.Distribution | None
    try:
        dist = metadata.distribution(DISTRIBUTION)
    except metadata.PackageNotFoundError:
        # Installers spell the dist-info name differently (nvidia_cutlass, NVIDIA_Cutlass): compare PEP 503 names.
        names = ((d, re.sub(r"[-_.]+", "-", d.metadata["Name"] or "").lower()) for d in metadata.distributions())
        dist = next((d for d, normalized in names if normalized == DISTRIBUTION), None)
    if dist is None:
        return None
    site = os.path.dirname(str(dist.locate_file(PACKAGES[0])))
    return Installed(version=str(dist.version), site=os.path.realpath(site))


def layout(site: str) -> dict[str, str]:
    """Checkout path -> wheel path: ``include``, ``tools`` and ``python/<package>`` for each of :data:`PACKAGES`."""
    source = os.path.join(site, "cutlass_library", "source")
    links = {name: os.path.join(source, name) for name in ("include", "tools")}
    links.update({f"python/{package}": os.path.join(site, package) for package in PACKAGES})
    return links


def entry_name(installed: Installed) -> str:
    """``<version>-<digest of site and LAYOUT_VERSION>``: no two environments or layouts share a directory."""
    digest = hashlib.sha256(f"{LAYOUT_VERSION}\0{installed.site}".encode()).hexdigest()[:16]
    return f"{re.sub(r'[^0-9A-Za-z._+-]', '_', installed.version)}-{digest}"


def resolve(*, create: bool = True) -> PipCutlass:
    """The checkout-shaped directory of links to ``nvidia-cutlass``, made (cache root mode 0700) if needed.

    Args:
        create (bool): make what is missing; False (``doctor``) returns ``ready=False`` instead.

    Raises:
        PipCutlassUnavailable: not installed (``missing=True``); a package or source dir torch needs is
            missing or shadowed on ``sys.path``; the cache or its parents are not private; the directory
            differs from :func:`layout`; an OS error; no POSIX ownership (Windows).
    """
    if not hasattr(os, "geteuid"):
        raise PipCutlassUnavailable("CUTLASS from nvidia-cutlass needs POSIX file ownership (Linux); it is not supported here")
    installed = find_distribution()
    if installed is None:
        raise PipCutlassUnavailable(f"{DISTRIBUTION} is not installed in this environment", missing=True)
    _check_installed(installed)
    links = layout(installed.site)
    name = entry_name(installed)
    uid = os.geteuid()
    root = cache_root()
    try:
        opened = _open_root(root, uid, create)
        if opened is None:  # create=False and no cache root yet
            return PipCutlass(installed.version, installed.site, os.path.join(root, name), links, ready=False)
        real_root, root_fd = opened
        try:
            directory = os.path.join(real_root, name)
            if not _exists(name, root_fd):
                if not create:
                    return PipCutlass(installed.version, installed.site, directory, links, ready=False)
                _create(root_fd, name, links)
            problems = _verify(root_fd, name, directory, links, uid)
        finally:
            os.close(root_fd)
    except OSError as err:
        raise PipCutlassUnavailable(f"cannot make or check the CUTLASS cache under {root}: {err}") from err
    if problems:
        raise PipCutlassUnavailable(
            f"the generated CUTLASS directory {directory} cannot be trusted: {'; '.join(problems)}. inductor_knobs "
            f"makes it with only the links {sorted(links)}; remove it (rm -r {directory}) and it is made again"
        )
    return PipCutlass(installed.version, installed.site, directory, links, ready=True)


def describe(checkout_found: bool, cutlass_dir: str, key: str, gpu_ok: bool) -> str:
    """``doctor``'s CUTLASS line (``usable: …``, ``not usable here: …``, ``not usable: … Fix: …``); makes nothing."""
    if checkout_found:
        where = f"CUTLASS checkout at {cutlass_dir} ({key})"
        return f"usable: {where}" if gpu_ok else f"not usable here: needs an NVIDIA GPU ({where})"
    try:
        found = resolve(create=False)
    except PipCutlassUnavailable as err:
        gpu = "" if gpu_ok else "; it also needs an NVIDIA GPU"
        return (
            f"not usable: no CUTLASS checkout at {key} (now {cutlass_dir!r}) and {err}. Fix: {INSTALL_HINT}, or point "
            f"{key} (or TORCHINDUCTOR_CUTLASS_DIR) at a CUTLASS checkout{gpu}"
        )
    made = "" if found.ready else " (made on first use)"
    where = (
        f"from {DISTRIBUTION} {found.version} at generated dir {found.directory}{made}; knobs asking for CUTLASS set {key} to it"
    )
    return f"usable: {where}" if gpu_ok else f"not usable here: needs an NVIDIA GPU (CUTLASS would come {where})"


def _check_installed(installed: Installed) -> None:
    """Raise unless the wheel has every package and source directory torch reads, and they are the ones imported."""
    where = f"{DISTRIBUTION} {installed.version} at {installed.site}"
    source = os.path.join(installed.site, "cutlass_library", "source")
    lacking = [p for p in PACKAGES if not os.path.isfile(os.path.join(installed.site, p, "__init__.py"))]
    lacking += [f"cutlass_library/source/{d}" for d in SOURCE_DIRS if not os.path.isdir(os.path.join(source, d))]
    if lacking:
        raise PipCutlassUnavailable(
            f"{where} lacks {', '.join(lacking)}, which torch reads (cutlass_cppgen needs {DISTRIBUTION} 4.2 or newer); "
            f"reinstall it: pip install --force-reinstall '{DISTRIBUTION}>=4.2'"
        )
    for package in PACKAGES:
        # try_import_cutlass appends its links to the END of sys.path: an earlier package of the name wins.
        try:
            spec = importlib.util.find_spec(package)  # top-level: imports nothing
        except (ImportError, ValueError):
            spec = None
        locations = list(spec.submodule_search_locations or []) if spec is not None else []
        if locations and os.path.realpath(locations[0]) != os.path.join(installed.site, package):
            raise PipCutlassUnavailable(
                f"{package} imports from {locations[0]}, not from {where}: torch would mix that package with "
                f"{DISTRIBUTION}'s headers. Remove the other {package} from sys.path (PYTHONPATH), or point the CUTLASS "
                "directory at the checkout it comes from"
            )


_DIR_FLAGS = os.O_RDONLY | getattr(os, "O_DIRECTORY", 0) | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_CLOEXEC", 0)


def cache_root() -> str:
    """``$XDG_CACHE_HOME/inductor_knobs/cutlass`` (``~/.cache`` when unset or relative); raises without a home."""
    base = os.environ.get("XDG_CACHE_HOME", "")
    if not os.path.isabs(base):  # the XDG spec: a relative value is invalid and is ignored
        home = os.path.expanduser("~")
        if not os.path.isabs(home):
            raise PipCutlassUnavailable("there is no home directory for the CUTLASS cache (set HOME or XDG_CACHE_HOME)")
        base = os.path.join(home, ".cache")
    return os.path.join(base, "inductor_knobs", "cutlass")


def _open_root(root: str, uid: int, create: bool) -> tuple[str, int] | None:
    """Make (if ``create``) and check the cache root: its real path and an ``O_NOFOLLOW`` descriptor, or None."""
    if create:
        _make_private_dirs(root)
    elif not os.path.lexists(root):
        return None
    problems = unsafe_directories(root, uid, label=f"the CUTLASS cache {root}", error=PipCutlassUnavailable)
    if problems:
        _refuse_root(root, problems)
    # After the walk only root and uid can change where ``root`` leads, so its real path is stable.
    real_root = os.path.realpath(root)
    fd = os.open(real_root, _DIR_FLAGS)
    try:
        problems = _private_problems(os.fstat(fd), real_root, uid)
        if problems:
            _refuse_root(root, problems)
    except BaseException:
        os.close(fd)
        raise
    return real_root, fd


def _make_private_dirs(path: str) -> None:
    """``mkdir -p`` with mode 0700 for every directory made (``os.makedirs`` gives parents the umask's)."""
    missing = []
    while not os.path.lexists(path):
        missing.append(path)
        parent = os.path.dirname(path)
        if parent == path:
            break
        path = parent
    for directory in reversed(missing):
        # Another process may make it first; the checks that follow judge whatever is there.
        with contextlib.suppress(FileExistsError):
            os.mkdir(directory, 0o700)


def _private_problems(st: os.stat_result, path: str, uid: int) -> list[str]:
    problems = []
    if st.st_uid != uid:
        problems.append(f"{path} is owned by {who(st.st_uid)}, not by you, {who(uid)}")
    if not stat.S_ISLNK(st.st_mode) and st.st_mode & (stat.S_IWGRP | stat.S_IWOTH):
        problems.append(f"{path} is writable by group or others (mode {stat.S_IMODE(st.st_mode):o})")
    return problems


def _refuse_root(root: str, problems: list[str]) -> NoReturn:
    raise PipCutlassUnavailable(
        f"the CUTLASS cache {root} is not private: {'; '.join(problems)}; torch would compile and import whatever "
        f"the links there point at. Fix: chown the cache to yourself and chmod 700 it (chmod go-w the directories above "
        "it), or set XDG_CACHE_HOME to a private directory"
    )


def _exists(name: str, root_fd: int) -> bool:
    try:
        os.lstat(name, dir_fd=root_fd)
    except FileNotFoundError:
        return False
    return True


def _create(root_fd: int, name: str, links: Mapping[str, str]) -> None:
    """Make ``name``: links in a temporary directory, then one ``rename`` (a lost race or a foreign entry is
    left for :func:`_verify` to judge)."""
    tmp = f".{name}.tmp-{os.getpid()}-{secrets.token_hex(4)}"
    os.mkdir(tmp, 0o700, dir_fd=root_fd)
    renamed = False
    try:
        tmp_fd = os.open(tmp, _DIR_FLAGS, dir_fd=root_fd)
        try:
            for sub in sorted({rel.split("/")[0] for rel in links if "/" in rel}):
                os.mkdir(sub, 0o700, dir_fd=tmp_fd)
            for rel, target in links.items():
                os.symlink(target, rel, dir_fd=tmp_fd)
        finally:
            os.close(tmp_fd)
        try:
            os.rename(tmp, name, src_dir_fd=root_fd, dst_dir_fd=root_fd)
            renamed = True
        except OSError as err:
            # ENOTEMPTY/EEXIST: another process renamed its directory first; ENOTDIR: a link or file is there.
            if err.errno not in (errno.ENOTEMPTY, errno.EEXIST, errno.ENOTDIR):
                raise
    finally:
        if not renamed:
            _remove_tmp(root_fd, tmp, links)


def _remove_tmp(root_fd: int, tmp: str, links: Mapping[str, str]) -> None:
    """Remove :func:`_create`'s temporary directory (only its own entries; best effort)."""
    with contextlib.suppress(OSError):
        tmp_fd = os.open(tmp, _DIR_FLAGS, dir_fd=root_fd)
        try:
            for rel in links:
                with contextlib.suppress(FileNotFoundError):
                    os.unlink(rel, dir_fd=tmp_fd)
            for sub in {rel.split("/")[0] for rel in links if "/" in rel}:
                with contextlib.suppress(FileNotFoundError):
                    os.rmdir(sub, dir_fd=tmp_fd)
        finally:
            os.close(tmp_fd)
        os.rmdir(tmp, dir_fd=root_fd)


def _verify(root_fd: int, name: str, directory: str, links: Mapping[str, str], uid: int) -> list[str]:
    """Why ``name`` is not exactly what :func:`_create` makes (private real dirs, ``uid``'s links, exact targets)."""
    try:
        fd = os.open(name, _DIR_FLAGS, dir_fd=root_fd)
    except OSError as err:
        if err.errno not in (errno.ELOOP, errno.EMLINK, errno.ENOTDIR):
            raise
        st = os.lstat(name, dir_fd=root_fd)
        if stat.S_ISLNK(st.st_mode):
            target = os.readlink(name, dir_fd=root_fd)
            return [f"{directory} is a symbolic link (to {target!r}, owned by {who(st.st_uid)}), not a directory"]
        return [f"{directory} is not a directory (mode {st.st_mode:o})"]
    try:
        problems = _private_problems(os.fstat(fd), directory, uid)
        _check_entries(fd, directory, {rel.split("/")[0] for rel in links}, problems)
        usable_subs = set()
        for sub in sorted({rel.split("/")[0] for rel in links if "/" in rel}):
            if sub not in os.listdir(fd):
                continue  # _check_entries named it
            st = os.lstat(sub, dir_fd=fd)
            if not stat.S_ISDIR(st.st_mode):
                problems.append(f"{directory}/{sub} is not a directory (mode {st.st_mode:o})")
                continue
            problems += _private_problems(st, f"{directory}/{sub}", uid)
            sub_fd = os.open(sub, _DIR_FLAGS, dir_fd=fd)
            try:
                expected = {rel.split("/", 1)[1] for rel in links if rel.startswith(f"{sub}/")}
                _check_entries(sub_fd, f"{directory}/{sub}", expected, problems)
            finally:
                os.close(sub_fd)
            usable_subs.add(sub)
        for rel, target in links.items():
            if "/" in rel and rel.split("/")[0] not in usable_subs:
                continue
            try:
                st = os.lstat(rel, dir_fd=fd)
            except FileNotFoundError:
                continue  # _check_entries named it
            if not stat.S_ISLNK(st.st_mode):
                problems.append(f"{directory}/{rel} is not a symbolic link (mode {st.st_mode:o})")
                continue
            problems += _private_problems(st, f"{directory}/{rel}", uid)
            found = os.readlink(rel, dir_fd=fd)
            if found != target:
                problems.append(f"{directory}/{rel} points to {found!r}, not {target!r}")
    finally:
        os.close(fd)
    return problems


def _check_entries(fd: int, path: str, expected: set[str], problems: list[str]) -> None:
    found = set(os.listdir(fd))
    if found - expected:
        problems.append(f"{path} holds unexpected entries {sorted(found - expected)}")
    if expected - found:
        problems.append(f"{path} lacks {sorted(expected - found)}")
