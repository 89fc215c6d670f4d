"""Random nested enter / exit / exception sequences leave torch exactly as it was."""

from __future__ import annotations

import sys

import torch
import torch._inductor.utils as inductor_utils
import wrapt
from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule

import inductor_knobs as ik
from inductor_knobs import torch_compat

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


def world():
    import torch._inductor.config as cfg

    patches = torch_compat.installed()
    gate = inductor_utils.is_big_gpu
    holders = sorted(name for name, m in list(sys.modules.items()) if getattr(m, "__dict__", {}).get("is_big_gpu") is gate)
    state = {
        "config": {k: (patches.read_override(cfg, k), getattr(cfg, k)) for k in KEYS},
        "gate": gate,
        "gate_holders": holders,
        "gate_cache": gate.cache_info().currsize,
    }
    if hasattr(torch, "compiler") and hasattr(torch.compiler, "config"):
        state["cache_key_tag"] = getattr(torch.compiler.config, "cache_key_tag", None)
    return state


class NestedKnobs(RuleBasedStateMachine):
    def __init__(self):
        super().__init__()
        inductor_utils.is_big_gpu.cache_clear()
        self.stack = []  # (context, world before enter)

    @rule(spec=knob_sets)
    def enter(self, spec):
        before = world()
        ctx = ik.knobs(**spec)
        ctx.__enter__()
        self.stack.append((ctx, before))

    @precondition(lambda self: self.stack)
    @rule(with_exception=st.booleans())
    def exit(self, with_exception):
        ctx, before = self.stack.pop()
        exc = (RuntimeError, RuntimeError("x"), None) if with_exception else (None, None, None)
        ctx.__exit__(*exc)
        assert world() == before

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
        active = any(ctx.knobs.min_sms is not None for ctx, _ in self.stack)
        assert isinstance(inductor_utils.is_big_gpu, wrapt.FunctionWrapper) == active

    def teardown(self):
        while self.stack:
            ctx, before = self.stack.pop()
            ctx.__exit__(None, None, None)
            assert world() == before


NestedKnobs.TestCase.settings = settings(max_examples=60, stateful_step_count=12, deadline=None)
TestNestedKnobs = NestedKnobs.TestCase
