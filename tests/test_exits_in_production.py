"""Exact revert on the exits production meets (issue 29): warnings as errors, a child task or another
thread ending a block, a revert that fails, out-of-order exits of recorders.

Every check reads torch's own state: the raw stored override of each key (``unset`` included), and
what Inductor compiled with (read inside ``GraphLowering`` by the ``inside_compile`` spy).
"""

from __future__ import annotations

import asyncio
import contextvars
import threading
import warnings

import pytest
import torch
import torch._inductor.config as cfg
from conftest import inside_compile

import inductor_knobs as ik
from inductor_knobs.core import blocks
from inductor_knobs.errors import ExternalChangeWarning, KnobsError, NotBlockOwner

KEYS = ("max_autotune", "coordinate_descent_tuning")


def overrides(patches) -> dict[str, object]:
    """The stored override of each key, as torch keeps it (its 'unset' sentinel included)."""
    return {key: patches.read_override(cfg, key) for key in KEYS}


def test_under_warnings_as_errors_the_block_is_reverted_before_the_warning_raises(patches):
    """Before: coordinate_descent_tuning stayed True and the block stayed on its stack."""
    before = overrides(patches)
    with warnings.catch_warnings():
        warnings.simplefilter("error", ExternalChangeWarning)  # what -W error does to this warning
        with pytest.raises(ExternalChangeWarning, match="max_autotune"):
            with ik.knobs(max_autotune=True, coordinate_descent_tuning=True):
                cfg.max_autotune = False
    assert overrides(patches) == before
    assert blocks._FRAMES.get() == ()


def test_the_warning_still_comes_after_a_normal_exit(patches):
    before = overrides(patches)
    with pytest.warns(ExternalChangeWarning, match="restored the value from before the block"):
        with ik.knobs(max_autotune=True):
            cfg.max_autotune = False
    assert overrides(patches) == before


def test_a_failed_revert_still_takes_the_frame_off_the_stack(patches, monkeypatch):
    """A RevertError leaves nothing applied by the other records and no stale frame behind."""
    ctx = ik.knobs(max_autotune=True, coordinate_descent_tuning=True)
    before = overrides(patches)
    ctx.start()
    frame = blocks._FRAMES.get()[-1]

    def broken() -> None:
        raise OSError("disk gone")

    frame.applied.insert(0, broken)  # undone last, after every real record
    with pytest.raises(ik.KnobsError, match="disk gone"):
        ctx.stop()
    assert overrides(patches) == before
    assert blocks._FRAMES.get() == ()
    assert not ctx.active


@pytest.mark.skipif(not hasattr(asyncio, "TaskGroup"), reason="asyncio.TaskGroup is Python 3.11+")
def test_a_child_task_cannot_stop_its_parents_block(patches):
    """Before (2.12+): the child's stop() reverted the parent's records; the parent's own stop() then reverted nothing."""
    before = overrides(patches)
    ctx = ik.knobs(max_autotune=True)
    seen: dict[str, object] = {}

    async def child() -> None:
        seen["inherited"] = blocks._FRAMES.get() != ()
        with pytest.raises(NotBlockOwner, match="only its owner may end it") as err:
            ctx.stop()
        seen["message"] = str(err.value)

    async def parent() -> None:
        ctx.start()
        async with asyncio.TaskGroup() as group:
            group.create_task(child())
        seen["parent"] = patches.read_override(cfg, "max_autotune")
        ctx.stop()

    asyncio.run(parent())
    assert seen["inherited"] or not patches.config_is_thread_local
    assert seen["parent"] is True  # the child changed nothing
    assert "asyncio task" in str(seen.get("message", "asyncio task"))
    assert overrides(patches) == before


def test_a_thread_in_a_copied_context_cannot_stop_the_block(patches):
    before = overrides(patches)
    ctx = ik.knobs(max_autotune=True)
    ctx.start()
    errors: list[BaseException] = []

    def other() -> None:
        try:
            ctx.stop()
        except BaseException as err:  # noqa: BLE001 - checked below
            errors.append(err)

    thread = threading.Thread(target=contextvars.copy_context().run, args=(other,))
    thread.start()
    thread.join()
    assert len(errors) == 1 and isinstance(errors[0], KnobsError), errors
    if patches.config_is_thread_local:  # the copied context sees the frame: refused by owner
        assert isinstance(errors[0], NotBlockOwner) and "MainThread" in str(errors[0])
    assert patches.read_override(cfg, "max_autotune") is True
    ctx.stop()
    assert overrides(patches) == before


def test_out_of_order_exit_of_a_recorder_does_not_revive_it(patches, monkeypatch, fresh_inductor):
    """Before: after first.__exit__ then second.__exit__, the exited ``first`` got the next compile and ``second`` none."""
    torch._dynamo.reset()
    seen = inside_compile(monkeypatch, lambda: cfg.max_autotune)
    first, second = ik.record_compiles(), ik.record_compiles()
    first.__enter__()
    second.__enter__()
    first.__exit__(None, None, None)  # out of order
    with ik.knobs(max_autotune=False):
        torch.compile(lambda x: x * 2 + 1)(torch.randn(8))
        second_saw = len(second.attestations)
    second.__exit__(None, None, None)
    third = ik.record_compiles()
    with third, ik.knobs(max_autotune=False):
        torch._dynamo.reset()
        torch.compile(lambda x: x * 3 - 1)(torch.randn(8))
    assert seen and seen[-1] is False
    assert second_saw == 1
    assert first.attestations == []  # exited before any compile: it never hears of one
    assert len(third.attestations) == 1


def test_deactivating_env_under_a_threads_own_override_is_not_an_external_change(patches):
    """Before (2.12+): deactivate_env() compared the calling thread's own override, and warned that
    max_autotune 'was changed inside the knobs block' when only this thread had overridden it.

    Run on a fresh thread, so no override pinned by an earlier test is in the way (on 2.12+ a new
    thread starts with none)."""
    seen: dict[str, object] = {}

    def body() -> None:
        seen["before"] = {key: (patches.read_override(cfg, key), patches.read_value(cfg, key)) for key in KEYS}
        ik.activate_from_env({"INDUCTOR_KNOBS_MAX_AUTOTUNE": "1"})
        try:
            with warnings.catch_warnings(), ik.knobs(max_autotune=False):
                warnings.simplefilter("error", ExternalChangeWarning)
                ik.deactivate_env()
                seen["inside"] = cfg.max_autotune  # this thread's own override is untouched
        except BaseException as err:  # noqa: BLE001 - reported below
            seen["error"] = err
        finally:
            ik.deactivate_env()
        seen["after"] = {key: (patches.read_override(cfg, key), patches.read_value(cfg, key)) for key in KEYS}

    thread = threading.Thread(target=body)
    thread.start()
    thread.join()
    assert seen["after"] == seen["before"]
    if not patches.config_is_thread_local:
        # Before 2.12 the block and activation share one process-global value: deactivating under the
        # block is refused, changing nothing (it used to leave max_autotune=True after both ended).
        assert isinstance(seen.get("error"), KnobsError) and "Exit the block first" in str(seen["error"])
        return
    assert "error" not in seen, seen.get("error")
    assert seen["inside"] is False
