"""capture_cuda_graphs from a threaded server (issue 30): no caller ever reads another call's result.

On CPU the graphs are stand-ins (``test_graphs.FakeGraph``: a replay runs the function into the
static output, as a real replay writes the pool's buffers); the contract is the same.
"""

from __future__ import annotations

import threading
from concurrent.futures import ThreadPoolExecutor

import pytest
import torch
from test_graphs import _captured

import inductor_knobs as ik
from inductor_knobs.core import events
from inductor_knobs.core.recorder import Subscription
from inductor_knobs.errors import InvalidKnobValue


def test_copy_outputs_are_the_callers_own_under_four_threads():
    """Before: the static output was handed back after the lock, so 222 of 2,000 answers were another request's."""
    captured = _captured(lambda x: x * 2, 4, outputs="copy")

    def request(i: int) -> bool:
        out = captured(torch.full((1, 4), float(i)))
        for _ in range(50):  # other threads replay meanwhile
            threading.Event().wait(0)
        return bool(torch.equal(out, torch.full((1, 4), 2.0 * i)))

    with ThreadPoolExecutor(4) as pool:
        right = list(pool.map(request, range(400)))
    assert all(right), f"{right.count(False)} of 400 answers were another call's"
    assert captured.replays == 400


def test_the_copy_is_not_the_graph_buffer_and_survives_the_next_replay():
    captured = _captured(lambda x: x + 1, 4, outputs="copy")
    first = captured(torch.zeros(1, 4))
    second = captured(torch.ones(1, 4))
    assert torch.equal(first, torch.ones(1, 4)) and torch.equal(second, torch.full((1, 4), 2.0))


def test_static_outputs_refuse_a_second_thread_before_replaying():
    captured = _captured(lambda x: x + 1, 4, outputs="static")
    captured(torch.zeros(1, 4))
    errors = []

    def other():
        try:
            captured(torch.ones(1, 4))
        except ik.serving.GraphCallRefused as err:
            errors.append(str(err))

    thread = threading.Thread(target=other, name="worker-2")
    thread.start()
    thread.join()
    assert len(errors) == 1 and "worker-2" in errors[0] and "outputs='copy'" in errors[0]
    assert captured.replays == 1  # nothing replayed for the refused call


def test_an_unknown_outputs_value_is_refused():
    with pytest.raises(InvalidKnobValue, match=r"outputs='shared'.*'copy' or 'static'"):
        ik.serving.capture_cuda_graphs(lambda x: x, shapes=[4], factory=lambda n: torch.ones(1, n), outputs="shared")


class _Queue:
    def __init__(self):
        self.runtime = []

    def on_runtime(self, event):
        self.runtime.append(event)


def test_time_spent_waiting_for_the_lock_is_published_as_queued(monkeypatch):
    """The waiting caller's own thread hears a ``queued`` runtime event (what no_stalls names), not a slow GPU."""
    captured = _captured(lambda x: x + 1, 4, outputs="copy")
    ticks = iter([0.0, 0.005])  # the clock at queueing and at taking the lock: 5 ms in the queue
    monkeypatch.setattr("inductor_knobs.serving.graphs.time.perf_counter", lambda: next(ticks))
    heard = _Queue()
    with Subscription(heard, hooks=False):
        captured(torch.zeros(1, 4))
    assert [(e.kind, e.seconds) for e in heard.runtime] == [("queued", 0.005)]
    assert not events.listeners()
