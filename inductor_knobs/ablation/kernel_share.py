"""Triton binaries the later repeats of an ablation build once between them: Triton cache managers
(``TRITON_CACHE_MANAGER``).

Triton's cache holds compiled binaries keyed by the kernel's source, compile options and target; reusing one replays
no choice (every process still traces, lowers, autotunes and picks its own kernels).  Two workers that compile the
same kernel at the same time would each build it; with these managers the later repeats build each binary at most once
between them (each repeat 0 still builds its own), waiting for one another and for the repeats 0:

- **A later repeat** (:class:`SharedKernels`, ``TRITON_CACHE_DIR`` the ablation's shared directory) reads what any
  worker has published.  On a miss it claims the kernel (an exclusive ``flock`` on a file of its own under
  ``.claims/``, which the kernel releases if the process dies) and compiles it; if another worker holds the claim,
  it waits for that worker's binary instead, and compiles it itself if the claim is released without one, goes
  :data:`STALE_S` seconds without a sign of progress, or is held longer than :data:`WAIT_S`.
- **Repeat 0** (:class:`PublishedKernels`, ``TRITON_CACHE_DIR`` its private directory) compiles every kernel itself
  and waits for nothing, so its compile time stays the arm's price with empty caches.  It claims each kernel it
  compiles where no one else has (never waiting), and publishes the binary into the shared directory
  (:data:`SHARED_DIR_VAR`) as soon as it is built, so that later repeats running beside it wait for it rather than
  build it again.

A compile calls ``get_group`` for the kernel's metadata file first and ``put_group`` for it last, with ``put`` for
each stage in between (``triton/compiler/compiler.py: compile``, the same in the Triton 3.0, 3.2, 3.6 and 3.9
wheels): the claim is taken at that ``get_group``, its file touched at every ``put`` of that kernel (the waiters'
sign of progress), and released at ``put_group``.  A thread compiles one kernel at a time, so a thread's next
``get_group`` releases any claim it still holds (a compile that raised), and every ``get_group`` releases the claims
of threads that have ended (a compile pool's thread).  A claimant never waits while it holds a claim, so no two
workers wait for each other.

Published files are written under temporary names and renamed, the group file last: a reader sees a whole kernel or
none.  The shared manager finds a group's files by name in its own directory, wherever the group says they were
written.  Nothing here raises into Triton: where a claim cannot be taken (a file system without ``flock``, a claim
file that cannot be made) the worker compiles at once, unclaimed, and a publication that fails (a full disk) is
left out, as Triton's own manager would leave both.

:func:`counts` says what this process's managers did (kernels built, reused, waited for), for the run's record.
Imported by Triton in the worker (``TRITON_CACHE_MANAGER=inductor_knobs.ablation.kernel_share:SharedKernels``);
Triton 3.0-3.9 keep ``FileCacheManager`` (``triton/runtime/cache.py``) with ``get_group``/``put_group``/``put``.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import json
import math
import os
import threading
import time
import uuid
from collections import Counter
from collections.abc import Iterable
from typing import Any

#: The shared directory a :class:`PublishedKernels` worker publishes into (set by the parent for repeat 0).
SHARED_DIR_VAR = "IK_ABLATION_SHARED_KERNELS"

#: Triton's variables for the cache manager's class and its directory.
MANAGER_VAR, DIR_VAR = "TRITON_CACHE_MANAGER", "TRITON_CACHE_DIR"

#: The claims' directory under the shared directory.
CLAIMS = ".claims"

#: Seconds a waiter waits at most for one kernel; without a ``put`` (a compile stage finished) for
#: :data:`STALE_S` the claimant is taken to be stuck.  In the main job (16 workers compiling, one H200 node, Triton
#: 3.6) the later repeats waited 1.1-1.2 s per kernel on average.
WAIT_S, STALE_S = 120.0, 30.0

#: Seconds between two looks at a held claim.
POLL_S = 0.02

#: ``(clock, sleep, wall)``: the waits' clock and the claim files' (a test injects its own).
clock, sleep, wall = time.monotonic, time.sleep, time.time

_counts: Counter[str] = Counter()
_counts_lock = threading.Lock()

#: The claims this process holds: thread ident -> {claim path: descriptor}.  A thread's claims are released at its
#: next lookup; those of threads that have ended (a compile pool's thread after a compile that raised) at any
#: thread's next lookup.  A thread Python does not list (started from C, never named to :mod:`threading`) counts as
#: ended: its claim may be released early, and another worker then builds the kernel too.
_claims: dict[int, dict[str, int]] = {}
_claims_lock = threading.Lock()

#: What :func:`_try_claim` says when another worker holds the claim (any other failure: no claims here).
HELD = -1


def counts() -> dict[str, int]:
    """What this process's managers did so far (compiles in Inductor's compile subprocesses, with more than one
    compile thread, are their own processes' and not counted here).

    Returns:
        dict[str, int]: ``built`` (kernels compiled here), ``reused`` (found built), ``waited`` (found built after
        waiting for another worker's claim), ``wait_ms`` (the waits, in milliseconds), ``published`` (kernels
        a cold worker copied into the shared directory); only the nonzero ones.
    """
    with _counts_lock:
        return {k: v for k, v in _counts.items() if v}


def _count(name: str, by: int = 1) -> None:
    with _counts_lock:
        _counts[name] += by


def _close(fds: Iterable[int]) -> None:
    for fd in fds:
        with contextlib.suppress(OSError):
            os.close(fd)  # closing the only descriptor releases its flock


def _release_mine() -> None:
    """Release every claim this thread holds (its compile has ended, either way), and those of ended threads."""
    with _claims_lock:  # the threads listed while no thread can register a claim (each registers before it compiles)
        alive = {thread.ident for thread in threading.enumerate()}
        gone = [ident for ident in _claims if ident == threading.get_ident() or ident not in alive]
        released = [_claims.pop(ident) for ident in gone]
    _close(fd for held in released for fd in held.values())


def _release(path: str) -> None:
    with _claims_lock:
        fd = _claims.get(threading.get_ident(), {}).pop(path, None)
    if fd is not None:
        _close([fd])


def _forget_after_fork() -> None:
    """In a forked child: the claims are the parent's (the child closes its copies and holds none), and the locks are
    new (another thread of the parent may have held one at the fork)."""
    global _claims_lock, _counts_lock
    _claims_lock, _counts_lock = threading.Lock(), threading.Lock()
    held = list(_claims.values())
    _claims.clear()
    _close(fd for fds in held for fd in fds.values())


os.register_at_fork(after_in_child=_forget_after_fork)


def _try_claim(path: str) -> int | None:
    """An exclusive flock on ``path`` (made if missing), without waiting: its descriptor; :data:`HELD` when another
    descriptor holds it; None when claims cannot be taken here (the file cannot be made, or the file system has no
    ``flock``)."""
    try:
        fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o600)
    except OSError:
        return None
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError as error:
        os.close(fd)
        return HELD if error.errno in (errno.EWOULDBLOCK, errno.EAGAIN) else None
    return fd


def _keep(path: str, fd: int) -> None:
    """Hold the claim ``fd`` on ``path`` in this thread, its file touched (the claim file may be an old one)."""
    with _claims_lock:
        _claims.setdefault(threading.get_ident(), {})[path] = fd
    _touch(path)


def _touch_mine(key: str) -> None:
    """Show progress on this thread's claims of the kernel ``key`` (the manager's)."""
    with _claims_lock:
        paths = [path for path in _claims.get(threading.get_ident(), {}) if os.path.basename(path).startswith(f"{key}.")]
    for path in paths:
        _touch(path)


def _touch(path: str) -> None:
    with contextlib.suppress(OSError):
        os.utime(path)


def __getattr__(name: str) -> Any:
    """``SharedKernels`` and ``PublishedKernels``, made on first use: they subclass Triton's ``FileCacheManager``, so
    only a process that names them (a worker, through ``TRITON_CACHE_MANAGER``) imports Triton."""
    if name in ("SharedKernels", "PublishedKernels"):
        classes = _classes()
        globals().update(classes)
        return classes[name]
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def _classes() -> dict[str, type]:
    from triton.runtime.cache import FileCacheManager

    class Kernels(FileCacheManager):  # type: ignore[misc]
        """Triton's file cache manager with a claim per kernel under ``shared`` (None: none, Triton's own)."""

        def __init__(self, key: str, override: bool = False, dump: bool = False) -> None:
            super().__init__(key, override=override, dump=dump)
            self.plain = override or dump  # Triton's override and dump directories are not the cache
            self.shared: str | None = None

        def claim_path(self, filename: str) -> str | None:
            """The claim file of ``filename`` (a kernel's metadata), or None where there are no claims."""
            if self.plain or not self.shared or not filename.endswith(".json"):
                return None
            directory = os.path.join(self.shared, CLAIMS)
            with contextlib.suppress(OSError):
                os.makedirs(directory, exist_ok=True)
            return os.path.join(directory, f"{self.key}.{filename}")

        def put(self, data: Any, filename: str, binary: bool = True) -> str:
            """Triton's ``put``; a kernel compiled under a claim shows progress (its claim file touched)."""
            path = super().put(data, filename, binary=binary)
            _touch_mine(self.key)
            return path  # type: ignore[no-any-return]

        def put_group(self, filename: str, group: dict[str, str]) -> str:
            """Triton's ``put_group`` (then :meth:`built`); the kernel's claim released however it ends."""
            try:
                path = super().put_group(filename, group)
                self.built(filename, group)
                return path  # type: ignore[no-any-return]
            finally:
                claim = self.claim_path(filename)
                if claim is not None:
                    _release(claim)

        def built(self, filename: str, group: dict[str, str]) -> None:
            """What a subclass does with a kernel it has built, before its claim is released."""

    class SharedKernels(Kernels):
        """A later repeat's manager: reads the shared directory (``TRITON_CACHE_DIR``), claims or waits on a miss
        (module docstring).

        Args:
            key (str): the kernel's key (Triton's).
            override, dump (bool): Triton's override or dump directory (no claims there).
        """

        def __init__(self, key: str, override: bool = False, dump: bool = False) -> None:
            super().__init__(key, override=override, dump=dump)
            self.shared = None if self.plain else os.path.dirname(self.cache_dir)

        def get_group(self, filename: str) -> dict[str, str] | None:
            """The kernel's files: found, waited for, or None with the kernel claimed (the caller compiles it)."""
            _release_mine()
            claim = self.claim_path(filename)
            if claim is None:
                return super().get_group(filename)  # type: ignore[no-any-return]
            start, waited = clock(), False
            while True:
                group = self.whole_group(filename)  # built (while a claimant that raised may still hold the claim)
                if group is not None:
                    break
                fd = _try_claim(claim)
                if fd is None:
                    break  # no claims here: compile it, unclaimed
                if fd != HELD:
                    group = self.whole_group(filename)  # built between the look and the claim
                    if group is None:
                        _keep(claim, fd)
                    else:
                        os.close(fd)
                    break
                waited = True
                waiting = clock() - start
                if waiting >= WAIT_S or min(waiting, _quiet_seconds(claim)) >= STALE_S:
                    break  # the claimant is stuck: compile it here, unclaimed
                sleep(POLL_S)
            if waited:
                _count("wait_ms", round((clock() - start) * 1000))
            _count("built" if group is None else "waited" if waited else "reused")
            return group

        def whole_group(self, filename: str) -> dict[str, str] | None:
            """The group of ``filename`` here, its files found here by name (wherever the group was written), or None
            where it or one of its files is missing."""
            try:
                with open(self._make_path(f"__grp__{filename}")) as f:
                    children = json.load(f).get("child_paths")
            except (OSError, ValueError, AttributeError):
                return None
            if not isinstance(children, dict) or filename not in children:
                return None
            group = {name: self._make_path(os.path.basename(name)) for name in children}
            return group if all(map(os.path.exists, group.values())) else None

    class PublishedKernels(Kernels):
        """Repeat 0's manager: compiles into its private directory (``TRITON_CACHE_DIR``), waits for nothing, and
        publishes each kernel it builds into the shared directory (:data:`SHARED_DIR_VAR`), under a claim where no one
        else holds one (module docstring).

        Args:
            key (str): the kernel's key (Triton's).
            override, dump (bool): Triton's override or dump directory (no claims there).
        """

        def __init__(self, key: str, override: bool = False, dump: bool = False) -> None:
            super().__init__(key, override=override, dump=dump)
            self.shared = os.environ.get(SHARED_DIR_VAR, "").strip() or None

        def get_group(self, filename: str) -> dict[str, str] | None:
            """Triton's own answer from the private directory; on a miss the kernel is claimed if no one holds it."""
            _release_mine()
            group = super().get_group(filename)
            claim = self.claim_path(filename)
            if claim is not None and not (group or {}).get(filename):
                _count("built")
                fd = _try_claim(claim)
                if fd is not None and fd != HELD:
                    _keep(claim, fd)
            return group  # type: ignore[no-any-return]

        def built(self, filename: str, group: dict[str, str]) -> None:
            """The kernel's files copied into the shared directory, the group file last; nothing where it is there
            or the copy fails."""
            if self.claim_path(filename) is None or self.shared is None:
                return
            target = os.path.join(self.shared, self.key)
            if os.path.exists(os.path.join(target, f"__grp__{filename}")):
                return
            try:
                os.makedirs(target, exist_ok=True)
                names = {name: os.path.join(target, name) for name in group}
                for name, source in group.items():
                    _place(source, names[name])
                _place(json.dumps({"child_paths": names}).encode(), os.path.join(target, f"__grp__{filename}"))
            except OSError:
                return
            _count("published")

    return {"SharedKernels": SharedKernels, "PublishedKernels": PublishedKernels}


def _quiet_seconds(claim: str) -> float:
    """Seconds since the claimant of ``claim`` last showed progress (infinite where the file cannot be read: no one
    shows progress there)."""
    try:
        return max(0.0, wall() - os.stat(claim).st_mtime)
    except OSError:
        return math.inf


def _place(source: str | bytes, target: str) -> None:
    """A file's contents (``source``: a path, hard-linked or copied, or the bytes) at ``target``, whole or not at all:
    written under a temporary name, then renamed."""
    temporary = f"{target}.tmp.{os.getpid()}.{uuid.uuid4().hex}"
    try:
        if isinstance(source, bytes):
            _write_at(temporary, source)
        else:
            try:
                os.link(source, temporary)
            except OSError:
                with open(source, "rb") as f:
                    _write_at(temporary, f.read())
        os.replace(temporary, target)
    finally:
        with contextlib.suppress(OSError):
            os.unlink(temporary)


def _write_at(path: str, data: bytes) -> None:
    with open(path, "wb") as f:
        f.write(data)


def in_use() -> bool:
    """Whether this process's Triton cache manager is one of this module's (:func:`worker_vars` set it)."""
    return os.environ.get(MANAGER_VAR, "").startswith(f"{__name__}:")


def worker_vars(shared: str, cold: bool) -> dict[str, str]:
    """The variables of a worker that shares Triton binaries through the directory ``shared``.

    Args:
        shared (str): the ablation's shared kernel directory.
        cold (bool): the worker compiles with empty caches (its own ``TRITON_CACHE_DIR``, which the caller sets) and
            publishes into ``shared``; else ``shared`` is its ``TRITON_CACHE_DIR``.

    Returns:
        dict[str, str]: ``TRITON_CACHE_MANAGER``, and :data:`SHARED_DIR_VAR` or ``TRITON_CACHE_DIR``.
    """
    if cold:
        return {MANAGER_VAR: f"{__name__}:PublishedKernels", SHARED_DIR_VAR: shared}
    return {MANAGER_VAR: f"{__name__}:SharedKernels", DIR_VAR: shared}
