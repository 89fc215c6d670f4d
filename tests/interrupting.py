"""Interrupt a block at every line of its enter and exit (``sys.settrace``), with a hang guard.

Imports no part of Inductor itself, so a fresh interpreter can run the check before
``torch._inductor.compile_fx`` is imported (the interception then waits for that import: an
``_OnImport`` install, whose lock is on the exit path).
"""

from __future__ import annotations

import sys
import threading
import traceback
from collections.abc import Callable
from pathlib import Path
from typing import Any

#: How long one interrupted enter or exit (and its retried exit) may run before it counts as hung: a
#: deadlock detector, not a timing check (a run takes milliseconds; a lock left held never returns).
HANG_BOUND_S = 60.0

#: The files whose lines the tracer interrupts: the undo path of every block kind.
CORE = ("blocks", "undo", "changes", "attestation", "patching", "scope", "gate", "interception", "plan", "knobs")
CORE += ("torch_compat", "recorder", "observers", "events")
PATCHES = ("config_storage", "gate", "gemm_backends", "emulation", "process_settings", "hooks", "native_floors", "fixes")
PACKAGE_FILES = (
    *(f"inductor_knobs/core/{name}.py" for name in CORE),
    "inductor_knobs/errors.py",
    "inductor_knobs/emulation/sm_view.py",
    "inductor_knobs/emulation/block.py",
    "inductor_knobs/emulation/confine.py",
    "inductor_knobs/serving/first_call_costs.py",
    "inductor_knobs/serving/per_bucket.py",
    "inductor_knobs/serving/stalls.py",
    "inductor_knobs/serving/torch_fixes.py",
    "inductor_knobs/serving/aot_package.py",
    *(f"patches/torch_2_{minor}.py" for minor in (4, 6, 7, 8, 12, 15)),
    *(f"patches/{name}.py" for name in PATCHES),
)
_ROOT = Path(__file__).resolve().parent.parent
_MISSING = [name for name in PACKAGE_FILES if not (_ROOT / name).is_file()]
if _MISSING:  # a renamed module would silently leave the interrupt tests' reach
    raise ImportError(f"tests/interrupting.py names files that do not exist: {_MISSING}")


def inject(at: int, lines: list[tuple[str, int]]) -> Callable[..., Any]:
    """A tracer that records each line event in the package and raises KeyboardInterrupt at event ``at``."""

    def tracer(frame: Any, event: str, arg: Any) -> Any:
        if not frame.f_code.co_filename.endswith(PACKAGE_FILES):
            return None
        if event == "line":
            lines.append((frame.f_code.co_filename, frame.f_lineno))
            if len(lines) == at:
                raise KeyboardInterrupt(f"injected at {frame.f_code.co_filename}:{frame.f_lineno}")
        return tracer

    return tracer


def injection_points(fn: Callable[[], object]) -> list[int]:
    """The event index of the first time each distinct source line runs in ``fn``: one injection per line."""
    lines: list[tuple[str, int]] = []
    sys.settrace(inject(-1, lines))
    try:
        fn()
    finally:
        sys.settrace(None)
    # Each line's first event, and each return to a line after another (a ``with``'s own line after its body).
    first: dict[tuple[str, int], int] = {}
    again: list[int] = []
    for index, line in enumerate(lines, start=1):
        if line in first and lines[index - 2] != line:
            again.append(index)
        first.setdefault(line, index)
    return sorted({*first.values(), *again})


def run_injected(fn: Callable[[], object], at: int) -> str | None:
    """Run ``fn`` with a KeyboardInterrupt injected at line event ``at``; where it landed, or None if it did not."""
    sys.settrace(inject(at, []))
    try:
        fn()
    except KeyboardInterrupt as err:
        return str(err)
    finally:
        sys.settrace(None)
    return None


def in_fresh_thread(fn: Callable[[], Any], what: str, bound: float = HANG_BOUND_S) -> Any:
    """``fn()`` in a new thread (its own empty context: its own blocks); its result, or its error re-raised.

    Raises:
        AssertionError: still running after ``bound`` seconds, with its stack (the thread is left behind,
            a daemon).
    """
    box: dict[str, Any] = {}

    def run() -> None:
        try:
            box["value"] = fn()
        except BaseException as err:  # noqa: BLE001 - handed to the caller
            box["error"] = err

    thread = threading.Thread(target=run, name=f"interrupted {what}", daemon=True)
    thread.start()
    thread.join(bound)
    if thread.is_alive():
        frame = sys._current_frames().get(thread.ident or -1)
        stack = "".join(traceback.format_stack(frame)) if frame is not None else "(no stack)"
        raise AssertionError(f"{what} still runs after {bound:g} s: a lock left held by an interrupt?\n{stack}")
    if "error" in box:
        raise box["error"]
    return box.get("value")


def interrupt_every_line(make: Callable[[], Any], state: Callable[[], object], name: str, bound: float = HANG_BOUND_S) -> str:
    """KeyboardInterrupt at each line of ``make()``'s enter, then of its exit, each run in a fresh thread.

    The lines are those of a second enter and exit (the first runs once-only work), and every interrupt must land.
    After each interrupted enter or exit, the exit is retried where the block is still active (as a second
    ``with`` unwinding would): it must finish, and ``state()``, read in that thread, must equal what it was
    before the block.  Returns a one-line summary; raises AssertionError on a hang, a difference or an interrupt
    that never landed.
    """

    def full_cycle() -> tuple[list[int], list[int]]:
        warm = make()  # a first enter runs once-only work (the rescan of sys.modules for names bound to a target)
        warm.__enter__()
        warm.__exit__(None, None, None)
        ctx = make()
        enter = injection_points(ctx.__enter__)
        exit_ = injection_points(lambda: ctx.__exit__(None, None, None))
        return enter, exit_

    enter_points, exit_points = in_fresh_thread(full_cycle, f"{name}: a plain enter and exit", bound)
    retried = landed = 0

    def once(at: int, during_exit: bool) -> tuple[object, object, str | None, bool]:
        before = state()
        ctx = make()
        if during_exit:
            ctx.__enter__()
        where = run_injected(ctx.__enter__ if not during_exit else lambda: ctx.__exit__(None, None, None), at)
        active = ctx.active
        if active:  # entered fully, or the interrupt left the exit undone: the retried exit must finish
            ctx.__exit__(None, None, None)
        return before, state(), where, active

    for during_exit, points in ((False, enter_points), (True, exit_points)):
        phase = "exit" if during_exit else "enter"
        for at in points:
            what = f"{name}: the {phase} interrupted at line event {at}, then the retried exit"
            before, after, where, active = in_fresh_thread(lambda a=at, d=during_exit: once(a, d), what, bound)
            retried += active
            landed += where is not None
            assert after == before, f"{what} ({where}) left torch changed: {before} -> {after}"
    points = len(enter_points) + len(exit_points)
    assert landed == points, f"{name}: {points - landed} of {points} interrupts never landed (a line the warm runs skip)"
    summary = f"{name}: {len(enter_points)} lines of enter, {len(exit_points)} of exit, {retried} exits retried"
    return f"{summary}, {landed} of {points} interrupts landed"


#: The Inductor config keys the blocks under test change.
KEYS = ("coordinate_descent_tuning", "max_autotune", "max_autotune_gemm", "max_autotune_gemm_backends", "triton.cudagraphs")


def block_state() -> dict[str, object]:
    """What the blocks change, read from torch and from the shared patches (in the calling thread).

    Config keys as torch stores them (``unset`` included), ``is_big_gpu`` and ``compile_fx`` by identity
    (compile_fx's module only if imported), the users of every shared patch, installs waiting for an
    import, this thread's active blocks and the compile-event subscribers.
    """
    import torch._inductor.config as cfg
    import torch._inductor.utils as inductor_utils

    from inductor_knobs.core import blocks, events, gate, interception, observers, patching, torch_compat
    from inductor_knobs.emulation import confine, sm_view
    from inductor_knobs.serving import first_call_costs, stalls, torch_fixes

    patches = torch_compat.installed()
    state: dict[str, object] = {key: patches.read_override(cfg, key) for key in KEYS}
    state["is_big_gpu"] = inductor_utils.is_big_gpu
    state["compile_fx"] = getattr(sys.modules.get("torch._inductor.compile_fx"), "compile_fx", None)
    state["dynamo stance"] = getattr(sys.modules.get("torch._dynamo.eval_frame"), "_stance", None)  # by identity
    shared = (
        gate.GATE_PATCH,
        interception.INTERCEPTION,
        observers.OBSERVER_HOOKS,
        first_call_costs.FIRST_CALL_HOOKS,
        sm_view.SM_VIEW_PATCH,
        stalls.REFUSE_COMPILES,
        torch_fixes.TORCH_FIXES,
        confine.CAPTURE_PATCH,
    )
    state["users"] = {patch.name: patch.users for patch in shared}
    state["waiting for an import"] = {name: len(installs) for name, installs in patching._WAITING.items() if installs}
    state["frames"] = len(blocks._FRAMES.get())
    state["subscribers"] = len(events._LIVE)
    return state


def assert_locks_free(bound: float = HANG_BOUND_S) -> None:
    """Every process-wide lock of the undo path can be taken from this thread (each within ``bound`` s:
    another thread may hold one for an instant; a lock an interrupt left held never frees)."""
    from inductor_knobs import env
    from inductor_knobs.core import (
        attestation,
        changes,
        events,
        gate,
        interception,
        observers,
        patching,
    )
    from inductor_knobs.emulation import confine, sm_view
    from inductor_knobs.serving import first_call_costs, stalls, torch_fixes

    locks = {
        "gate": gate.GATE_PATCH.lock,
        "interception": interception.INTERCEPTION.lock,
        "observers": observers.OBSERVER_HOOKS.lock,
        "sm view": sm_view.SM_VIEW_PATCH.lock,
        "installs waiting for an import": patching._WAITING_LOCK,
        "claims": changes._HOLDERS_LOCK,
        "process asks": attestation.PROCESS_ASKED_LOCK,
        "event subscribers": events._LOCK,
        "environment variables": changes._ENV_LOCK,
        "triton counts": first_call_costs._TRITON_LOCK,
        "first-call hooks": first_call_costs.FIRST_CALL_HOOKS.lock,
        "refuse compiles": stalls.REFUSE_COMPILES.lock,
        "torch fixes": torch_fixes.TORCH_FIXES.lock,
        "capture streams": confine.CAPTURE_PATCH.lock,
        "green contexts": confine._GREEN_LOCK,
        "env activation": env._lock,
    }
    for name, lock in locks.items():
        if not lock.acquire(timeout=bound):
            raise AssertionError(f"the lock of {name} is still held {bound:g} s on: left held by an interrupt")
        lock.release()
