"""ik.compile: knobs during every compilation of the result (recompiles, lazy backward), nowhere else."""

from __future__ import annotations

import pytest
import torch
from conftest import inside_compile

import inductor_knobs as ik
from inductor_knobs.core import gate


@pytest.fixture
def seen(monkeypatch, fresh_inductor, cfg):
    """What each call of Inductor's inner compile saw: (max_autotune, coordinate_descent_tuning, gate override)."""
    return inside_compile(monkeypatch, lambda: (cfg.max_autotune, cfg.coordinate_descent_tuning, gate.current_override()))


def test_knobs_hold_in_every_recompile_and_nowhere_else(seen, cfg):
    before = (cfg.max_autotune, gate.current_override())
    compiled = ik.compile(lambda x: x.relu() * 2, ik.Knobs(min_sms=40, max_autotune=True))
    for n in (3, 5, 7):  # static, then a recompile to a dynamic size, then a cache hit
        compiled(torch.randn(n))
        assert (cfg.max_autotune, gate.current_override()) == before
    assert len(seen) == 2
    assert all(s[0] is True and s[2] is not None and s[2].min_sms == 40 for s in seen)


def test_two_models_keep_their_own_knobs(seen):
    a = ik.compile(torch.nn.Linear(4, 4), ik.Knobs(max_autotune=True))
    b = ik.compile(torch.nn.Linear(4, 4), ik.Knobs(max_autotune=False, coordinate_descent_tuning=True))
    with torch.no_grad():
        for n in (2, 3):
            a(torch.randn(n, 4))
            b(torch.randn(n, 4))
    assert [s[:2] for s in seen] == [(True, False), (False, True), (True, False), (False, True)]


def test_lazy_backward_compiles_under_the_knobs(seen):
    model = ik.compile(torch.nn.Linear(4, 4), ik.Knobs(max_autotune=True, min_sms=7))
    model(torch.randn(2, 4)).sum().backward()
    assert len(seen) == 2  # forward, then the backward graph AOTAutograd compiled on first backward
    assert all(s[0] is True and s[2].min_sms == 7 for s in seen)


def test_mode_then_options_then_knobs_and_the_report(seen):
    compiled = ik.compile(
        lambda x: x + 1,
        ik.Knobs(coordinate_descent_tuning=False),
        mode="max-autotune-no-cudagraphs",
        options={"max-autotune": False, "epilogue_fusion": True},
    )
    report = compiled.knobs_report()
    assert report is ik.knobs_report(compiled)
    sources = {s.key: (s.value, s.source) for s in report.settings}
    assert sources["max_autotune"] == (False, "options")
    assert sources["coordinate_descent_tuning"] == (False, "knobs")
    assert sources["epilogue_fusion"] == (True, "options")
    assert "source" in str(report)
    compiled(torch.randn(3))
    assert seen == [(False, False, None)]


def test_mode_is_expanded_with_torchs_own_table():
    from torch._inductor import list_mode_options

    report = ik.compile(lambda x: x, mode="max-autotune").knobs_report()
    assert report.as_dict() == list_mode_options("max-autotune", None)
    assert {s.source for s in report.settings} == {"mode:max-autotune"}


@pytest.mark.parametrize(
    ("kwargs", "error", "match"),
    [
        ({"mode": "max-autotun"}, ik.errors.UnknownKnob, "did you mean 'max-autotune'"),
        ({"options": {"max_autotun": True}}, ik.errors.UnknownKnob, "options key.*did you mean 'max_autotune'"),
        ({"options": {"max_autotune": "yes"}}, ik.errors.InvalidKnobValue, "max_autotune='yes'"),
        ({"fullgrap": True}, ik.errors.UnknownKnob, "torch.compile argument 'fullgrap'.*fullgraph"),
        ({"backend": "eager"}, ik.errors.InvalidKnobValue, "supplies the backend"),
        ({"knobs": {"min_sms": 1}}, ik.errors.InvalidKnobValue, "allowed an ik.Knobs"),
    ],
)
def test_bad_input_is_refused_before_anything_changes(kwargs, error, match, cfg):
    before = (cfg.max_autotune, gate.is_installed())
    with pytest.raises(error, match=match):
        ik.compile(lambda x: x, **kwargs)
    assert (cfg.max_autotune, gate.is_installed()) == before


def test_knobs_report_needs_an_ik_compile_result():
    with pytest.raises(ik.errors.InvalidKnobValue, match=r"not an ik\.compile result"):
        ik.knobs_report(torch.compile(lambda x: x))
