"""The private directory of links that :mod:`inductor_knobs.core.cutlass_pip` hands torch as its CUTLASS directory.

It lives in the user's cache, ``$XDG_CACHE_HOME/inductor_knobs/cutlass/<version>-<digest>``
(``~/.cache`` without ``XDG_CACHE_HOME``).  The directory is handed to torch, which compiles and
loads whatever it points at, so it is made and reused only where no one else can change it: every
directory on the way to the cache root belongs to root or the current user and is not writable by
others unless sticky (the rule :mod:`inductor_knobs.serving.compile_cache` applies,
:mod:`inductor_knobs.core._safe_paths`); the root itself belongs to the current user and is not
writable by group or others; the directory is made under a temporary name and renamed into place in
one step; a directory found there is opened without following a symbolic link and must hold exactly
the expected links with exactly the expected targets (``readlink``) before it is used again.
POSIX only (``dir_fd``, ``O_NOFOLLOW``, ownership).
"""

from __future__ import annotations

import contextlib
import errno
import os
import secrets
import stat
from collections.abc import Mapping
from typing import NoReturn

from ..errors import PipCutlassUnavailable
from ._safe_paths import unsafe_directories, who

_DIR_FLAGS = os.O_RDONLY | getattr(os, "O_DIRECTORY", 0) | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_CLOEXEC", 0)


def cache_root() -> str:
    """``$XDG_CACHE_HOME/inductor_knobs/cutlass``, or ``~/.cache/inductor_knobs/cutlass`` when unset or relative.

    Raises:
        PipCutlassUnavailable: no home directory to put it in.
    """
    base = os.environ.get("XDG_CACHE_HOME", "")
    if not os.path.isabs(base):  # the XDG spec: a relative value is invalid and is ignored
        home = os.path.expanduser("~")
        if not os.path.isabs(home):
            raise PipCutlassUnavailable("there is no home directory for the CUTLASS cache (set HOME or XDG_CACHE_HOME)")
        base = os.path.join(home, ".cache")
    return os.path.join(base, "inductor_knobs", "cutlass")


def _open_root(root: str, uid: int, create: bool) -> tuple[str, int] | None:
    """Make (if ``create``) and check the cache root; return its real path and a descriptor on it.

    Returns None when ``create`` is False and the root does not exist.  The descriptor is opened
    without following a link at the last component, so it is on the directory that was checked.
    """
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
        st = os.fstat(fd)
        problems = _private_problems(st, real_root, uid)
        if problems:
            _refuse_root(root, problems)
    except BaseException:
        os.close(fd)
        raise
    return real_root, fd


def _make_private_dirs(path: str) -> None:
    """``mkdir -p`` with mode 0700 for every directory made (``os.makedirs`` gives the parents the umask's mode)."""
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
    """Why a directory or link we own is not private: another owner, or writable by group or others."""
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
    """Make ``name`` under the root: links in a temporary directory, then one ``rename`` into place.

    Losing a race to another process making the same directory is fine: its directory is then the
    one verified.  Anything else at the name (a symbolic link, a file) makes ``rename`` fail, and
    the verification that follows refuses it.
    """
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
    """Remove a temporary directory of :func:`_create` (only the entries it makes; best effort)."""
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
    """Problems with the directory ``name`` under the root; ``[]`` when it is exactly what :func:`_create` makes.

    It must be a real directory (opened with ``O_NOFOLLOW``) owned by ``uid`` and not writable by
    others, holding exactly the expected entries; each subdirectory likewise; each link owned by
    ``uid`` with ``readlink`` equal to its target, character for character.
    """
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
        tops = {rel.split("/")[0] for rel in links}
        _check_entries(fd, directory, tops, problems)
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
