"""warmup and no_autotune on CPU: the reference case of mm-autotune-per-shape.txt, scaled to a CPU."""

from __future__ import annotations

import logging
import random

import pytest
import torch
import torch._dynamo
from packaging.version import Version

import inductor_knobs as ik
from inductor_knobs.serving.autotune_guard import AutotuneDuringServingWarning

WEIGHT = torch.randn(4, 64, 32)


def mlp(x):
    """The reference TestMLP's GEMM, batched so that Inductor's CPU templates autotune it."""
    return torch.bmm(x, WEIGHT)


def hidden_states(seq_len):
    x = torch.randn(4, seq_len, 64)
    torch._dynamo.mark_dynamic(x, 1)
    return x


def test_warmup_then_random_lengths_autotune_nothing(cpu_autotune):
    compiled = ik.compile(mlp, ik.Knobs(**cpu_autotune))
    report = ik.serving.warmup(compiled, shapes=[56, 102, 204], factory=hidden_states)
    assert [len(s.compiles) for s in report.steps] == [1, 0, 0]  # mark_dynamic: one graph for all lengths
    assert sum(not r.from_cache for r in report.records) >= 1
    assert "first call s" in report.table()

    lengths = random.Random(0).choices(range(51, 205), k=200)
    with ik.serving.no_autotune() as guard:
        for n in lengths:
            compiled(hidden_states(n))
    assert guard.violations == []


def test_guard_names_recompile_reason_op_and_shape(fresh_inductor):
    # The guard refuses the recompile itself, at Dynamo's compile event, before Inductor would autotune
    # anything: so no autotuning knobs here (each autotuned compile builds a C++ GEMM template; the
    # autotune records are the next test's).
    compiled = ik.compile(mlp, ik.Knobs())
    ik.serving.warmup(compiled, inputs=[torch.randn(4, 56, 64)])  # static: only seq_len 56 is warm
    with pytest.raises(ik.serving.AutotuneDuringServing) as caught, ik.serving.no_autotune():
        compiled(torch.randn(4, 204, 64))
    message = str(caught.value)
    assert "recompile" in message
    if Version(torch.__version__.split("+")[0]) >= Version("2.5"):  # 2.4 has no side-effect-free reason reader
        assert "expected 56, actual 204" in message
    assert "x=torch.float32[4, 204, 64]" in message
    assert isinstance(caught.value.event, ik.CompileEvent)
    # Nothing stays broken: outside the guard the same call compiles and runs.
    assert compiled(torch.randn(4, 204, 64)).shape == (4, 204, 32)


def test_warn_lets_the_request_through_and_reports_the_autotune(cpu_autotune):
    compiled = ik.compile(mlp, ik.Knobs(**cpu_autotune))
    with pytest.warns(AutotuneDuringServingWarning) as warned, ik.serving.no_autotune(on="warn") as guard:
        out = compiled(torch.randn(4, 56, 64))
    assert out.shape == (4, 56, 32)
    messages = [str(w.message) for w in warned]
    assert any(m.startswith("Dynamo compile") for m in messages)
    assert any("autotune benchmarking" in m and "bmm(4x56x64, 4x64x32) benchmarked" in m for m in messages)
    assert [type(v).__name__ for v in guard.violations] == ["CompileEvent", "AutotuneRecord"]


def test_log_reaction(fresh_inductor, caplog):
    with caplog.at_level(logging.WARNING, logger="inductor_knobs.serving.warmup"), ik.serving.no_autotune(on="log") as guard:
        torch.compile(lambda x: x.exp(), backend="eager")(torch.randn(3))  # a Dynamo compile: no Inductor build needed
    assert len(guard.violations) == 1
    assert "Dynamo compile" in caplog.text


def test_cache_hits_are_not_violations(fresh_inductor):
    compiled = torch.compile(lambda x: x * 3, backend="eager")
    compiled(torch.randn(5))
    with ik.serving.no_autotune() as guard:
        compiled(torch.randn(5))
    assert guard.violations == []


@pytest.mark.parametrize("bad", [{"on": "explode"}, {"on": None}])
def test_bad_reaction(bad):
    with pytest.raises(ik.errors.InvalidKnobValue, match=r"no_autotune.*allowed raise, warn, record"):
        ik.serving.no_autotune(**bad)


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({}, "either inputs"),
        ({"inputs": [1], "shapes": [1], "factory": int}, "either inputs"),
        ({"shapes": [1]}, "factory"),
        ({"inputs": [1], "calls_per_input": 0}, "calls_per_input"),
    ],
)
def test_bad_warmup_arguments(kwargs, match):
    with pytest.raises(ik.errors.InvalidKnobValue, match=match):
        ik.serving.warmup(lambda x: x, **kwargs)


def test_warmup_accepts_args_kwargs_and_single_values(fresh_inductor):
    calls = []
    report = ik.serving.warmup(lambda *a, **k: calls.append((a, k)), inputs=[(1, 2), {"x": 3}, 4], calls_per_input=1)
    assert calls == [((1, 2), {}), ((), {"x": 3}), ((4,), {})]
    assert [s.index for s in report.steps] == [0, 1, 2]
