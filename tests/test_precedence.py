"""What a user set is what Inductor compiled with: the precedence rule and attestation (issue 10).

Every check reads the config *inside* Inductor's compile (``GraphLowering.__init__``, which
``compile_fx_inner`` runs for each forward, backward and inference graph), not the library's
own bookkeeping.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import warnings

import pytest
import torch
import torch._inductor.compile_fx as compile_fx_module
import torch._inductor.config as cfg
import torch._inductor.utils as inductor_utils
from conftest import inside_compile

import inductor_knobs as ik
from inductor_knobs import doctor
from inductor_knobs.ablation import spec
from inductor_knobs.core import attestation, gate, interception
from inductor_knobs.env import activate_from_env, deactivate_env

KEYS = ("triton.cudagraphs", "coordinate_descent_tuning", "max_autotune")


def mode(name: str) -> dict[str, object]:
    """What ``name`` sets on this torch (2.4-2.5 modes do not set coordinate_descent_tuning)."""
    return dict(torch._inductor.list_mode_options(name))


def _read() -> tuple[object, ...]:
    return (cfg.triton.cudagraphs, cfg.coordinate_descent_tuning, cfg.max_autotune, gate.current_override())


@pytest.fixture
def seen(monkeypatch, fresh_inductor):
    return inside_compile(monkeypatch, _read)


def _f(x):
    return (x @ x).relu() + 1


def test_knob_beats_mode_inside_a_block(seen):
    with ik.record_compiles() as rec, ik.knobs(cudagraphs=False, coordinate_descent_tuning=False, max_autotune=False):
        torch.compile(_f, mode="max-autotune")(torch.randn(8, 8))
    assert seen == [(False, False, False, None)]
    (attested,) = rec.attestations
    assert attested.ok and attested.graph == "inference"
    for key in KEYS:
        setting = next(s for s in attested.settings if s.key == key)
        overrode = mode("max-autotune").get(key)  # the mode's value that lost, if the mode sets the key
        assert (setting.asked, setting.compiled_with, setting.overrode, setting.source) == (False, False, overrode, "knobs")


def test_the_modes_other_keys_still_apply(seen):
    with ik.knobs(coordinate_descent_tuning=False):
        torch.compile(_f, mode="max-autotune-no-cudagraphs")(torch.randn(8, 8))
    assert seen == [(False, False, True, None)]


def test_options_lose_to_the_knob_too(seen):
    with ik.knobs(coordinate_descent_tuning=False):
        torch.compile(_f, options={"coordinate_descent_tuning": True, "max_autotune": True})(torch.randn(8, 8))
    assert seen == [(False, False, True, None)]


def test_no_knob_no_change(seen):
    expected = mode("max-autotune-no-cudagraphs").get("coordinate_descent_tuning", cfg.coordinate_descent_tuning)
    torch.compile(_f, mode="max-autotune-no-cudagraphs")(torch.randn(8, 8))
    assert seen[0][1:3] == (expected, True)
    assert not interception.INTERCEPTION.users


def test_env_activation_beats_mode(seen):
    try:
        activate_from_env({"INDUCTOR_KNOBS_COORDINATE_DESCENT_TUNING": "0"})
        with ik.record_compiles() as rec:
            torch.compile(_f, mode="max-autotune-no-cudagraphs")(torch.randn(8, 8))
    finally:
        deactivate_env()
    assert seen == [(False, False, True, None)]
    assert rec.attestations[0].settings[0].source == "env"
    assert not interception.INTERCEPTION.users


def test_ik_compile_reports_what_compiled(seen):
    compiled = ik.compile(_f, ik.Knobs(coordinate_descent_tuning=False), mode="max-autotune-no-cudagraphs")
    assert "not compiled yet" in str(compiled.knobs_report())
    compiled(torch.randn(8, 8))
    assert seen == [(False, False, True, None)]
    report = compiled.knobs_report()
    assert report.compiled_with() == {"coordinate_descent_tuning": False, "max_autotune": True}
    assert {s.key: s.source for s in report.attestations[0].settings} == {
        "coordinate_descent_tuning": "ik.compile",
        "max_autotune": "mode:max-autotune-no-cudagraphs",
    }


def test_forward_lazy_backward_and_recompile_keep_the_knobs(seen, fake_gpu):
    fake_gpu(40)
    fn = torch.compile(lambda x: (x * 2).sin().sum(), mode="max-autotune-no-cudagraphs")
    with ik.record_compiles() as rec:
        with ik.knobs(coordinate_descent_tuning=False, min_sms=40):
            loss = fn(torch.randn(6, requires_grad=True))
            fn(torch.randn(9, requires_grad=True))  # a recompile (dynamic size)
        loss.backward()  # compiled lazily, after the block exited
    override = gate.Override(40)
    assert [s[1:] for s in seen] == [(False, True, override)] * len(seen)
    assert len(seen) >= 3
    assert "backward" in [a.graph for a in rec.attestations]
    assert all(a.ok for a in rec.attestations)
    assert gate.current_override() is None and not gate.is_installed()


def test_gate_verdict_is_attested_per_cuda_device(fake_gpu):
    """The verdict comes from the wrapper's own rule, per CUDA device the graph's inputs live on."""
    fake_gpu(40)
    snapshot = attestation.Snapshot(
        ik.core.torch_compat.installed(), {}, gate.Override(41), {}, (), None
    )  # torch_compat reached through the package
    with ik.knobs(min_sms=41):
        inputs = [torch.empty(1, device="meta")]
        attested = attestation.attest(snapshot, (None, inputs), {})
        assert attested.gate == () and attested.gate_problem is None
        assert gate.verdict(0, gate.Override(41)) == gate.Verdict("cuda:0", 40, 41, False)
        assert gate.verdict(0, gate.Override(40)).verdict is True


def test_forcing_env_var_inside_the_compile_raises_knob_not_applied(seen, patches, monkeypatch):
    entry = cfg._config["coordinate_descent_tuning"]
    if not hasattr(entry, "env_value_force"):
        pytest.skip(f"torch {torch.__version__} has no env_name_force")
    with pytest.raises(ik.KnobNotApplied) as err, ik.knobs(coordinate_descent_tuning=False):
        # as TORCHINDUCTOR_COORDINATE_DESCENT_TUNING would, were the key declared env_name_force
        monkeypatch.setattr(entry, "env_value_force", True)
        torch.compile(_f)(torch.randn(8, 8))
    message = str(err.value)
    assert "coordinate_descent_tuning=False" in message and "with coordinate_descent_tuning=True" in message
    assert "env-forced" in message
    assert not gate.is_installed() and not interception.INTERCEPTION.users


@pytest.mark.parametrize("gate_override", [{}, {"min_sms": 40}], ids=["knob", "knob-and-salted-gate"])
def test_on_mismatch_warn_reports_and_compiles(seen, monkeypatch, gate_override):
    entry = cfg._config["coordinate_descent_tuning"]
    if not hasattr(entry, "env_value_force"):
        pytest.skip(f"torch {torch.__version__} has no env_name_force")
    with ik.record_compiles() as rec, ik.knobs(coordinate_descent_tuning=False, on_mismatch="warn", **gate_override):
        monkeypatch.setattr(entry, "env_value_force", True)
        with pytest.warns(ik.errors.KnobNotAppliedWarning, match="env-forced"):
            torch.compile(_f)(torch.randn(8, 8))
    (attested,) = rec.attestations
    assert not attested.ok and attested.mismatches[0].came_from == "env-forced"


def test_forced_key_is_refused_at_enter_with_nothing_applied(patches, monkeypatch):
    entry = cfg._config["coordinate_descent_tuning"]
    if not hasattr(entry, "env_value_force"):
        pytest.skip(f"torch {torch.__version__} has no env_name_force")
    monkeypatch.setattr(entry, "env_value_force", True)
    before = patches.read_override(cfg, "max_autotune")
    with pytest.raises(ik.KnobNotApplied, match="env-forced"), ik.knobs(max_autotune=True, coordinate_descent_tuning=False):
        pass
    assert patches.read_override(cfg, "max_autotune") is before
    assert not interception.INTERCEPTION.users


def test_a_value_shadowing_the_key_on_the_module_is_refused_at_enter(patches, monkeypatch):
    # A third-party patcher that writes the module's __dict__ directly: plain getattr (and so Inductor)
    # finds that value before ConfigModule.__getattr__ is ever asked, and the read-back must too.
    monkeypatch.setitem(vars(cfg), "max_autotune", False)
    assert cfg.max_autotune is False
    before = patches.read_override(cfg, "max_autotune")
    with pytest.raises(ik.KnobNotApplied, match="max_autotune=True did not take"), ik.knobs(max_autotune=True):
        pass
    assert patches.read_override(cfg, "max_autotune") is before
    assert not interception.INTERCEPTION.users


def _unsloth_like_setattr(monkeypatch):
    """Replace the config module's ``__setattr__`` as Unsloth does (2026): a plain assignment also
    rewrites the process default, and this one pins ``coordinate_descent_tuning`` to True."""
    cls = type(cfg)
    original = cls.__setattr__
    for entry in cfg._config.values():  # what it rewrites is put back after the test
        if hasattr(entry, "default"):
            monkeypatch.setattr(entry, "default", entry.default)

    def patched_setattr(self, name, value):
        if name == "coordinate_descent_tuning":
            value = True
        if name in getattr(self, "_config", {}) and hasattr(self._config[name], "default"):
            self._config[name].default = value
        original(self, name, value)

    monkeypatch.setattr(cls, "__setattr__", patched_setattr)
    return patched_setattr


def test_foreign_setattr_cannot_make_the_revert_inexact(patches, monkeypatch):
    entry = cfg._config["max_autotune"]
    default = getattr(entry, "default", None)
    before = patches.read_override(cfg, "max_autotune")
    _unsloth_like_setattr(monkeypatch)
    with ik.knobs(max_autotune=True):
        assert cfg.max_autotune is True
    assert patches.read_override(cfg, "max_autotune") is before
    assert getattr(entry, "default", None) == default


def test_foreign_setattr_overriding_inside_the_compile_is_named(seen, monkeypatch, patches):
    raw = patches.read_override(cfg, "coordinate_descent_tuning")
    _unsloth_like_setattr(monkeypatch)
    with cfg.patch(coordinate_descent_tuning=False):
        patch_goes_through_setattr = cfg.coordinate_descent_tuning is True
    patches.write_override(cfg, "coordinate_descent_tuning", raw)  # config.patch pinned what it read
    if patch_goes_through_setattr:  # torch < 2.15: config.patch assigns with setattr
        with pytest.raises(ik.KnobNotApplied, match="foreign __setattr__"), ik.knobs(coordinate_descent_tuning=False):
            torch.compile(_f, mode="max-autotune-no-cudagraphs")(torch.randn(8, 8))
    else:  # torch 2.15: config.patch writes raw values, so the foreign setattr cannot interfere
        with ik.knobs(coordinate_descent_tuning=False):
            torch.compile(_f, mode="max-autotune-no-cudagraphs")(torch.randn(8, 8))
        assert [s[1] for s in seen] == [False]
    patches.write_override(cfg, "coordinate_descent_tuning", raw)  # torch's own patch inside the compile pinned it
    report = doctor.collect()
    assert any("__setattr__" in line for line in report["precedence"]["foreign_setattr"])


def test_numerics_implication_is_named(seen, patches):
    if not hasattr(cfg, "_implications") or "emulate_precision_casts" not in cfg._implications:
        pytest.skip(f"torch {torch.__version__} has no config implications (2.15+)")
    with pytest.raises(ik.KnobNotApplied, match="implication: numerics="), ik.knobs(config={"emulate_precision_casts": False}):
        torch.compile(_f, options={"numerics": "strict"})(torch.randn(8, 8))


def test_replaced_gate_is_a_knob_not_applied(seen, fake_gpu, monkeypatch):
    fake_gpu(40)
    original = inductor_utils.is_big_gpu
    try:
        with pytest.raises(ik.KnobNotApplied, match="is_big_gpu"), ik.knobs(min_sms=40):
            inductor_utils.is_big_gpu = lambda *a, **k: True  # a third-party import-time replacement
            with pytest.warns(ik.errors.ExternalChangeWarning):  # our undo leaves the foreign object alone
                try:
                    torch.compile(_f)(torch.randn(8, 8))
                finally:
                    pass
    finally:
        inductor_utils.is_big_gpu = original


def test_interception_is_restored_by_identity():
    before = compile_fx_module.compile_fx
    with ik.knobs(max_autotune=True):
        assert compile_fx_module.compile_fx is not before
        with ik.knobs(coordinate_descent_tuning=True):
            pass
        assert interception.INTERCEPTION.users == 1
    assert compile_fx_module.compile_fx is before and interception.INTERCEPTION.users == 0


def test_ablation_arm_compiles_what_it_asks_and_shows_the_override(tmp_path):
    arm = spec.parse_arm("cdt_off:mode=max-autotune-no-cudagraphs,coordinate_descent_tuning=false")
    mode_sets_it = "coordinate_descent_tuning" in mode("max-autotune-no-cudagraphs")  # 2.6+
    expected = ["coordinate_descent_tuning=False overrides mode max-autotune-no-cudagraphs's True"]
    assert arm.conflicts() == (expected if mode_sets_it else [])
    out = tmp_path / "ablation"
    cmd = [sys.executable, "-m", "inductor_knobs", "ablate", "--workload", "small_mlp", "--smoke"]
    cmd += ["--device", "cpu", "--arm", "cdt_off:mode=max-autotune-no-cudagraphs,coordinate_descent_tuning=false"]
    cmd += ["--out", str(out), "--strict"]
    env = {k: v for k, v in os.environ.items() if not k.startswith("INDUCTOR_KNOBS_")}
    done = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=600)
    assert done.returncode == 0, done.stderr[-2000:]
    assert ("overrides mode max-autotune-no-cudagraphs's True" in done.stderr) is mode_sets_it
    results = json.loads((out / "results.json").read_text())
    (run,) = results["runs"]
    values = {s["key"]: s["compiled_with"] for a in run["attestations"] for s in a["settings"]}
    assert values["coordinate_descent_tuning"] is False and run["not_applied"] == []


def test_a_not_applied_arm_is_flagged_and_strict_fails(tmp_path):
    from inductor_knobs.ablation import report

    run = {"arm": "a", "repeat": 0, "ok": True, "samples_ms": [1.0], "compile_seconds": 1.0, "autotune_seconds": 0.0}
    run |= {"peak_memory_bytes": 0, "max_abs_diff": 0.0, "mismatch": False, "kernels": {}}
    run["not_applied"] = ["coordinate_descent_tuning=False compiled as True (env-forced: ...)"]
    results = {"workload": "w", "device": "cpu", "repeats": 1, "baseline": "a", "arms": [{"name": "a"}], "runs": [run]}
    text = report.markdown(results)
    assert "**NOT APPLIED**" in text and "did not measure what it asked for" in text


def test_doctor_states_the_precedence():
    report = doctor.collect()
    assert report["precedence"]["order"] == "emulation > knob > options > mode > process default"
    assert isinstance(report["precedence"]["forcing_env_vars"], list)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        text = doctor.render(report)
    assert "precedence" in text


def test_a_mode_that_is_not_a_dict_is_refused_before_anything_compiles(monkeypatch, patches):
    calls = []

    def fake_compile_fx(model_, example_inputs_=(), inner_compile=None, config_patches=None):
        calls.append(config_patches)

    monkeypatch.setattr(compile_fx_module, "compile_fx", fake_compile_fx)
    raw = patches.read_override(cfg, "coordinate_descent_tuning")
    with pytest.raises(ik.errors.InvalidKnobValue, match=r"not a dict.*coordinate_descent_tuning.*torch"):
        with ik.knobs(coordinate_descent_tuning=False):
            compile_fx_module.compile_fx("gm", config_patches="/path/to/an/aot/package")
    assert calls == [] and patches.read_override(cfg, "coordinate_descent_tuning") is raw


def test_a_foreign_compile_fx_patch_made_inside_a_block_leaves_ours_inert_after_it(monkeypatch, fresh_inductor):
    """A third-party patch of ``compile_fx`` made inside a block wraps our interception; the exit leaves
    that patch in place (with a warning), and our wrapper inside it passes later compiles through: a
    block that ended enforces nothing, as read inside Inductor's compile."""
    real = compile_fx_module.compile_fx
    wanted = not cfg.coordinate_descent_tuning
    seen = inside_compile(monkeypatch, lambda: cfg.coordinate_descent_tuning)
    try:
        with pytest.warns(ik.errors.ExternalChangeWarning, match="compile_fx"), ik.knobs(coordinate_descent_tuning=wanted):
            ours = compile_fx_module.compile_fx
            compile_fx_module.compile_fx = lambda *args, **kwargs: ours(*args, **kwargs)
        assert compile_fx_module.compile_fx is not real and not interception.INTERCEPTION.users
        torch.compile(_f)(torch.randn(8, 8))
        assert seen == [not wanted]
    finally:
        compile_fx_module.compile_fx = real
