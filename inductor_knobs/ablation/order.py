"""Which job a freed compile slot starts next: the arm with the longest compile first, where that cannot bias a verdict.

The local executor compiles up to ``parallel`` workers per lane at once (:mod:`.quiet`); the lane's last compiles set
its wall time, while compile slots stand idle beside them.  Starting the longest compiles first (the longest
processing time rule of list scheduling) leaves short ones for the end, where they fill the idle slots.  No compile
time is known before the ablation runs, so each arm's is read from its own workers as they go (:class:`Backlog`):

- an arm with no worker started yet comes first (its time is unknown: starting it early makes it known);
- an arm with a worker that has compiled: the longest of its workers' times from admission to ``ready`` (import,
  build, eager reference and compile: what a slot is held for);
- an arm whose workers all still compile: the longest time one of them has compiled so far (a lower bound);
- estimates are compared in whole seconds (workers admitted together differ by microseconds, which says nothing of
  their arms); at a tie an arm still compiling goes before one whose time is known (it takes at least as long), and
  then plan order (repeat-major, arms interleaved).

**Only where every job of the lane is measured in the same measurement phase**: a lane that holds all its jobs at
once (``cap >= jobs``, :func:`.quiet.live_cap`; the main job on one GPU: 18 of 18).  Such a lane cannot be full before
it has admitted all its jobs, so the barrier opens no measurement phase before every one of them has compiled, and
its workers then measure in plan order (:meth:`.quiet.Quiet.rank`), whatever order they compiled in: the order of
the compiles decides neither when a latency sample is taken relative to the compiles nor which arm measures first.
What it does change is which workers compile beside each other (the long arms' repeats more often together); their
GPU timings take turns (:mod:`.autotune_lock`), and what that lock leaves out (a first call, an eager pass) runs
beside either way.  A lane measured in several phases (batches) keeps plan order, so that each batch holds whole
repeats of every arm: longest-first there would measure the slow arms' repeats in an early batch and the fast arms'
in a late one, and a drift of the host between batches would become a difference between arms.

Standard library only.
"""

from __future__ import annotations

import math
import threading
from collections.abc import Callable, Iterable, Mapping
from typing import Any

#: ``compile_span(token)``: seconds from the worker's admission to its ``ready`` (or to now, while it still compiles)
#: and whether it is ready; None for a token the barrier does not know (:meth:`.quiet.Quiet.compile_span`).
CompileSpan = Callable[[str], "tuple[float, bool] | None"]


class Backlog:
    """Each lane's jobs not started yet, handed out one per admitted worker (see the module docstring).

    Args:
        jobs (Iterable[tuple[Any, dict[str, Any]]]): ``(lane, job)`` pairs in plan order; a job has ``index`` and
            ``arm`` (``{"name": ...}``), as :meth:`.plan.Plan.jobs` makes them.
        longest_first (Mapping[Any, bool]): lane -> whether its jobs go longest compile first (only a lane measured
            in one phase); a lane left out keeps plan order.
        compile_span (CompileSpan): a worker's compile time so far, by its barrier token.

    Thread-safe: the executor's job threads call :meth:`take` at once.
    """

    def __init__(
        self, jobs: Iterable[tuple[Any, dict[str, Any]]], longest_first: Mapping[Any, bool], compile_span: CompileSpan
    ) -> None:
        self._pending: dict[Any, list[dict[str, Any]]] = {}
        for lane, job in jobs:
            self._pending.setdefault(lane, []).append(job)
        self._longest_first = dict(longest_first)
        self._span = compile_span
        self._tokens: dict[str, list[str]] = {}  # arm -> the barrier tokens of its workers started so far
        self._lock = threading.Lock()

    def counts(self) -> dict[Any, int]:
        """Lane -> how many of its jobs have not been taken.

        Returns:
            dict[Any, int]: one entry per lane that had jobs.
        """
        with self._lock:
            return {lane: len(jobs) for lane, jobs in self._pending.items()}

    def take(self, lane: Any, token: str) -> dict[str, Any] | None:
        """The job the worker admitted on ``lane`` with barrier ``token`` runs.

        Args:
            lane (Any): the admitted worker's lane.
            token (str): its barrier token (:meth:`.quiet.Quiet.admit`), remembered for its arm's estimate.

        Returns:
            dict[str, Any] | None: the job, removed from the backlog; None when the lane has none left.
        """
        with self._lock:
            jobs = self._pending.get(lane)
            if not jobs:
                return None
            job = jobs[0]
            if self._longest_first.get(lane):
                estimates = {name: self._estimate(name) for name in {j["arm"]["name"] for j in jobs}}
                job = max(jobs, key=lambda j: (*estimates[j["arm"]["name"]], -int(j["index"])))
            jobs.remove(job)
            self._tokens.setdefault(job["arm"]["name"], []).append(token)
            return job

    def _estimate(self, arm: str) -> tuple[float, bool]:
        """Whole seconds a slot is expected to be held by a worker of ``arm`` (infinite: none started yet), and
        whether that is a lower bound (none of its workers has compiled yet)."""
        spans = [span for span in map(self._span, self._tokens.get(arm, ())) if span is not None]
        if not spans:
            return math.inf, True
        done = [seconds for seconds, ready in spans if ready]
        if done:
            return float(math.floor(max(done))), False
        return float(math.floor(max(seconds for seconds, _ in spans))), True
