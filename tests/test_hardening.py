"""Every exit path reverts exactly (issue 11): out-of-order exits, generators, tasks, interrupts.

"Exact" is checked inside torch: the raw stored override of each key (``unset`` included), the
``is_big_gpu`` object in every module that binds it, its cache, ``cache_key_tag``, and the
compile entry, by identity.
"""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
import threading

import pytest
import torch
import torch._inductor.compile_fx as compile_fx_module
import torch._inductor.config as cfg
import torch._inductor.utils as inductor_utils
from interrupting import assert_locks_free, block_state, interrupt_every_line
from test_emulate import fake_cuda  # noqa: F401 - the fixture, for emulate_gpu

import inductor_knobs as ik
from inductor_knobs.core import attestation, blocks, gate, interception
from inductor_knobs.core.changes import SETTINGS
from inductor_knobs.core.knobs import KNOBS as KNOB_TABLE
from inductor_knobs.errors import ConcurrentKnobsError, KnobsError, NotBlockOwner
from inductor_knobs.serving.cold_start import ColdStartRecorder

KEYS = ("coordinate_descent_tuning", "max_autotune", "max_autotune_gemm", "max_autotune_gemm_backends", "triton.cudagraphs")


def torch_state(patches) -> dict[str, object]:
    """What torch holds now, read from torch's own objects."""
    state: dict[str, object] = {key: patches.read_override(cfg, key) for key in KEYS}
    salt = sys.modules.get("torch.compiler.config")
    if salt is not None and hasattr(salt, "cache_key_tag"):
        state["raw cache_key_tag"] = patches.read_override(salt, "cache_key_tag")
    state["gate bindings"] = sorted(
        name
        for name, module in list(sys.modules.items())
        if getattr(module, "__dict__", {}).get("is_big_gpu") is not None and module.__dict__["is_big_gpu"] is not ORIGINAL_GATE
    )
    state["gate"] = inductor_utils.is_big_gpu is ORIGINAL_GATE
    state["compile_fx"] = compile_fx_module.compile_fx is ORIGINAL_COMPILE_FX
    state["gate users"] = gate.GATE_PATCH.users
    state["interception users"] = interception.INTERCEPTION.users
    state["frames"] = len(blocks._FRAMES.get())
    for key in SETTINGS_SHOWN:  # the process-wide settings, as torch holds them (an environment variable's text)
        state[key] = SETTINGS[key].state(patches) if _has(key) else None
    # what the wrapper and the interception would apply at the next compile
    state["gate override"] = (gate._STATE.scoped.get(True), gate._STATE.scoped.get(False), gate._STATE.process_default)
    state["asked"] = (attestation.SCOPED_ASKED.get(True), attestation.SCOPED_ASKED.get(False), dict(attestation.PROCESS_ASKED))
    return state


ORIGINAL_GATE = inductor_utils.is_big_gpu
ORIGINAL_COMPILE_FX = compile_fx_module.compile_fx
#: Process-wide settings whose state the interrupt tests read too.
SETTINGS_SHOWN = ("sdpa_backends", "cudnn_sdpa_avoid_recompile")


def _has(knob: str) -> bool:
    return KNOB_TABLE[knob].on(".".join(torch.__version__.split(".")[:2]))


@pytest.fixture
def before(patches, fake_gpu):
    fake_gpu(40)
    state = torch_state(patches)
    yield state
    assert torch_state(patches) == state


def test_out_of_order_stop_unwinds_and_reapplies(patches, before):
    a = ik.knobs(coordinate_descent_tuning=True, min_sms=10)
    b = ik.knobs(max_autotune=True, min_sms=50)
    a.start()
    b.start()
    a.stop()  # out of order: b stays, exactly as if a had never been entered
    assert cfg.max_autotune is True and gate.current_override() == gate.Override(50)
    assert patches.read_override(cfg, "coordinate_descent_tuning") == before["coordinate_descent_tuning"]
    assert inductor_utils.is_big_gpu(0) is False  # 40 SMs < 50
    b.stop()


def test_an_out_of_order_exit_whose_revert_fails_still_applies_the_block_above_again(patches, before):
    """Someone else replaces ``is_big_gpu`` inside ``a`` under warnings as errors: ``a.stop()`` raises the warning
    once everything is restored, and ``b`` holds again, as if ``a`` had never been entered."""
    original = inductor_utils.is_big_gpu
    a = ik.knobs(min_sms=40)
    b = ik.knobs(coordinate_descent_tuning=True)
    a.start()
    b.start()
    try:
        inductor_utils.is_big_gpu = lambda index=0: False  # someone else's patch over inductor_knobs' wrapper
        with pytest.warns(ik.errors.ExternalChangeWarning, match="is_big_gpu was replaced"):
            a.stop()
        assert b.active and cfg.coordinate_descent_tuning is True
    finally:
        b.stop()
        inductor_utils.is_big_gpu = original


def test_a_block_that_cannot_be_applied_again_after_an_out_of_order_exit_is_ended_and_named(patches, before, monkeypatch):
    """``b`` cannot be applied again after ``a`` below it exits (another thread took what it changes meanwhile):
    ``a.stop()`` reverts ``a`` and raises a ``KnobsError`` naming ``b``; ``b`` ends with nothing applied, and its own
    exit does nothing."""
    a = ik.knobs(coordinate_descent_tuning=True)
    b = ik.knobs(max_autotune=True)
    a.start()
    b.start()
    real = blocks.UndoContext._records

    def refused(self, life):
        if self is b:
            raise ConcurrentKnobsError("taken by another thread meanwhile")
        return real(self, life)

    monkeypatch.setattr(blocks.UndoContext, "_records", refused)
    with pytest.raises(KnobsError, match=r"knobs\(max_autotune=True\) was ended.*taken by another thread"):
        a.stop()
    monkeypatch.undo()
    assert not b.active and not a.active
    assert patches.read_override(cfg, "max_autotune") == before["max_autotune"]
    b.stop()  # nothing left to revert: no error


def test_a_stop_in_a_copy_of_the_entering_context_is_refused_and_reverts_nothing(patches, before):
    """``loop.call_soon(ctx.stop)`` or ``copy_context().run(ctx.stop)`` runs on the entering thread, in a copy of its
    Context, where a revert of per-context config would not reach the entering Context."""
    import contextvars

    ctx = ik.knobs(coordinate_descent_tuning=True)
    ctx.start()
    try:
        with pytest.raises(NotBlockOwner, match=r"copy of the contextvars\.Context"):
            contextvars.copy_context().run(ctx.stop)
        assert ctx.active and cfg.coordinate_descent_tuning is True
    finally:
        ctx.stop()


def test_a_stop_outside_the_copy_that_entered_says_so_and_the_copy_ends_it(patches, before):
    import contextvars

    ctx = ik.knobs(coordinate_descent_tuning=True)
    copy = contextvars.copy_context()
    copy.run(ctx.start)
    with pytest.raises(KnobsError, match=r"entered in another contextvars\.Context on this thread"):
        ctx.stop()
    copy.run(ctx.stop)


def test_an_out_of_order_exit_interrupted_at_any_line_leaves_torch_exact(patches, before):
    """``a.stop()`` with ``b`` and ``c`` above it, a KeyboardInterrupt at each of its lines, then every block still
    active stopped, innermost first: torch holds what it held before ``a`` (no value of ``a`` outlives it under
    ``b`` and ``c``), and no frame is left."""
    from interrupting import in_fresh_thread, injection_points, run_injected

    def make():
        return [
            ik.knobs(max_autotune=True, coordinate_descent_tuning=True),
            ik.knobs(max_autotune=False, max_autotune_gemm=True),
            ik.knobs(coordinate_descent_tuning=False, max_autotune=True),
        ]

    def state():
        return {key: patches.read_override(cfg, key) for key in KEYS}

    def points():
        for _ in range(2):  # the first run does once-only work
            made = make()
            for block in made:
                block.start()
            found = injection_points(made[0].stop)
            for block in reversed(made[1:]):
                block.stop()
        return found

    def once(at):
        wanted = state()
        made = make()
        for block in made:
            block.start()
        where = run_injected(made[0].stop, at)
        for block in reversed(made):
            if block.active:
                block.stop()
        return wanted, state(), where, len(blocks._FRAMES.get()), len(blocks._LIVE)

    found = in_fresh_thread(points, "an out-of-order exit")
    assert len(found) > 100, found  # every line of the exit, its reverts and the re-applies
    for at in found:
        wanted, got, where, frames, live = in_fresh_thread(lambda a=at: once(a), f"interrupt {at}")
        assert (got, frames, live) == (wanted, 0, 0), f"interrupted at {where}"


def test_generator_holding_a_block_finished_inside_another(patches, before):
    def gen():
        with ik.knobs(min_sms=10, coordinate_descent_tuning=True):
            yield 1
            yield 2

    it = gen()
    next(it)
    with ik.knobs(max_autotune=True, min_sms=60):
        it.close()  # the generator's block exits while the outer one is active
        assert gate.current_override() == gate.Override(60) and cfg.max_autotune is True
        assert patches.read_override(cfg, "coordinate_descent_tuning") == before["coordinate_descent_tuning"]


def test_stop_without_start_raises(before):
    ctx = ik.knobs(max_autotune=True)
    with pytest.raises(KnobsError, match="not active here"):
        ctx.stop()


def test_stop_in_another_thread_raises_and_leaves_the_starting_thread_alone(before, patches):
    outside = cfg.max_autotune
    ctx = ik.knobs(max_autotune=True)
    ctx.start()
    errors = []

    def other():
        try:
            ctx.stop()
        except KnobsError as err:
            errors.append(err)

    worker = threading.Thread(target=other, name="stopper")
    worker.start()
    worker.join()
    # On every torch (before 2.12 too, where config itself is process-global) only the owner ends a block:
    # the error names the block, its owner and the caller, and nothing was reverted.
    assert len(errors) == 1 and isinstance(errors[0], NotBlockOwner), errors
    assert "another thread" in str(errors[0]) and "MainThread" in str(errors[0]) and "stopper" in str(errors[0])
    assert cfg.max_autotune is True
    ctx.stop()
    assert cfg.max_autotune is outside


def test_decorated_generator_holds_knobs_around_each_resume(before):
    seen = []
    outside_value = cfg.max_autotune

    @ik.knobs(max_autotune=True)
    def gen():
        for _ in range(2):
            seen.append(cfg.max_autotune)
            yield cfg.max_autotune

    outside = []
    for value in gen():
        outside.append(cfg.max_autotune)
        assert value is True
    assert seen == [True, True] and outside == [outside_value] * 2


def test_decorated_async_generator_holds_knobs_around_each_resume(before):
    @ik.knobs(coordinate_descent_tuning=True)
    async def agen():
        for _ in range(2):
            yield cfg.coordinate_descent_tuning

    async def main():
        return [value async for value in agen()]

    assert asyncio.run(main()) == [True, True]


def test_pre_2_12_two_tasks_are_refused(before, patches, monkeypatch):
    if patches.config_is_thread_local:
        monkeypatch.setattr(type(patches), "config_is_thread_local", False)  # model torch < 2.12
    ctx = ik.knobs(max_autotune=True)
    other = ik.knobs(coordinate_descent_tuning=True)

    @ctx
    async def first(started, release):
        started.set()
        await release.wait()

    @other
    async def second():
        return "ran"

    async def main():
        started, release = asyncio.Event(), asyncio.Event()
        task = asyncio.create_task(first(started, release))
        await started.wait()
        try:
            with pytest.raises(ConcurrentKnobsError, match="asyncio task"):
                await second()
        finally:
            release.set()
            await task

    asyncio.run(main())


#: One of each kind of block; emulate_gpu enters on a CPU behind test_emulate's fake CUDA device.
BLOCK_KINDS = {
    "knobs": lambda: ik.knobs(min_sms=40, max_autotune=True, coordinate_descent_tuning=True),
    "force_gemm_autotune": lambda: ik.force_gemm_autotune(min_sms=40, coordinate_descent_tuning=True),
    "record_compiles": lambda: ik.record_compiles(),
    "no_stalls": lambda: ik.serving.no_stalls(lambda: None, on="record"),
    "no_stalls_raise": lambda: ik.serving.no_stalls(lambda: None, on="raise"),
    "cold_start_recorder": lambda: ColdStartRecorder(),
    "emulate_gpu": lambda: ik.emulate_gpu(sms=40),
    "sdpa_backends": lambda: ik.knobs(sdpa_backends="MATH"),  # a process-wide setting, under a claim
    "cudnn_sdpa_avoid_recompile": lambda: ik.knobs(cudnn_sdpa_avoid_recompile=True),  # an environment variable
}


@pytest.mark.parametrize("kind", BLOCK_KINDS)
def test_an_interrupt_at_any_line_of_enter_or_exit_leaves_torch_exact_and_never_hangs(kind, patches, request):
    """KeyboardInterrupt at each line of enter, then of exit, of every kind of block; then the exit again.

    Each run is in a fresh thread joined with a bound (a deadlock detector): a lock left held by the
    interrupt would block the retried exit, or the next run, for good.  Torch is exact afterwards
    (config, ``is_big_gpu`` and ``compile_fx`` by identity, no shared patch held, no install waiting for
    an import), and every lock of the undo path is free.  The first line event of ``__exit__`` precedes
    its ``try``: the block stays active there, and the retried exit reverts it.
    """
    if kind == "emulate_gpu":
        request.getfixturevalue("fake_cuda")  # skips where this torch's green contexts cannot be faked
    elif kind in SETTINGS_SHOWN and not _has(kind):
        pytest.skip(f"torch {torch.__version__} has no {kind}")
    else:
        request.getfixturevalue("fake_gpu")(40)
    print(interrupt_every_line(BLOCK_KINDS[kind], lambda: {**torch_state(patches), **block_state()}, kind))
    assert_locks_free()


def test_an_interrupted_exit_finishes_while_compile_fx_waits_for_its_import():
    """Before ``torch._inductor.compile_fx`` is imported the interception waits for that import (an
    ``_OnImport`` install whose lock the exit takes): a fresh interpreter runs the check there."""
    script = (
        "import sys\n"
        "import inductor_knobs as ik\n"
        "from interrupting import assert_locks_free, block_state, interrupt_every_line\n"
        "assert 'torch._inductor.compile_fx' not in sys.modules\n"
        "make = lambda: ik.force_gemm_autotune(min_sms=40, coordinate_descent_tuning=True)\n"
        "print(interrupt_every_line(make, block_state, 'force_gemm_autotune'))\n"
        "assert_locks_free()\n"
        "assert 'torch._inductor.compile_fx' not in sys.modules\n"
    )
    tests = os.path.dirname(os.path.abspath(__file__))
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [tests, os.environ.get("PYTHONPATH")]))}
    done = subprocess.run([sys.executable, "-c", script], env=env, capture_output=True, text=True, check=False)
    print(done.stdout)
    assert done.returncode == 0, done.stderr[-4000:]


# -- bad input gets nothing applied -------------------------------------------------------------------

from hypothesis import HealthCheck, given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

from inductor_knobs.env import activate_from_env, deactivate_env  # noqa: E402

FUZZ = settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
KNOB_VARS = [f"INDUCTOR_KNOBS_{n.upper()}" for n in ik.Knobs.fields()] + ["INDUCTOR_KNOBS_PRESET", "INDUCTOR_KNOBS_EMULATE_SMS"]
texts = st.one_of(
    st.sampled_from(["", " ", "abc", "-1", "0", "1025", "1.5", "true", "maybe", "{", "[]", "ATEN,BOGUS", "/proc/x"]),
    st.text(max_size=8),
)
bad_values = st.one_of(
    st.integers(-5, 5000),
    st.floats(allow_nan=True, allow_subnormal=False),
    st.text(max_size=6),
    st.none(),
    st.lists(st.integers(), max_size=2),
)
TRIED = {"env": 0, "api": 0, "leaks": 0}


@FUZZ
@given(
    env=st.dictionaries(st.sampled_from([*KNOB_VARS, "INDUCTOR_KNOBS_MIN_SM", "INDUCTOR_KNOBS_X"]), texts, min_size=1, max_size=3)
)
def test_fuzzed_env_applies_all_or_nothing(patches, fake_gpu, env):
    fake_gpu(40)
    state = torch_state(patches)
    TRIED["env"] += 1
    try:
        activate_from_env(env)
    except KnobsError:
        TRIED["leaks"] += torch_state(patches) != state
        assert torch_state(patches) == state
    else:
        deactivate_env()
        assert torch_state(patches) == state


@FUZZ
@given(name=st.sampled_from([*ik.Knobs.fields(), "min_sm", "config"]), value=bad_values)
def test_fuzzed_knobs_apply_all_or_nothing(patches, fake_gpu, name, value):
    fake_gpu(40)
    state = torch_state(patches)
    TRIED["api"] += 1
    try:
        with ik.knobs(**{name: value, "coordinate_descent_tuning": True}):
            pass
    except KnobsError:
        pass
    TRIED["leaks"] += torch_state(patches) != state
    assert torch_state(patches) == state


def test_fuzz_tally():
    print(f"bad-input fuzz: {TRIED['env']} env dicts, {TRIED['api']} API calls, {TRIED['leaks']} left anything applied")
    assert TRIED["leaks"] == 0


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"config": {"max_autotune_gemm_backends": "BOGUS"}}, "non-empty subset of"),
        ({"config": {"trace.debug_dir": 123}}, "a directory path"),
        ({"trace": "/proc/nope/dir"}, "is not writable"),
        ({"config": {"epilogue-fusion": "yes"}}, "epilogue_fusion='yes'.*allowed a bool"),
        ({"config": {"compile_threads": "four"}}, "allowed an int"),
    ],
)
def test_one_validator_for_named_knobs_and_config(before, kwargs, match):
    with pytest.raises(ik.errors.InvalidKnobValue, match=match), ik.knobs(**kwargs):
        pass


def test_config_keys_take_dashes_like_options(before):
    with ik.knobs(config={"epilogue-fusion": False}):
        assert cfg.epilogue_fusion is False


def test_bad_calls_name_the_fix():
    with pytest.raises(ik.errors.InvalidKnobValue, match=r"did you mean knobs\(min_sms=40\)"):
        ik.knobs(40)
    with pytest.raises(ik.errors.UnknownKnob, match="did you mean 'min_sms'"):
        ik.Knobs(min_sm=40)


def test_a_key_with_a_mutable_default_reverts_to_unset(patches, before):
    mutable = [
        k
        for k in patches.config_keys(cfg)
        if isinstance(cfg._config[k].default if hasattr(cfg._config[k], "default") else None, dict)
    ]
    if not mutable:
        pytest.skip(f"no dict-valued config key on torch {torch.__version__}")
    key = mutable[0]
    raw = patches.read_override(cfg, key)
    with ik.knobs(config={key: {}}):
        pass
    assert patches.read_override(cfg, key) is raw  # "unset" again, not a pinned copy


def test_a_claim_interrupted_at_any_line_of_its_apply_holds_nothing_once_reverted():
    """A process-global resource (Inductor config before torch 2.12) held by an interrupted enter: on torch 2.10 an
    interrupt between the hold and its record left the hold for good, and every later block of another thread was
    refused with ConcurrentKnobsError."""
    from interrupting import injection_points, run_injected

    from inductor_knobs.core import changes

    def holds() -> list:
        return list(changes._HOLDERS.get("test.resource", []))

    outer = changes.Claim("test.resource", "why", "outer")
    outer.apply()  # the same owner's outer block holds it too: an inner revert must not release that hold
    try:
        probe = changes.Claim("test.resource", "why", "probe")
        points = injection_points(probe.apply)
        probe.revert()
        for at in points:
            claim = changes.Claim("test.resource", "why", "inner")
            run_injected(claim.apply, at)
            claim.revert()
            assert [hold[1] for hold in holds()] == [outer], (at, holds())
    finally:
        outer.revert()
    assert holds() == []
