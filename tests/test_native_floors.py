"""torch's own floors: the recompile stance under ``no_stalls(on="raise")``, deterministic mode in the attestation and
``doctor``, ignored config keys in ``doctor``, the profiler's stderr markers, the emulation sentence."""

from __future__ import annotations

import os
import subprocess
import sys
import threading

import pytest
import torch
import torch._dynamo.eval_frame as eval_frame
from torch._dynamo.testing import CompileCounter

import inductor_knobs as ik
from inductor_knobs import doctor
from inductor_knobs.ablation import explain, report
from inductor_knobs.core import torch_compat

pytestmark = pytest.mark.usefixtures("fresh_inductor")


@pytest.fixture
def stance_floor():
    if torch_compat.installed(strict=False).recompile_stance is None:
        pytest.skip(f"torch {torch.__version__} has no set_stance('fail_on_recompile') (2.6+)")


def _warm_fn():
    counter = CompileCounter()
    fn = torch.compile(lambda x: x * 2 + 1, backend=counter)
    fn(torch.ones(3))
    return fn, counter


def test_raise_guard_refuses_a_recompile_and_puts_the_stance_back(stance_floor):
    fn, counter = _warm_fn()
    before = eval_frame._stance
    guard = ik.serving.no_stalls(fn, profile="off")
    assert torch.equal(guard(torch.ones(3)), torch.full((3,), 3.0))
    with pytest.raises(ik.serving.StallDuringServing, match="fail_on_recompile") as caught:
        guard(torch.ones(4, 2))  # a new rank: Dynamo would recompile
    assert counter.frame_count == 1  # nothing compiled
    assert isinstance(caught.value.__cause__, RuntimeError)
    assert caught.value.stall.primary == "dynamo_compile" and guard.stall_count == 1
    assert eval_frame._stance is before  # the same DynamoStance object, after the refused call too


def test_raise_guard_block_holds_the_stance_and_restores_on_an_exception(stance_floor):
    fn, counter = _warm_fn()
    with torch.compiler.set_stance("eager_on_recompile"):  # a stance of the user's own, put back exactly
        mine = eval_frame._stance
        with pytest.raises(ValueError), ik.serving.no_stalls(fn, profile="off") as guard:
            assert eval_frame._stance.stance == "fail_on_recompile"
            with pytest.raises(ik.serving.StallDuringServing):
                guard(torch.ones(2, 2))
            raise ValueError("the serving loop failed")
        assert eval_frame._stance is mine
    assert counter.frame_count == 1


def test_stance_is_held_while_any_raise_guard_serves(stance_floor):
    """The stance is one global of the process: a per-call guard ending inside another's block must not drop it."""
    fn, _ = _warm_fn()
    before = eval_frame._stance
    outer = ik.serving.no_stalls(fn, profile="off")
    inner = ik.serving.no_stalls(fn, profile="off")
    seen = []
    with outer:
        thread = threading.Thread(target=lambda: seen.append(inner(torch.ones(3)) is not None))
        thread.start()
        thread.join()
        assert seen == [True] and eval_frame._stance.stance == "fail_on_recompile"
    assert eval_frame._stance is before


def test_record_guard_sets_no_stance(stance_floor):
    fn, counter = _warm_fn()
    guard = ik.serving.no_stalls(fn, on="record", profile="off")
    guard(torch.ones(4, 2))
    assert counter.frame_count == 2  # torch recompiled: only on="raise" holds the floor


def _mm(x):
    return (x @ x).relu() + 1


def _deterministic_mode():
    cfg = torch._inductor.config
    if not hasattr(cfg, "deterministic"):
        pytest.skip(f"torch {torch.__version__} has no Inductor deterministic mode (2.10+)")
    return cfg.patch(deterministic=True)


def test_deterministic_mode_makes_asked_gemm_autotuning_not_applied():
    with _deterministic_mode(), pytest.raises(ik.KnobNotApplied, match="deterministic mode") as caught:
        with ik.knobs(max_autotune=True):
            torch.compile(_mm)(torch.randn(8, 8))
    assert "max_autotune=True" in str(caught.value) and "without benchmarking" in str(caught.value)


def test_deterministic_mode_with_on_mismatch_warn_warns_and_compiles():
    with _deterministic_mode(), ik.record_compiles() as rec, ik.knobs(max_autotune_gemm=True, on_mismatch="warn"):
        with pytest.warns(ik.errors.KnobNotAppliedWarning, match="deterministic mode"):
            torch.compile(_mm)(torch.randn(8, 8))
    (attested,) = rec.attestations
    assert [s.key for s in attested.mismatches] == ["max_autotune_gemm"]


def test_doctor_names_deterministic_bans_and_ignored_keys(monkeypatch):
    cfg = torch._inductor.config
    if not hasattr(cfg, "deterministic"):
        pytest.skip(f"torch {torch.__version__} has no Inductor deterministic mode (2.10+)")
    monkeypatch.setenv("INDUCTOR_KNOBS_MAX_AUTOTUNE", "1")
    monkeypatch.setenv("INDUCTOR_KNOBS_CONFIG", '{"autotune_fallback_to_aten": false}')
    monkeypatch.setenv("TORCHINDUCTOR_SEARCH_AUTOTUNE_CACHE", "1")
    with cfg.patch(deterministic=True):
        text = doctor.render(doctor.collect())
    assert "deterministic mode bans what INDUCTOR_KNOBS_MAX_AUTOTUNE asks for (max_autotune)" in text
    assert "IGNORED by torch" in text and "autotune_fallback_to_aten (set by INDUCTOR_KNOBS_CONFIG)" in text
    assert "search_autotune_cache (set by TORCHINDUCTOR_SEARCH_AUTOTUNE_CACHE)" in text


def test_doctor_flags_nothing_when_no_ignored_key_is_set(monkeypatch):
    for name in ("INDUCTOR_KNOBS_CONFIG", "TORCHINDUCTOR_AUTOTUNE_FALLBACK_TO_ATEN", "TORCHINDUCTOR_SEARCH_AUTOTUNE_CACHE"):
        monkeypatch.delenv(name, raising=False)
    assert "IGNORED by torch" not in doctor.render(doctor.collect())


def test_sampled_profiler_prints_no_usdt_markers(capfd):
    from torch.profiler import ProfilerActivity, profile

    def own_profiler_prints() -> bool:
        with profile(activities=[ProfilerActivity.CPU]):
            pass
        return "profiler_start" in capfd.readouterr().err

    own_profiler_prints()  # the process's first start initialises libkineto (and may print whatever is done)
    prints = own_profiler_prints()  # torch 2.13: True
    fn = torch.compile(lambda x: x.sin(), backend="eager")
    ik.serving.warmup(fn, shapes=[4, 8, 16], factory=torch.ones, probes=None)
    assert "profiler_start" not in capfd.readouterr().err
    assert own_profiler_prints() is prints  # libkineto's severity is put back: the user's own profiler as before


def test_the_first_profiler_start_of_a_process_prints_no_usdt_marker():
    """libkineto sets its severity from KINETO_LOG_LEVEL at the process's first start (torch 2.13 printed one
    ``profiler_start`` line there); the variable is gone afterwards."""
    script = (
        "import os, torch\n"
        "from inductor_knobs.serving.sampled_profiler import sampling_profiler\n"
        "with sampling_profiler():\n"
        "    torch.ones(2) + 1\n"
        "assert 'KINETO_LOG_LEVEL' not in os.environ\n"
    )
    env = {k: v for k, v in os.environ.items() if k != "KINETO_LOG_LEVEL"}
    done = subprocess.run([sys.executable, "-c", script], env=env, capture_output=True, text=True, check=False)
    assert done.returncode == 0, done.stderr[-2000:]
    assert "profiler_start" not in done.stderr and "profiler_stop" not in done.stderr


def test_emulated_report_says_what_emulation_is():
    results = {"workload": "mm", "emulate_sms": "T4", "environment": {"device_name": "H100"}, "arms": [], "runs": []}
    head = report._head(results, [])
    assert "SM confinement on the host GPU" in head and "not a small GPU's numbers" in head
    assert "memory bandwidth and L2" in explain.EMULATION_MEANS
