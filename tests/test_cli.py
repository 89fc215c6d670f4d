from __future__ import annotations

import json

from inductor_knobs.cli import main


def test_doctor_text(capsys):
    assert main(["doctor", "--min-sms", "40"]) == 0
    out = capsys.readouterr().out
    assert "patch module: torch_2_" in out and "GEMM backends" in out and "max-autotune" in out


def test_doctor_json(capsys, monkeypatch):
    monkeypatch.setenv("INDUCTOR_KNOBS_MIN_SMS", "nope")
    assert main(["doctor", "--json"]) == 1  # a bad variable is an error: the report still prints
    captured = capsys.readouterr()
    assert "INDUCTOR_KNOBS_MIN_SMS='nope'" in captured.err and "INDUCTOR_KNOBS_DISABLE=1" in captured.err
    report = json.loads(captured.out)
    assert report["patch_module"]["drift_ok"] is True
    assert "INDUCTOR_KNOBS_MIN_SMS" in report["env"]["error"]
    assert set(report["modes"]) >= {"default", "max-autotune"}
