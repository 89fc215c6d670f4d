"""ik.serving.warmup's cuDNN avoid-recompile trial: recommended only where it measured a gain, with its cost beside it.

The decision is tested with injected measurements (the real gain needs a GPU with cuDNN attention); the
two fresh processes, each with its own value of the variable, run here on CPU.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest
import torch

import inductor_knobs as ik
from inductor_knobs.errors import InvalidKnobValue
from inductor_knobs.serving.sdpa_trial import TrialArm, decide, measure

#: Shaped like the issue's H100 eager numbers: a new length 60.3 ms -> 12.3 ms, the steady call 2.4 -> 3.8 ms.
OFF = TrialArm(False, steady_ms=2.4, new_shape_ms=57.9, probes=3)
ON = TrialArm(True, steady_ms=3.8, new_shape_ms=8.5, probes=3)
#: A graph that passes the causal mask as a bias: torch falls back to a plan per shape, nothing gained.
ON_WITH_BIAS = TrialArm(True, steady_ms=2.5, new_shape_ms=57.0, probes=3)


def test_a_measured_gain_is_recommended_with_its_steady_cost_beside_it():
    verdict = decide(OFF, ON)
    assert verdict.recommended and verdict.gain_ms == pytest.approx(49.4) and verdict.cost_ms == pytest.approx(1.4)
    assert "57.9 ms" in verdict.text and "8.5 ms" in verdict.text and "2.40 ms to 3.80 ms (+58%)" in verdict.text
    assert "cudnn_sdpa_avoid_recompile=True" in verdict.text


@pytest.mark.parametrize("on", [ON_WITH_BIAS, TrialArm(True, 2.4, 57.5, 3), TrialArm(True, 2.4, 80.0, 3)])
def test_no_gain_is_not_recommended_but_reported(on):
    verdict = decide(OFF, on)
    assert not verdict.recommended and "measured no gain on this model" in verdict.text


def test_a_tiny_gain_is_below_the_floor():
    assert not decide(TrialArm(False, 1.0, 1.5, 3), TrialArm(True, 1.0, 0.7, 3)).recommended  # 0.8 ms < 1 ms
    assert not decide(TrialArm(False, 1.0, 100.0, 3), TrialArm(True, 1.0, 90.0, 3)).recommended  # 10% < 20%


def _warm(trial):
    return ik.serving.warmup(
        lambda x: x.sin(), shapes=[8, 16, 32], factory=lambda n: torch.randn(n), probes=[12], cudnn_sdpa_trial=trial
    )


def test_warmup_recommends_it_only_with_a_gain():
    report = _warm(lambda: (OFF, ON))
    (trial,) = report.trials
    assert trial.recommended and trial.text in report.fixes
    assert report.to_dict()["trials"][0]["gain_ms"] == pytest.approx(49.4)
    report = _warm(lambda: (OFF, ON_WITH_BIAS))
    assert not any("TORCH_CUDNN_SDPA_AVOID_RECOMPILE" in fix for fix in report.fixes)
    assert "measured, not recommended: TORCH_CUDNN_SDPA_AVOID_RECOMPILE=1 measured no gain" in report.table()


def test_a_builder_needs_shapes_and_probes_and_is_refused_before_any_call():
    calls = []
    with pytest.raises(InvalidKnobValue, match="cudnn_sdpa_trial='m:build' needs shapes"):
        ik.serving.warmup(calls.append, inputs=[1], cudnn_sdpa_trial="m:build")
    assert calls == []
    with pytest.raises(InvalidKnobValue, match="allowed 'module:function'"):
        measure("no_colon", [8], [12])
    with pytest.raises(InvalidKnobValue, match="needs shapes to warm"):  # before: a StatisticsError from the run
        measure("m:build", [], [12])


def test_each_arm_runs_in_a_fresh_process_with_its_own_value(monkeypatch):
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join([str(Path(__file__).parent), os.environ.get("PYTHONPATH", "")]))
    off, on = measure("sdpa_trial_model:build", [8, 16], [12])
    assert (off.avoid_recompile, on.avoid_recompile) == (False, True) and off.probes == on.probes == 1
    assert off.steady_ms > 0 and on.steady_ms > 0


@pytest.mark.gpu
@pytest.mark.parametrize("builder", ["build_cuda", "build_cuda_bias"])
def test_gpu_cudnn_attention_reads_the_variable_in_each_fresh_process(monkeypatch, builder):
    """On a GPU with cuDNN attention (torch 2.9+): each arm's process read its own value (torch's once-per-process
    warnings say so), and with a mask passed as a bias torch declines the path.  The timings are printed for
    the lead, not asserted."""
    if not torch.cuda.is_available():
        pytest.skip("needs CUDA")
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join([str(Path(__file__).parent), os.environ.get("PYTHONPATH", "")]))
    off, on = measure(f"sdpa_trial_model:{builder}", [128, 256, 384, 512], [200, 300, 450])
    verdict = decide(off, on)
    print(verdict.text)
    assert not off.torch_said and any("experimental" in said for said in on.torch_said)
    assert any("only works without bias" in said for said in on.torch_said) == (builder == "build_cuda_bias")
