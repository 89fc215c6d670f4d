"""A block is alive from its enter to its exit, everywhere (DESIGN.md "Block lifetime").

A child asyncio task or a thread run in a copied context inherits the ``ContextVar`` s that hold
what a block asked for and its gate override (torch 2.12+).  Once the block exits, none of it may
act in the child: not enforced over the child's own config, not attested or credited, not salted,
not the gate's override.  Torch's own copy of its config is torch's business and not checked here.
Every compile check reads the config inside Inductor's compile (``inside_compile``).
"""

from __future__ import annotations

import asyncio
import contextvars
import threading

import pytest
import torch
import torch._inductor.config as cfg
import torch._inductor.utils as inductor_utils
from conftest import inside_compile

import inductor_knobs as ik
from inductor_knobs.core import gate


@pytest.fixture(autouse=True)
def _per_context_torch(patches):
    if not patches.config_is_thread_local:
        pytest.skip("before torch 2.12 the slots are process-global: an exit empties them for every thread")


def _f(x):
    return (x * 2).sin() + 1


def _compile_without_autotune() -> list[object]:
    """Compile ``_f`` inside ``config.patch(max_autotune=False)``; return the attestations."""
    with ik.record_compiles() as rec, cfg.patch(max_autotune=False):
        torch.compile(_f, backend="inductor")(torch.randn(8))
    return rec.attestations


def _credited(attestations) -> set[tuple[str, str]]:
    return {(s.key, s.source) for a in attestations for s in a.settings}


def _in_thread(context: contextvars.Context, fn):
    out: list[object] = []
    thread = threading.Thread(target=context.run, args=(lambda: out.append(fn()),))
    thread.start()
    thread.join()
    assert out, "the thread failed"
    return out[0]


def test_a_task_started_in_a_block_compiles_without_it_once_it_exited(monkeypatch, fresh_inductor):
    seen = inside_compile(monkeypatch, lambda: cfg.max_autotune)

    async def main():
        go = asyncio.Event()

        async def child():
            await go.wait()  # the parent's block has exited by now
            return _compile_without_autotune()

        with ik.knobs(max_autotune=True):
            task = asyncio.create_task(child())  # copies the context: the block's slots included
        go.set()
        return await task

    attestations = asyncio.run(main())
    assert seen == [False]
    assert not any(source == "knobs" for _, source in _credited(attestations))


def test_a_copied_context_run_in_a_thread_compiles_without_the_exited_block(monkeypatch, fresh_inductor):
    seen = inside_compile(monkeypatch, lambda: cfg.max_autotune)
    with ik.knobs(max_autotune=True):
        copied = contextvars.copy_context()
    attestations = _in_thread(copied, _compile_without_autotune)
    assert seen == [False]
    assert not any(source == "knobs" for _, source in _credited(attestations))


def test_an_exited_blocks_gate_override_does_not_act_in_a_copied_context(fake_gpu):
    fake_gpu(40)
    with ik.force_gemm_autotune(min_sms=100):  # alive throughout: holds the wrapper, gate closed at 40 SMs
        with ik.force_gemm_autotune(min_sms=40):
            copied = contextvars.copy_context()
            assert _in_thread(copied, lambda: inductor_utils.is_big_gpu(0)) is True  # alive: it acts
        seen = _in_thread(copied, lambda: (gate.current_override(), inductor_utils.is_big_gpu(0)))
        assert seen == (gate.Override(100), False)  # the outer block's, still alive
    assert _in_thread(copied, gate.current_override) is None


def test_an_exited_inner_block_uncovers_the_live_outer_one_in_a_child(monkeypatch, fresh_inductor):
    seen = inside_compile(monkeypatch, lambda: (cfg.max_autotune, cfg.coordinate_descent_tuning))
    with ik.knobs(coordinate_descent_tuning=False):
        with ik.knobs(coordinate_descent_tuning=True, max_autotune=True):
            copied = contextvars.copy_context()
        attestations = _in_thread(copied, _compile_without_autotune)
    assert seen == [(False, False)]
    assert _credited(attestations) == {("coordinate_descent_tuning", "knobs")}


def test_a_task_started_in_a_block_gets_its_knobs_while_it_is_alive(monkeypatch, fresh_inductor):
    seen = inside_compile(monkeypatch, lambda: cfg.max_autotune)
    ctx = ik.knobs(max_autotune=True)

    async def main():
        async def child():
            assert ctx.active
            return _compile_without_autotune()  # the knob beats the child's own config.patch

        with ctx:
            return await asyncio.create_task(child())

    attestations = asyncio.run(main())
    assert seen == [True]
    assert ("max_autotune", "knobs") in _credited(attestations)


def test_an_exited_block_is_not_active_in_a_child(fresh_inductor):
    ctx = ik.knobs(max_autotune=True)
    with ctx:
        copied = contextvars.copy_context()
        assert _in_thread(copied, lambda: ctx.active) is True
    assert _in_thread(copied, lambda: ctx.active) is False


def test_a_block_unwound_for_an_out_of_order_exit_stays_alive_in_a_child(monkeypatch, fresh_inductor):
    seen = inside_compile(monkeypatch, lambda: cfg.max_autotune)
    a, b = ik.knobs(coordinate_descent_tuning=False), ik.knobs(max_autotune=True)
    a.start()
    b.start()
    copied = contextvars.copy_context()
    a.stop()  # out of order: b is reverted, a ends, b is applied again: b never exited
    try:
        attestations = _in_thread(copied, _compile_without_autotune)
    finally:
        b.stop()
    assert seen == [True]
    assert _credited(attestations) == {("max_autotune", "knobs")}


def test_a_backward_compiled_in_a_child_after_the_block_exited_keeps_the_blocks_knobs(monkeypatch, fresh_inductor):
    seen = inside_compile(monkeypatch, lambda: cfg.max_autotune)
    fn = torch.compile(lambda x: (x * 2).sin().sum(), backend="inductor")
    with ik.knobs(max_autotune=True):
        copied = contextvars.copy_context()
        loss = _in_thread(copied, lambda: fn(torch.randn(6, requires_grad=True)))
    _in_thread(copied, loss.backward)  # compiled lazily, after the block exited: torch's semantics for this graph
    assert seen == [True, True]
