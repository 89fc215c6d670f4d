"""Random nested enter / exit / exception sequences leave torch exactly as it was.

Also out-of-order exits, blocks held by generators and closed at a random later point, and
enters and exits with a ``KeyboardInterrupt`` injected at a random line (``sys.settrace``).
"""

from __future__ import annotations

import sys

import torch
import torch._inductor.utils as inductor_utils
import wrapt
from conftest import release_held_locks
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule

import inductor_knobs as ik
from inductor_knobs.core import torch_compat
from inductor_knobs.core.plan import config_values

KEYS = ["max_autotune", "max_autotune_gemm", "max_autotune_gemm_backends", "coordinate_descent_tuning",
        "triton.cudagraphs", "trace.enabled", "epilogue_fusion", "fx_graph_cache"]  # fmt: skip

knob_sets = st.fixed_dictionaries(
    {},
    optional={
        "min_sms": st.integers(1, 1024),
        "max_autotune": st.booleans(),
        "max_autotune_gemm": st.booleans(),
        "gemm_backends": st.sampled_from(["ATEN", "ATEN,TRITON", "TRITON,ATEN", "ATEN,CPP"]),
        "coordinate_descent_tuning": st.booleans(),
        "cudagraphs": st.booleans(),
        "trace": st.booleans(),
        "config": st.fixed_dictionaries({}, optional={"epilogue_fusion": st.booleans()}),
    },
)


_NAMERS: dict[str, object] = {}  # the modules with an is_big_gpu global, from a full scan of sys.modules
_SCANNED = [-1]  # len(sys.modules) at that scan


def _gate_namers():
    """The loaded modules that have an ``is_big_gpu`` global, rescanned in full whenever a module was added or removed.

    A scan of every module at every step was most of this test's time (about 1,000 scans of thousands of modules).
    """
    if len(sys.modules) != _SCANNED[0]:
        _NAMERS.clear()
        _NAMERS.update((name, m) for name, m in list(sys.modules.items()) if "is_big_gpu" in getattr(m, "__dict__", {}))
        _SCANNED[0] = len(sys.modules)
    return _NAMERS


def world():
    import torch._inductor.config as cfg

    patches = torch_compat.installed()
    gate = inductor_utils.is_big_gpu
    holders = sorted(name for name, m in _gate_namers().items() if m.__dict__.get("is_big_gpu") is gate)
    state = {
        "config": {k: (patches.read_override(cfg, k), getattr(cfg, k)) for k in KEYS},
        "gate": gate,
        "gate_holders": holders,
        "gate_cache": gate.cache_info().currsize,
    }
    if hasattr(torch, "compiler") and hasattr(torch.compiler, "config"):
        state["cache_key_tag"] = getattr(torch.compiler.config, "cache_key_tag", None)
    return state


def effective(stack, base):
    """What each named key must read now: the innermost remaining block that sets it, else the base."""
    import torch._inductor.config as cfg  # noqa: F401 - base holds the raw state

    values = {k: base["config"][k][1] for k in KEYS}
    for entry in stack:
        for key, value in config_values(ik.Knobs(**entry["spec"])).items():
            if key in values:
                values[key] = value
    return values


def now():
    import torch._inductor.config as cfg

    return {k: getattr(cfg, k) for k in KEYS}


def inject(at):
    """Raise KeyboardInterrupt at the ``at``-th line run inside inductor_knobs."""
    count = [0]

    def tracer(frame, event, arg):
        if "inductor_knobs" not in frame.f_code.co_filename:
            return None
        if event == "line":
            count[0] += 1
            if count[0] == at:
                raise KeyboardInterrupt
        return tracer

    return tracer


class NestedKnobs(RuleBasedStateMachine):
    def __init__(self):
        super().__init__()
        inductor_utils.is_big_gpu.cache_clear()
        self.base = world()
        self.stack = []  # {"spec", "exit": callable, "before": world or None once an out-of-order exit happened}

    def _push(self, spec, exit_fn, before):
        self.stack.append({"spec": spec, "exit": exit_fn, "before": before})
        assert now() == effective(self.stack, self.base)

    @rule(spec=knob_sets)
    def enter(self, spec):
        before = world()
        ctx = ik.knobs(**spec)
        ctx.__enter__()
        self._push(spec, lambda exc=(None, None, None): ctx.__exit__(*exc), before)

    @rule(spec=knob_sets)
    def enter_in_a_generator(self, spec):
        before = world()

        def held():
            with ik.knobs(**spec):
                yield

        gen = held()
        next(gen)
        self._push(spec, lambda exc=None: gen.close(), before)

    @precondition(lambda self: self.stack)
    @rule(with_exception=st.booleans())
    def exit(self, with_exception):
        entry = self.stack.pop()
        exc = (RuntimeError, RuntimeError("x"), None) if with_exception else (None, None, None)
        entry["exit"](exc)
        if entry["before"] is not None:
            assert world() == entry["before"]
        assert now() == effective(self.stack, self.base)

    @precondition(lambda self: len(self.stack) > 1)
    @rule(data=st.data())
    def exit_out_of_order(self, data):
        index = data.draw(st.integers(0, len(self.stack) - 2))
        entry = self.stack.pop(index)
        entry["exit"]((None, None, None))
        for other in self.stack:
            other["before"] = None  # snapshots taken with the removed block applied no longer hold
        assert now() == effective(self.stack, self.base)

    @rule(spec=knob_sets, at=st.integers(1, 400), during_exit=st.booleans())
    def interrupted(self, spec, at, during_exit):
        before = world()
        ctx = ik.knobs(**spec)
        if during_exit:
            ctx.__enter__()
        sys.settrace(inject(at))
        try:
            ctx.__exit__(None, None, None) if during_exit else ctx.__enter__()
        except KeyboardInterrupt:
            pass
        finally:
            sys.settrace(None)
            assert release_held_locks() == []  # a lock left held would block other threads for good
        # Whether the interrupt lands before or after the block is entered depends on how many lines run,
        # and that changes with inductor_knobs' caches between Hypothesis' replays. So the block is never
        # kept on the stack: the rules a step enables must not depend on state outside the machine.
        if ctx.active:  # entered fully (the interrupt came later), or the unguardable first line of __exit__
            ctx.__exit__(None, None, None)
        assert world() == before
        assert now() == effective(self.stack, self.base)

    @rule(bad=st.sampled_from([{"config": {"no_such_key": 1}}, {"config": {"epilogue_fusion": "x"}}]))
    def failed_enter(self, bad):
        before = world()
        try:
            ik.knobs(min_sms=40, cudagraphs=True, **bad).__enter__()
        except ik.KnobsError:
            pass
        else:  # pragma: no cover
            raise AssertionError("bad knobs were accepted")
        assert world() == before

    @invariant()
    def gate_installed_iff_min_sms_active(self):
        active = any(entry["spec"].get("min_sms") is not None for entry in self.stack)
        assert isinstance(inductor_utils.is_big_gpu, wrapt.FunctionWrapper) == active

    def teardown(self):
        while self.stack:
            self.stack.pop()["exit"]((None, None, None))
        assert world() == self.base


NestedKnobs.TestCase.settings = settings(
    max_examples=60, stateful_step_count=12, deadline=None, suppress_health_check=[HealthCheck.too_slow]
)
TestNestedKnobs = NestedKnobs.TestCase
