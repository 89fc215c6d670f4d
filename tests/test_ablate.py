"""inductor-knobs ablate: arm syntax, validation before anything runs, the runner, the report."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from inductor_knobs import cli
from inductor_knobs.ablation import command, report, spec, workloads
from inductor_knobs.ablation.runner import Plan
from inductor_knobs.errors import InvalidKnobValue, UnknownKnob

TESTS = Path(__file__).parent


@pytest.fixture(autouse=True)
def _workload_importable(monkeypatch):
    monkeypatch.syspath_prepend(str(TESTS))
    monkeypatch.setenv("PYTHONPATH", str(TESTS))


def plan_for(*argv: str) -> Plan:
    parser = cli.argparse.ArgumentParser()
    command.add_parser(parser.add_subparsers(dest="command"))
    return command.build_plan(parser.parse_args(["ablate", *argv]))


# -- arms ---------------------------------------------------------------------------------


def test_arm_values_may_hold_commas():
    arm = spec.parse_arm("both:gemm_backends=ATEN,TRITON,min_sms=40,mode=max-autotune")
    assert arm.knobs == {"gemm_backends": "ATEN,TRITON", "min_sms": "40"}
    assert arm.compile_args == {"mode": "max-autotune"}
    assert arm.env() == {"INDUCTOR_KNOBS_GEMM_BACKENDS": "ATEN,TRITON", "INDUCTOR_KNOBS_MIN_SMS": "40"}


def test_eager_arm():
    assert spec.parse_arm("eager").eager
    assert spec.parse_arm("plain:eager=true").eager


@pytest.mark.parametrize(
    ("text", "error", "match"),
    [
        ("a:min_smz=4", UnknownKnob, r"arm 'a'.*did you mean 'min_sms'"),
        ("a:min_sms=0", InvalidKnobValue, r"arm 'a'.*INDUCTOR_KNOBS_MIN_SMS=.*from 1 to"),
        ("a:mode=max-autotun", UnknownKnob, r"did you mean 'max-autotune'"),
        ("a:fullgraph=maybe", InvalidKnobValue, "true or false"),
        ('a:config={"max_autotun": true}', UnknownKnob, "max_autotune"),
        (":min_sms=4", InvalidKnobValue, "needs a name"),
        ("a:ATEN", InvalidKnobValue, "NAME:knob=value"),
    ],
)
def test_bad_arms_fail_before_anything_runs(text, error, match):
    with pytest.raises(error, match=match):
        spec.parse_arm(text)


def test_grid_is_a_cartesian_product():
    arms = spec.parse_grid(["coordinate_descent_tuning=true,false", "gemm_backends=ATEN|ATEN,TRITON"])
    assert [a.name for a in arms] == [
        "coordinate_descent_tuning=true gemm_backends=ATEN",
        "coordinate_descent_tuning=true gemm_backends=ATEN,TRITON",
        "coordinate_descent_tuning=false gemm_backends=ATEN",
        "coordinate_descent_tuning=false gemm_backends=ATEN,TRITON",
    ]


@pytest.mark.parametrize("item", ["cudagraphs=", "=1,2", "cudagraphs"])
def test_empty_grid_is_an_error(item):
    with pytest.raises(InvalidKnobValue, match="at least one value"):
        spec.parse_grid([item])


def test_toml_file(tmp_path):
    path = tmp_path / "a.toml"
    path.write_text(
        'workload = "small_mlp"\nrepeats = 2\n[[arm]]\nname = "eager"\n[[arm]]\nname = "ma"\nmode = "max-autotune"\n'
        "[grid]\ncoordinate_descent_tuning = [true, false]\n"
    )
    loaded = spec.load_toml(str(path))
    assert [a.name for a in loaded["arms"]] == ["eager", "ma", "coordinate_descent_tuning=1", "coordinate_descent_tuning=0"]
    assert loaded["workload"] == "small_mlp" and loaded["repeats"] == 2


def test_example_toml_is_valid():
    assert len(spec.load_toml(str(TESTS.parent / "examples" / "ablation.toml"))["arms"]) >= 4


@pytest.mark.parametrize("content", ["not = [toml", 'colour = "red"'])
def test_bad_toml(tmp_path, content):
    path = tmp_path / "a.toml"
    path.write_text(content)
    with pytest.raises(InvalidKnobValue, match="ablation file"):
        spec.load_toml(str(path))


def test_unreadable_toml():
    with pytest.raises(InvalidKnobValue, match="cannot be read"):
        spec.load_toml("/nonexistent/a.toml")


# -- the plan ---------------------------------------------------------------------------------


def test_default_plan_on_cpu():
    plan = plan_for("--device", "cpu")
    assert [a.name for a in plan.arms] == ["default", "max-autotune", "max-autotune-no-cudagraphs", "force_gemm_autotune"]
    assert plan.arms[-1].knobs == {"preset": "force_gemm_autotune", "min_sms": "1"}
    assert plan.baseline == "default" and plan.workload == "reference_mlp" and plan.repeats == 3


def test_jobs_interleave_and_shards_partition_them():
    plan = plan_for("--device", "cpu", "--arm", "eager", "--arm", "b:max_autotune=1", "--repeats", "2")
    assert [(j["arm"]["name"], j["repeat"]) for j in plan.jobs()] == [("eager", 0), ("b", 0), ("eager", 1), ("b", 1)]
    shards = [Plan(**{**plan.__dict__, "shard": (i, 3)}).jobs() for i in range(3)]
    assert sorted(j["index"] for s in shards for j in s) == [0, 1, 2, 3]


@pytest.mark.parametrize(
    ("argv", "error", "match"),
    [
        (["--workload", "resnet9000"], UnknownKnob, "did you mean|Known"),
        (["--workload", "ablation_workload:missing"], UnknownKnob, "missing"),
        (["--workload", "ablation_workload:NOT_CALLABLE"], UnknownKnob, "not a factory"),
        (["--gpus", "0,7"], InvalidKnobValue, r"GPU\(s\) \[0, 7\] that do not exist"),
        (["--shard", "3/2"], InvalidKnobValue, "0 <= i < n"),
        (["--arm", "a:cudagraphs=1", "--baseline", "b"], InvalidKnobValue, "not an arm"),
        (["--arm", "a", "--arm", "a"], InvalidKnobValue, "repeated: a"),
        (["--repeats", "0"], InvalidKnobValue, ">= 1"),
    ],
)
def test_bad_command_lines_fail_before_any_arm_runs(argv, error, match):
    with pytest.raises(error, match=match):
        plan_for("--device", "cpu", *argv)


def test_user_workload_protocol():
    work = workloads.build("ablation_workload:tiny", "cpu", True)
    assert len(work.inputs) == 1 and work.inputs[0][0].shape == (4, 16)


# -- end to end (real processes) -------------------------------------------------------------


GRAPH_BREAK = "ablate --device cpu --workload ablation_workload:graph_break --quick".split()


def test_end_to_end_with_a_crashing_arm(tmp_path, capsys):
    arms = "--arm eager --arm whole:fullgraph=true --arm default".split()
    status = cli.main([*GRAPH_BREAK, *arms, "--out", str(tmp_path), "--plot"])
    out = capsys.readouterr().out
    assert status == 0  # one arm failed, the others finished
    assert "| whole | FAILED (1/1)" in out and "whole repeat 0 failed" in out
    results = json.loads((tmp_path / "results.json").read_text())
    assert [r["ok"] for r in results["runs"]] == [True, False, True]
    assert results["runs"][0]["samples_ms"] and results["environment"]["doctor"]["versions"]
    assert (tmp_path / "results.csv").read_text().startswith("arm,median_ms")
    assert (tmp_path / "results.png").stat().st_size > 0
    assert cli.main([*GRAPH_BREAK, "--arm", "whole:fullgraph=true", "--strict"]) == 1


def test_default_ablation_quick(tmp_path, capsys):
    """What CI runs: the embedded default, reduced (one process per arm, small shapes)."""
    assert cli.main(["ablate", "--quick", "--device", "cpu", "--out", str(tmp_path)]) == 0
    out = capsys.readouterr().out
    for arm in ("default", "max-autotune", "max-autotune-no-cudagraphs", "force_gemm_autotune"):
        assert f"| {arm} |" in out
    results = json.loads((tmp_path / "results.json").read_text())
    assert all(r["ok"] for r in results["runs"]) and not any(r["mismatch"] for r in results["summary"])


# -- the report (synthetic data) ---------------------------------------------------------------


def fake_results(base_ms, other_ms, other_kernel="triton_mm_1"):
    def run(arm, samples, kernel, index):
        return {
            "ok": True,
            "arm": arm,
            "repeat": 0,
            "index": index,
            "samples_ms": samples,
            "compile_seconds": 1.0,
            "autotune_seconds": 0.5,
            "peak_memory_bytes": 2**20,
            "max_abs_diff": 0.0,
            "mismatch": arm == "b",
            "kernels": {"mm(8x8, 8x8)": kernel},
        }

    return {
        "workload": "w",
        "device": "cpu",
        "repeats": 1,
        "baseline": "a",
        "arms": [{"name": "a"}, {"name": "b"}, {"name": "c"}],
        "runs": [
            run("a", base_ms, "mm", 0),
            run("b", other_ms, other_kernel, 1),
            {"ok": False, "arm": "c", "repeat": 0, "index": 2, "error": "RuntimeError: boom", "traceback": "x\ny"},
        ],
    }


def test_summary_speedup_overlap_and_flags():
    rows = report.summarize(fake_results([2.0, 2.1, 2.2, 2.3], [1.0, 1.1, 1.2, 1.3]))
    a, b, c = rows
    assert a["speedup"] == 1.0 and b["speedup"] == pytest.approx(2.15 / 1.15)
    assert not b["overlaps_baseline"] and b["mismatch"] and c["error"] == "RuntimeError: boom"
    text = report.markdown(fake_results([2.0, 2.1, 2.2, 2.3], [2.05, 2.1, 2.2, 2.25]))
    assert "~" in text and "MISMATCH" in text and "c repeat 0 failed: RuntimeError: boom" in text


def test_compare_and_merge():
    old, new = fake_results([2.0] * 4, [1.0] * 4), fake_results([2.0] * 4, [0.5] * 4, other_kernel="triton_mm_7")
    text = report.compare(old, new)
    assert "| b | 1.0000 | 0.5000 | 0.500 |" in text and "mm(8x8, 8x8)" in text
    part0 = {**old, "runs": old["runs"][:1]}
    part1 = {**old, "runs": old["runs"][1:]}
    assert report.merge([part1, part0])["runs"] == old["runs"]
    with pytest.raises(InvalidKnobValue, match="different ablations"):
        report.merge([old, {**old, "workload": "other"}])


def test_merge_and_compare_from_the_command_line(tmp_path, capsys):
    paths = []
    for i, part in enumerate((fake_results([1.0], [2.0]), fake_results([1.0], [3.0]))):
        paths.append(tmp_path / f"{i}.json")
        paths[-1].write_text(json.dumps(part))
    assert cli.main(["ablate", "--compare", str(paths[0]), str(paths[1])]) == 0
    assert "| b | 2.0000 | 3.0000 | 1.500 |" in capsys.readouterr().out
    assert cli.main(["ablate", "--merge", str(paths[0]), "--out", str(tmp_path / "m")]) == 0
    assert (tmp_path / "m" / "results.json").exists()
