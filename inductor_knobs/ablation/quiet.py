"""Latency measured in quiet: no process of the ablation on this host compiles while another measures.

The local executor's workers compile several at a time (``--parallel``), so a worker that measured as
soon as it had compiled would measure beside others that compile, import and autotune, all CPU work
that a host-bound latency feels.  So every run goes through a phase barrier (:class:`Quiet`):

1. **Compile.**  A job thread asks :meth:`Quiet.admit` before it starts a worker on its lane (one GPU,
   or the CPU).  The host compiles up to ``parallel`` workers per lane at once, on whichever lanes their
   jobs are (compiling is CPU work on the host's shared CPUs, and a lane may hold more jobs than
   another: repeats are blocked by GPU, :func:`.plan.gpu_for_repeat`); a lane holds up to ``cap`` live
   workers (its GPU's memory).
2. **Ready.**  A worker that has compiled (and compared with eager) connects to the barrier's socket,
   says ``ready`` and waits: it has released its compile slot, so the lane may admit the next job.  The
   wait is the worker's ``wait`` phase; ``compile_seconds`` ended before it.
3. **Measure.**  When no worker of the ablation is compiling (every live worker is ready, measuring
   or done), no other work of the ablation holds the phase (:meth:`Quiet.hold`), and none can be
   admitted (every lane holds ``cap`` live workers or has started all its
   jobs), the barrier lets the ready workers measure one at a time on the whole host, in plan order
   (the rank each was given, :meth:`Quiet.rank`: its job's index; else the order they became ready),
   each pinned to its lane's CPUs, and admits nothing.  A worker says ``measured``
   after its samples and its profiling; then the next one goes.  (Lanes measuring at once made the
   latency intervals of the main job on 4 GPUs up to 4 times wider than on one GPU, on a 4xH200 host;
   a measurement takes well under a second, so one at a time costs little.)
4. When every ready worker has measured, admission opens again: the next batch.

``cap`` (:func:`live_cap`): ``parallel`` when it is 1 (compile, measure, next), else
``2 × parallel``, at most what the host's available memory allows at :data:`GIB_PER_WORKER` per live
worker and what the GPU's memory allows at :data:`GPU_GIB_PER_WORKER`, and balanced so that the batches
are about equal.  Every batch ends with compile slots idle while its slowest worker compiles, so fewer
batches are faster once the autotune turns are short: on a one-H100 node (torch 2.11) the main job's 18
runs with 6 compiling at once took 162-179 s in two batches of 9 and 155 s in one batch of 18
(:mod:`.main_job` chooses 9 at once there, one batch: 132 s).  (With one autotune turn per GEMM shape, held
for up to 18 s, more live workers were slower: 247 s in two batches of 9 against 200 s in three of 6 on a
4xH200 host.)  A waiting worker holds its
memory (and on a GPU its CUDA context and model): ``--parallel 1`` keeps one at a time.

The worker measures pinned to its lane's CPUs (:func:`lane_cpus`: the CPUs this process may use,
split evenly between the lanes), sent with ``go``.  A worker that dies, or is killed at its timeout,
at any step leaves the barrier through its job thread (:meth:`Quiet.finished`) or the end of its
connection, so nobody waits for it.  :meth:`Quiet.close` (an interruption) wakes every thread and
closes every connection.

The socket is an abstract-namespace Unix socket (Linux): no file to leave behind in ``$TMPDIR``;
each job is given a random token that it presents with ``ready``.  An abstract socket has no file
permissions, so any local user could connect: the barrier reads each connection's peer with
``SO_PEERCRED`` (:func:`peer_uid`, socket(7)) and closes, unread, every connection from another
effective uid than this process's own (root's connections too, unless the ablation runs as root: its
workers are its own children and run as its user).  Each line a connection sends may be at most
:data:`MAX_LINE` bytes: the barrier buffers no more than that per connection and closes one that sends a
longer line (:class:`LineBuffer`).  Both are logged (``inductor_knobs.ablation.quiet``, a warning).
Standard library only.
"""

from __future__ import annotations

import itertools
import logging
import math
import os
import selectors
import socket
import struct
import threading
import time
import uuid
from collections.abc import Callable, Mapping
from typing import Any

from ..errors import KnobsError

log = logging.getLogger(__name__)

#: The longest line (bytes, without its newline) a worker may send the barrier; the longest it sends is
#: ``ready`` and a 32-character token.
MAX_LINE = 64 * 1024

#: GiB of host memory counted per live worker for :func:`live_cap` (a process holding torch, a
#: compiled model and, on a GPU, its CUDA context).
GIB_PER_WORKER = 4.0

#: GiB of GPU memory counted per live worker on a GPU for :func:`live_cap`: its CUDA context, model and autotune
#: buffers.  The main job's BERT-base workers peaked at 461 MiB in torch's allocator on an H100 (torch 2.11),
#: beside a CUDA context of several hundred MiB; 2 GiB keeps 18 live workers off a 24 GiB card (12 at most).
GPU_GIB_PER_WORKER = 2.0


def usable_cpus() -> int:
    """How many CPUs this process may run on: its affinity mask (``taskset``, a Slurm or container CPU
    set), not the machine's count, so that a run confined to 16 of 64 CPUs sizes its workers for 16.

    Returns:
        int: at least 1.
    """
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except (AttributeError, OSError):  # not Linux
        return os.cpu_count() or 1


def lane_cpus(lanes: int) -> list[list[int]]:
    """The CPUs of each lane: the CPUs this process may run on, split into ``lanes`` contiguous sets.

    Args:
        lanes (int): the number of lanes (GPUs used, or 1 on CPU).

    Returns:
        list[list[int]]: one CPU list per lane (lanes share CPUs only when there are fewer CPUs than
        lanes); empty lists where the OS cannot say.
    """
    try:
        allowed = sorted(os.sched_getaffinity(0))
    except (AttributeError, OSError):  # not Linux
        return [[] for _ in range(lanes)]
    if len(allowed) < lanes:
        return [[allowed[i % len(allowed)]] for i in range(lanes)]
    size = len(allowed) // lanes
    return [allowed[i * size : (i + 1) * size] for i in range(lanes)]


def _available_gib() -> float | None:
    """The host's available memory (``MemAvailable`` in ``/proc/meminfo``) in GiB, or None where it cannot be read."""
    try:
        with open("/proc/meminfo") as src:
            for line in src:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) / 2**20
    except (OSError, ValueError, IndexError):
        pass
    return None


def live_cap(parallel: int, jobs: int, lanes: int = 1, gpu_gib: float | None = None) -> int:
    """How many live workers a lane may hold (see the module docstring).

    Args:
        parallel (int): compiling workers per lane at once.
        jobs (int): the most jobs any one lane runs (all of them with one lane).
        lanes (int): the lanes (they share the host's memory).
        gpu_gib (float | None): the memory of the smallest GPU of the lanes, in GiB; None on CPU.

    Returns:
        int: at least ``parallel`` (and 1).
    """
    parallel = max(1, parallel)
    if parallel == 1:
        return 1
    cap = 2 * parallel
    held = memory_cap(lanes, gpu_gib)
    if held is not None:
        cap = min(cap, max(parallel, held))
    return max(parallel, equal_batch(max(1, jobs), cap))


def memory_cap(lanes: int = 1, gpu_gib: float | None = None) -> int | None:
    """How many live workers a lane's memory holds: the host's available memory shared by ``lanes`` at
    :data:`GIB_PER_WORKER` a worker, and the GPU's at :data:`GPU_GIB_PER_WORKER`; None where neither is known.

    Args:
        lanes (int): the lanes (they share the host's memory).
        gpu_gib (float | None): the memory of the smallest GPU of the lanes, in GiB; None on CPU.

    Returns:
        int | None: workers (at least 1), or None.
    """
    caps = [] if gpu_gib is None else [int(gpu_gib / GPU_GIB_PER_WORKER)]
    memory = _available_gib()
    if memory is not None:
        caps.append(int(memory / max(1, lanes) / GIB_PER_WORKER))
    return max(1, min(caps)) if caps else None


def equal_batch(jobs: int, cap: int) -> int:
    """The size of equal batches of ``jobs`` of at most ``cap`` each (18 jobs at a cap of 15: 9, not 15 and 3).

    Args:
        jobs (int): the jobs (at least 1).
        cap (int): the most a batch holds (at least 1).

    Returns:
        int: jobs per batch.
    """
    return math.ceil(jobs / math.ceil(jobs / cap))


def peer_uid(sock: socket.socket) -> int:
    """The effective uid of the process at the other end of a connected Unix socket, as the kernel recorded it
    when that process connected (``SO_PEERCRED``, socket(7) and unix(7): a ``struct ucred`` of pid, uid, gid).

    Args:
        sock (socket.socket): a connected ``AF_UNIX`` socket.

    Returns:
        int: the peer's uid.

    Raises:
        OSError: the kernel cannot say (not a Unix socket; not Linux: ``socket.SO_PEERCRED`` missing
            raises AttributeError, which is an error of the platform, not of the peer).
    """
    ucred = sock.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, struct.calcsize("3i"))
    return int(struct.unpack("3i", ucred)[1])


class LineTooLong(KnobsError):
    """A connection sent a line longer than its :class:`LineBuffer` allows."""


class LineBuffer:
    """One connection's bytes up to its next newline, never more than ``limit + 1`` of them.

    Args:
        limit (int): the longest line allowed, in bytes without the newline.
    """

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self.pending = b""

    def room(self) -> int:
        """How many bytes to read next.

        Returns:
            int: what fills the buffer to one byte past ``limit`` (at least 1), so that a line over the
            limit is seen before more of it is read.
        """
        return max(1, self.limit + 1 - len(self.pending))

    def feed(self, data: bytes) -> list[bytes]:
        """Add ``data`` to the pending bytes.

        Args:
            data (bytes): what the connection sent next.

        Returns:
            list[bytes]: the complete lines it finished, without their newlines.

        Raises:
            LineTooLong: a line, complete or not, is longer than ``limit`` (nothing more is kept).
        """
        lines = (self.pending + data).split(b"\n")
        self.pending = b""
        if any(len(line) > self.limit for line in lines):
            raise LineTooLong(f"a line longer than {self.limit} bytes without a newline")
        self.pending = lines.pop()
        return lines


class Quiet:
    """The phase barrier of one local ablation (see the module docstring).

    Args:
        lanes (list[Any]): the lane keys (GPU indices, or ``[None]`` on CPU).
        parallel (int): compiling workers per lane at once: up to ``parallel × len(lanes)`` compile at once on
            the host, whichever lanes they are on.
        cap (int): live workers per lane (:func:`live_cap`).
        jobs (Mapping[Any, int]): lane -> how many jobs it will be admitted (a lane left out: none).
        max_line (int): the longest line a connection may send, in bytes (:data:`MAX_LINE`).
        uid_of (Callable[[socket.socket], int]): a connection's peer uid (:func:`peer_uid`); a connection
            whose uid is not this process's effective uid is closed unread.
        clock (Callable[[], float]): seconds, read at each admission and ``ready`` (:meth:`compile_span`);
            ``time.monotonic`` unless a test injects another.

    Attributes:
        address (str): the socket address the workers connect to (in their job's ``barrier``).
        cpus (dict): lane -> the CPUs its measuring workers are pinned to (:func:`lane_cpus`).
    """

    def __init__(
        self,
        lanes: list[Any],
        parallel: int,
        cap: int,
        jobs: Mapping[Any, int],
        max_line: int = MAX_LINE,
        uid_of: Callable[[socket.socket], int] = peer_uid,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.parallel, self.cap = max(1, parallel), max(1, cap)
        self.slots = self.parallel * len(lanes)  # compiling workers at once on the host
        self.remaining = {lane: int(jobs.get(lane, 0)) for lane in lanes}
        self.max_line, self.uid_of, self.uid = max_line, uid_of, os.geteuid()
        self.cpus = dict(zip(lanes, lane_cpus(len(lanes))))
        self.cond = threading.Condition()
        self.closed = False
        self.measuring_phase = False
        self.holds: set[object] = set()  # CPU work beside the workers that keeps the measurement phase shut (hold)
        self.lane_of: dict[str, Any] = {}  # token -> lane, for every live worker
        self.compiling: set[str] = set()
        self.ready: dict[Any, list[str]] = {lane: [] for lane in lanes}
        self.measuring: dict[Any, str | None] = dict.fromkeys(lanes)
        self.order: dict[str, int] = {}  # token -> when it became ready (measurement order without a rank)
        self.ranks: dict[str, int] = {}  # token -> its place in plan order (measurement order, :meth:`rank`)
        self.clock = clock
        self.spans: dict[str, tuple[float, float | None]] = {}  # token -> [admitted, ready or None], kept after it exits
        self._ready_count = itertools.count()
        self.conns: dict[str, socket.socket] = {}
        self.listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.address = f"\0inductor-knobs-quiet-{uuid.uuid4().hex}"  # abstract: no file anywhere
        self.listener.bind(self.address)
        self.listener.listen()
        self._selector = selectors.DefaultSelector()
        self._selector.register(self.listener, selectors.EVENT_READ)
        self._wake_r, self._wake_w = socket.socketpair()
        self._selector.register(self._wake_r, selectors.EVENT_READ)
        self._thread = threading.Thread(target=self._serve, name="ik-quiet", daemon=True)
        self._thread.start()

    # -- the job threads' side --------------------------------------------------------------

    def admit(self, lane: Any) -> dict[str, Any] | None:
        """Wait until ``lane`` may start a worker, and count it as compiling.

        Args:
            lane (Any): the caller's lane.

        Returns:
            dict[str, Any] | None: the job's ``barrier`` (``address``, ``token``), or None when no job
            is left to admit on ``lane`` or the barrier was closed.
        """
        with self.cond:
            self.cond.wait_for(lambda: self.closed or self.remaining[lane] <= 0 or self._admissible(lane))
            if self.closed or self.remaining[lane] <= 0:
                return None
            self.remaining[lane] -= 1
            token = uuid.uuid4().hex
            self.lane_of[token] = lane
            self.compiling.add(token)
            self.spans[token] = (self.clock(), None)
            return {"address": self.address, "token": token}

    def rank(self, token: str, place: int) -> None:
        """Measure the worker of ``token`` at ``place`` in plan order among the workers ready in a phase.

        Args:
            token (str): the worker's barrier token (:meth:`admit`).
            place (int): its job's index (lower measures first; workers without a rank measure after those with
                one, in the order they became ready).
        """
        with self.cond:
            if token in self.lane_of:
                self.ranks[token] = place

    def compile_span(self, token: str) -> tuple[float, bool] | None:
        """How long the worker of ``token`` held (or holds) its compile slot: from its admission to its ``ready``.

        Args:
            token (str): the worker's barrier token (:meth:`admit`).

        Returns:
            tuple[float, bool] | None: the seconds (to now while it has not said ``ready``) and whether it has; None
            for a token this barrier did not admit, or whose worker left without saying ``ready`` (it died: its
            time says nothing of its arm's compile).
        """
        with self.cond:
            if token not in self.spans:
                return None
            admitted, ready = self.spans[token]
            return ((ready if ready is not None else self.clock()) - admitted, ready is not None)

    def hold(self) -> Callable[[], None]:
        """Keep the measurement phase shut, while admission goes on, until the returned callable is called (once;
        later calls do nothing): for CPU work of the ablation beside its compiling workers that a measurement would
        feel (the command's ``doctor`` report).

        Returns:
            Callable[[], None]: the release.
        """
        token = object()
        with self.cond:
            self.holds.add(token)

        def release() -> None:
            with self.cond:
                if token in self.holds:
                    self.holds.discard(token)
                    self._step()

        return release

    def _admissible(self, lane: Any) -> bool:
        return not self.measuring_phase and len(self.compiling) < self.slots and self._live(lane) < self.cap

    def finished(self, barrier: dict[str, Any] | None) -> None:
        """The worker of ``barrier`` has exited (or never started): it leaves the barrier.

        Args:
            barrier (dict[str, Any] | None): what :meth:`admit` returned (None: nothing to do).
        """
        if barrier is not None:
            self._leave(barrier["token"], exited=True)

    def close(self) -> None:
        """Admit nothing more, wake every waiting thread, and close every worker's connection."""
        with self.cond:
            self.closed = True
            self.cond.notify_all()
        try:
            self._wake_w.send(b"x")
        except OSError:
            pass
        self._thread.join(5)
        for sock in (self.listener, self._wake_r, self._wake_w):
            sock.close()

    # -- the workers' side (the socket thread) ---------------------------------------------------

    def _serve(self) -> None:
        buffers: dict[socket.socket, LineBuffer] = {}

        def drop(sock: socket.socket) -> None:  # the worker ended, died or misbehaved: it leaves the barrier
            self._selector.unregister(sock)
            buffers.pop(sock, None)
            token = next((t for t, c in list(self.conns.items()) if c is sock), None)
            sock.close()
            if token is not None:
                self._leave(token, exited=False)

        while not self.closed:
            for key, _ in self._selector.select():
                sock = key.fileobj
                if sock is self._wake_r:
                    continue
                if sock is self.listener:
                    conn, _ = self.listener.accept()
                    refused = self._refused(conn)
                    if refused:
                        log.warning("the measurement barrier closed a connection: %s", refused)
                        conn.close()
                        continue
                    buffers[conn] = LineBuffer(self.max_line)
                    self._selector.register(conn, selectors.EVENT_READ)
                    continue
                assert isinstance(sock, socket.socket)
                try:
                    data = sock.recv(min(4096, buffers[sock].room()))
                except OSError:
                    data = b""
                if not data:
                    drop(sock)
                    continue
                try:
                    lines = buffers[sock].feed(data)
                except LineTooLong as err:
                    log.warning("the measurement barrier closed a connection: %s (allowed %d bytes)", err, self.max_line)
                    drop(sock)
                    continue
                for line in lines:
                    try:
                        self._message(sock, line.decode(errors="replace").split())
                    except Exception:  # noqa: BLE001 - a garbled line must not stop the barrier for everyone
                        continue
        for sock in list(buffers):
            self._selector.unregister(sock)
            sock.close()
        self._selector.close()

    def _refused(self, conn: socket.socket) -> str:
        """Why ``conn`` may not talk to the barrier (its peer is another user, or cannot be told), or ``""``."""
        try:
            uid = self.uid_of(conn)
        except OSError as err:
            return f"its peer's uid cannot be read ({err})"
        return "" if uid == self.uid else f"its peer runs as uid {uid}, the ablation as uid {self.uid}"

    def _message(self, sock: socket.socket, words: list[str]) -> None:
        with self.cond:
            if words[:1] == ["ready"] and len(words) == 2 and words[1] in self.compiling:
                token = words[1]
                self.compiling.discard(token)
                self.spans[token] = (self.spans[token][0], self.clock())
                self.conns[token] = sock
                self.ready[self.lane_of[token]].append(token)
                self.order[token] = next(self._ready_count)
                self._step()
            elif words[:1] == ["measured"]:
                found = next((t for t, c in self.conns.items() if c is sock), None)
                if found is not None:
                    self._leave(found, exited=False)

    def _leave(self, token: str, exited: bool) -> None:
        with self.cond:
            if token not in self.lane_of:  # gone already (a lane key may be None: the CPU's)
                return
            lane = self.lane_of[token]
            self.compiling.discard(token)
            if token in self.spans and self.spans[token][1] is None:  # left without ``ready``: it died
                del self.spans[token]
            if token in self.ready[lane]:
                self.ready[lane].remove(token)
            if self.measuring[lane] == token:
                self.measuring[lane] = None
            self.conns.pop(token, None)
            self.order.pop(token, None)
            if exited:
                del self.lane_of[token]
                self.ranks.pop(token, None)
            self._step()

    def _step(self) -> None:
        """Open the measurement phase, hand out turns, or reopen admission (with ``cond`` held)."""
        waiting = any(self.ready.values())
        if not self.measuring_phase and waiting and not self.compiling and not self.holds:
            stuck = all(self._live(lane) >= self.cap or self.remaining[lane] <= 0 for lane in self.ready)
            if stuck or self.closed:
                self.measuring_phase = True
        if self.measuring_phase:
            while not any(m is not None for m in self.measuring.values()) and any(self.ready.values()):
                # One at a time on the whole host, in plan order (ranks), else in the order they became ready.
                token = min(
                    (t for queue in self.ready.values() for t in queue),
                    key=lambda t: (self.ranks.get(t, math.inf), self.order[t]),
                )
                lane = self.lane_of[token]
                self.ready[lane].remove(token)
                self.measuring[lane] = token
                cpus = ",".join(str(c) for c in self.cpus.get(lane) or [])
                try:
                    self.conns[token].sendall(f"go {cpus}\n".encode())
                except OSError:  # it died meanwhile: its end of connection follows; try the next
                    self.measuring[lane] = None
            if not any(self.ready.values()) and not any(m is not None for m in self.measuring.values()):
                self.measuring_phase = False
        self.cond.notify_all()

    def _live(self, lane: Any) -> int:
        return sum(1 for v in self.lane_of.values() if v == lane)


def wait_turn(barrier: dict[str, Any]) -> tuple[socket.socket, list[int]]:
    """The worker's side: say ``ready`` and wait for ``go``.

    Args:
        barrier (dict[str, Any]): the job's ``barrier`` (``address``, ``token``).

    Returns:
        tuple[socket.socket, list[int]]: the connection (pass it to :func:`done_measuring`) and the
        CPUs to measure on (empty: no pinning).

    Raises:
        RuntimeError: the barrier closed before this worker's turn (the ablation was interrupted).
    """
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    sock.connect(barrier["address"])
    sock.sendall(f"ready {barrier['token']}\n".encode())
    data = b""
    while not data.endswith(b"\n"):
        chunk = sock.recv(4096)
        if not chunk:
            sock.close()
            raise RuntimeError("the ablation's measurement barrier closed before this run's turn")
        data += chunk
    words = data.decode().split()
    cpus = [int(c) for c in words[1].split(",")] if len(words) > 1 and words[1] else []
    return sock, cpus


def done_measuring(sock: socket.socket) -> None:
    """The worker's side: say ``measured`` (the next worker may measure) and close the connection.

    Args:
        sock (socket.socket): from :func:`wait_turn`.
    """
    try:
        sock.sendall(b"measured\n")
    except OSError:
        pass
    sock.close()
