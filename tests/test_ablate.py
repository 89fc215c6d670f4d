"""inductor-knobs ablate: arm syntax, validation before anything runs, the runner, the report."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import time
import uuid
from pathlib import Path

import pytest

from inductor_knobs import cli
from inductor_knobs.ablation import (
    build,
    command,
    compare,
    files,
    fingerprint,
    job,
    merge,
    options,
    outdir,
    report,
    signals,
    spec,
    summary,
    workers,
    workloads,
)
from inductor_knobs.ablation.errors import MergeRefused
from inductor_knobs.ablation.plan import Plan
from inductor_knobs.core import setup
from inductor_knobs.errors import InvalidKnobValue, UnknownKnob

TESTS = Path(__file__).parent


@pytest.fixture(autouse=True)
def _workload_importable(monkeypatch):
    monkeypatch.syspath_prepend(str(TESTS))
    monkeypatch.setenv("PYTHONPATH", str(TESTS))


def plan_for(*argv: str) -> Plan:
    parser = cli.argparse.ArgumentParser()
    options.add_parser(parser.add_subparsers(dest="command"))
    return build.build_plan(parser.parse_args(["ablate", *argv]))


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
        ("a:min_smz=4", UnknownKnob, r"--arm a: unknown knob 'min_smz'.*did you mean 'min_sms'"),
        ("a:min_sms=0", InvalidKnobValue, r"--arm a: min_sms=0 is invalid on torch .*from 1 to"),
        ("a:preset=nope", UnknownKnob, r"--arm a: unknown preset 'nope'"),
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


def test_a_bad_knob_value_is_named_as_the_user_wrote_it(capsys, tmp_path):
    import torch

    assert cli.main(["ablate", "--device", "cpu", "--arm", "x:gemm_backends=ATEN,FOO"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "INDUCTOR_KNOBS_" not in err  # a variable the user never set
    assert f"--arm x: gemm_backends='ATEN,FOO' is invalid on torch {torch.__version__}: allowed a non-empty subset of " in err
    assert "ATEN" in err.split("allowed")[1] and "TRITON" in err.split("allowed")[1]
    toml = tmp_path / "a.toml"
    toml.write_text('[[arm]]\nname = "x"\ngemm_backends = "ATEN,FOO"\n')
    with pytest.raises(InvalidKnobValue, match=r"^\[\[arm\]\] 'x' in --config '.*a\.toml': gemm_backends='ATEN,FOO' is invalid"):
        spec.load_toml(str(toml))
    with pytest.raises(InvalidKnobValue, match=r"^--grid min_sms=0 is invalid on torch .*from 1 to"):
        spec.parse_grid(["min_sms=1,0"])


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
    assert [a.name for a in plan.arms] == ["default", "max-autotune-no-cudagraphs"]  # CPU has no SM gate to test
    assert plan.baseline == "default" and plan.workload == "gemm_mlp" and plan.repeats == 3 and plan.main_job
    assert plan.parallel == 1 and not plan.quick and plan.iters == 20


def test_jobs_interleave_and_shards_partition_them():
    plan = plan_for("--device", "cpu", "--arm", "eager", "--arm", "b:max_autotune=1", "--repeats", "3")
    assert [(j["arm"]["name"], j["repeat"]) for j in plan.jobs()] == [
        ("eager", 0),
        ("b", 0),
        ("eager", 1),
        ("b", 1),
        ("eager", 2),
        ("b", 2),
    ]
    shards = [Plan(**{**plan.__dict__, "shard": (i, 4)}).jobs() for i in range(4)]
    assert sorted(j["index"] for s in shards for j in s) == [0, 1, 2, 3, 4, 5]


@pytest.mark.parametrize(
    ("argv", "error", "match"),
    [
        (["--workload", "resnet9000"], UnknownKnob, "did you mean|Known"),
        (["--workload", "ablation_workload:missing"], UnknownKnob, "missing"),
        (["--workload", "ablation_workload:NOT_CALLABLE"], UnknownKnob, "not a factory"),
        (["--gpus", "0,7"], InvalidKnobValue, r"GPU\(s\) \[0, 7\] that do not exist"),
        (["--shard", "3/2"], InvalidKnobValue, "0 <= i < n"),
        (["--arm", "a:cudagraphs=1", "--baseline", "b"], InvalidKnobValue, "not an arm"),
        (["--arm", "a:max_autotune=1", "--arm", "a:max_autotune=0"], InvalidKnobValue, "repeated: a"),
        (["--repeats", "0"], InvalidKnobValue, ">= 3"),
        (["--repeats", "2"], InvalidKnobValue, "too few processes per arm.*--smoke"),
    ],
)
def test_bad_command_lines_fail_before_any_arm_runs(argv, error, match):
    with pytest.raises(error, match=match):
        plan_for("--device", "cpu", *argv)


def test_user_workload_protocol():
    work = workloads.build("ablation_workload:tiny", "cpu", True)
    assert len(work.inputs) == 1 and work.inputs[0][0].shape == (4, 16)


# -- end to end (real processes) -------------------------------------------------------------


GRAPH_BREAK = "ablate --device cpu --workload ablation_workload:graph_break --smoke".split()


def test_end_to_end_with_a_crashing_arm(tmp_path, capsys):
    arms = "--arm eager --arm whole:fullgraph=true --arm default".split()
    status = cli.main([*GRAPH_BREAK, *arms, "--out", str(tmp_path), "--plot"])
    out = capsys.readouterr().out
    assert status == 0  # one arm failed, the others finished
    assert "| whole | FAILED (1/1)" in out and "whole repeat 0 failed" in out
    results = json.loads((tmp_path / "results.json").read_text())
    assert [r["ok"] for r in results["runs"]] == [True, False, True]
    assert results["runs"][0]["samples_ms"] and results["environment"]["doctor"]["versions"]
    assert isinstance(results["wall_seconds"], float) and results["schema"] == files.SCHEMA
    assert all(r["kernel_ms"] is None for r in results["runs"] if r["ok"])  # CPU: no GPU kernel time, no crash
    assert {"load_before", "load_after", "start_s", "end_s", "cpu_seconds"} <= set(results["runs"][0])
    header = (tmp_path / "results.csv").read_text().splitlines()[0].split(",")
    assert {"arm", "median_ms", "speedup_low", "speedup_high", "verdict", "kernel_ms"} <= set(header)
    assert (tmp_path / "results.png").stat().st_size > 0
    # every record has its own run id and the fingerprint its worker reported, the crashed arm's too
    import torch

    ids = [uuid.UUID(r["run_id"]) for r in results["runs"]]
    assert len(set(ids)) == 3 and all(i.version == 4 for i in ids)
    prints = {r["arm"]: r["fingerprint"] for r in results["runs"]}
    for fp in prints.values():
        assert fp["torch"] == torch.__version__ and fp["gpu"] is None and fp["gpu_sms"] is None and fp["cuda_driver"] is None
        assert fp["workload"]["workload"] == "ablation_workload:graph_break" and fp["workload"]["source"].startswith("sha256:")
        assert fp["workload_hash"] == prints["eager"]["workload_hash"]
    assert prints["whole"]["settings"]["compile_args"] == {"fullgraph": True} and not prints["whole"]["settings"]["eager"]
    assert prints["eager"]["settings"] == {**prints["default"]["settings"], "eager": True}
    # --strict: any failed run fails the command (the exit status is computed from the runs, here the same
    # three merged back, so no worker process runs again)
    merged = ["ablate", "--merge", str(tmp_path / "results.json")]
    assert cli.main([*merged, "--strict"]) == 1 and cli.main(merged) == 0


def test_default_ablation_smoke(tmp_path, capsys):
    """What CI runs: the main job, reduced (--smoke: one process per arm, small shapes, no intervals)."""
    assert cli.main(["ablate", "--smoke", "--device", "cpu", "--out", str(tmp_path)]) == 0
    out = capsys.readouterr().out
    for arm in ("default", "max-autotune-no-cudagraphs"):
        assert f"| {arm} |" in out
    assert "smoke run: no confidence intervals" in out and "it tests no SM gate" in out
    assert "**Where the time went**" in out and "| all runs (sum) | 2 |" in out
    results = json.loads((tmp_path / "results.json").read_text())
    assert all(r["ok"] for r in results["runs"]) and not any(r["mismatch"] for r in results["summary"])
    assert all(r["gemm_calls"] for r in results["runs"])  # read from each arm's generated code


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


def three_processes(results, spread=0.02):
    """``results`` with every successful run repeated as three processes (samples scaled 1 ± spread)."""
    runs = []
    for r in results["runs"]:
        for i, scale in enumerate((1 - spread, 1.0, 1 + spread) if r["ok"] else (1.0,)):
            runs.append({**r, "repeat": i, "samples_ms": [s * scale for s in r.get("samples_ms", [])]})
    return {**results, "repeats": 3, "runs": runs}


def test_summary_speedup_intervals_and_flags():
    rows = summary.summarize(three_processes(fake_results([2.0, 2.1, 2.2, 2.3], [1.0, 1.1, 1.2, 1.3])))
    a, b, c = rows
    assert a["speedup"] == 1.0 and b["speedup"] == pytest.approx(2.15 / 1.15)
    assert b["verdict"] == "faster" and b["speedup_low"] <= b["speedup"] <= b["speedup_high"]
    assert b["mismatch"] and c["error"] == "RuntimeError: boom" and b["processes"] == 3
    text = report.markdown(three_processes(fake_results([2.0, 2.1, 2.2, 2.3], [2.05, 2.1, 2.2, 2.25])))
    assert "no detectable difference" in text and "MISMATCH" in text and "c repeat 0 failed: RuntimeError: boom" in text


FINGERPRINT = {
    "inductor_knobs": "0.1.0",
    "torch": "2.13.0",
    "triton": "3.5.0",
    "cuda": "12.8",
    "cuda_driver": "12.8",
    "gpu": "NVIDIA H100 80GB HBM3",
    "gpu_capability": "sm_90",
    "gpu_sms": 132,
    "torch_env": {"TORCH_LOGS": "recompiles"},
    "workload": {"workload": "w", "device": "cuda", "quick": False, "seed": 0, "iters": 20, "warmup": 3, "source": None},
    "workload_hash": "0123456789abcdef",
}


def fingerprinted(results, **changes):
    """``results`` with a fresh ``run_id`` and a fingerprint on every run (``changes`` replace fields of it;
    ``knobs`` the arm's effective knobs)."""
    knobs = changes.pop("knobs", {"on_mismatch": "warn"})
    runs = []
    for run in results["runs"]:
        settings = {"knobs": knobs, "knobs_digest": "d", "compile_args": {}, "eager": False, "emulate": None}
        print_ = {**FINGERPRINT, "settings": settings, **changes}
        runs.append({**run, "run_id": str(uuid.uuid4()), "fingerprint": print_})
    return {**results, "runs": runs}


def shards(results):
    """``results`` split into two shards by job index (0/2 and 1/2)."""
    return [{**results, "runs": [r for r in results["runs"] if r["index"] % 2 == i]} for i in (0, 1)]


def two_repeats(results):
    """``results`` with a second repeat of every run (job indexes 3..5), so that two shards share every arm."""
    again = [{**r, "repeat": 1, "index": r["index"] + len(results["runs"])} for r in results["runs"]]
    return {**results, "repeats": 2, "runs": results["runs"] + again}


def test_compare_and_merge():
    old, new = fake_results([2.0] * 4, [1.0] * 4), fake_results([2.0] * 4, [0.5] * 4, other_kernel="triton_mm_7")
    text = compare.compare(old, new)
    assert "| b | 1.0000 | 0.5000 | 0.500 |" in text and "mm(8x8, 8x8)" in text
    assert "| 1.00 | 1.00 |" in text and "reused binaries" not in text
    new["runs"][1]["kernel_cache"] = "shared"  # b's only run reused kept Triton binaries: its compile time is marked
    assert "| 1.00 | 1.00 (reused binaries) |" in compare.compare(old, new)
    part0, part1 = shards(fingerprinted(old))
    merged = merge.merge([part1, part0])
    assert [r["index"] for r in merged["runs"]] == [0, 1, 2] and "mixed" not in merged
    with pytest.raises(MergeRefused, match=r"file 2 is not a shard of the ablation in file 1: its arms are \['a', 'b'\]"):
        merge.merge([part0, {**part1, "arms": part1["arms"][:2]}])


def write_parts(tmp_path, *parts):
    paths = []
    for i, part in enumerate(parts):
        paths.append(tmp_path / f"shard-{i}.json")
        paths[-1].write_text(json.dumps(part))
    return [str(p) for p in paths]


def test_merge_and_compare_from_the_command_line(tmp_path, capsys):
    paths = write_parts(tmp_path, fake_results([1.0], [2.0]), fake_results([1.0], [3.0]))
    assert cli.main(["ablate", "--compare", *paths]) == 0
    assert "| b | 2.0000 | 3.0000 | 1.500 |" in capsys.readouterr().out
    shard_paths = write_parts(tmp_path, *shards(fingerprinted(fake_results([1.0], [2.0]))))
    assert cli.main(["ablate", "--merge", *shard_paths, "--out", str(tmp_path / "m")]) == 0
    merged = json.loads((tmp_path / "m" / "results.json").read_text())
    assert merged["merged_files"] == shard_paths and len(merged["runs"]) == 3 and "mixed" not in merged
    assert "MIXED" not in (tmp_path / "m" / "results.md").read_text()


def test_a_merge_without_every_shard_is_partial_and_counts_the_processes_it_has(tmp_path, capsys):
    """Shards 0 and 1 of 3 (two arms, three repeats): each arm has 2 of its 3 processes."""
    two_arms = fake_results([1.0, 1.1], [2.0, 2.1])
    two_arms = {**two_arms, "arms": two_arms["arms"][:2], "runs": two_arms["runs"][:2], "repeats": 3}
    runs = [{**r, "repeat": k, "index": r["index"] + 2 * k} for k in range(3) for r in two_arms["runs"]]
    whole = fingerprinted({**two_arms, "runs": runs})
    parts = [{**whole, "shard": [i, 3], "runs": [r for r in whole["runs"] if r["index"] % 3 == i]} for i in range(3)]
    paths = write_parts(tmp_path, *parts)
    assert cli.main(["ablate", "--merge", paths[0], paths[1], "--out", str(tmp_path / "m")]) == 0
    merged = json.loads((tmp_path / "m" / "results.json").read_text())
    assert merged["partial"] is True and merged["missing_shards"] == ["2/3"] and merged["planned_runs"] == 6
    text = (tmp_path / "m" / "results.md").read_text()
    assert "2 process(es) per arm (of 3 planned)," in text and "3 process(es) per arm" not in text
    assert "**PARTIAL**: shard(s) 2/3 not merged: 4 of 6 runs" in text and "With 2 processes per arm" in text
    capsys.readouterr()
    assert cli.main(["ablate", "--merge", *paths, "--out", str(tmp_path / "all")]) == 0
    merged = json.loads((tmp_path / "all" / "results.json").read_text())
    assert merged["partial"] is False and "missing_shards" not in merged and "planned_runs" not in merged
    text = (tmp_path / "all" / "results.md").read_text()
    assert "3 process(es) per arm, " in text and "PARTIAL" not in text


def test_merge_refuses_the_same_run_twice_even_with_allow_mixed(tmp_path, capsys):
    """The same shard given twice would count every one of its processes twice."""
    (path,) = write_parts(tmp_path, fingerprinted(fake_results([1.0], [2.0])))
    for extra in ([], ["--allow-mixed"]):
        assert cli.main(["ablate", "--merge", path, path, *extra]) == 2
        err = capsys.readouterr().err
        assert err.count("\n") == 1 and "is twice in " + path in err and "(--allow-mixed does not allow duplicates)" in err
        assert "run " in err and "a repeat 0, job 0" in err
    # files from before run ids: an identical record twice is the same run
    (tmp_path / "old").mkdir()
    (old,) = write_parts(tmp_path / "old", fake_results([1.0], [2.0]))
    assert cli.main(["ablate", "--merge", old, old, "--allow-mixed"]) == 2
    assert "the same run counted twice" in capsys.readouterr().err


@pytest.mark.parametrize(
    ("change", "field", "first", "other"),
    [
        ({"torch": "2.12.0"}, "torch", "'2.13.0'", "'2.12.0'"),
        ({"triton": None}, "triton", "'3.5.0'", "None"),
        ({"gpu": "NVIDIA L4", "gpu_sms": 58}, "gpu", "'NVIDIA H100 80GB HBM3'", "'NVIDIA L4'"),
        ({"gpu_capability": "sm_121"}, "gpu_capability", "'sm_90'", "'sm_121'"),
        (
            {"torch_env": {"TORCH_LOGS": "recompiles", "TORCHINDUCTOR_MAX_AUTOTUNE": "1"}},
            "torch_env.TORCHINDUCTOR_MAX_AUTOTUNE",
            "absent",
            "'1'",
        ),
        ({"torch_env": {"TORCH_LOGS": "+dynamo"}}, "torch_env.TORCH_LOGS", "'recompiles'", "'+dynamo'"),
        ({"knobs": {"on_mismatch": "warn", "min_sms": 40}}, "arm 'a': settings.knobs.min_sms", "absent", "40"),
        ({"workload": {**FINGERPRINT["workload"], "quick": True}}, "workload.quick", "False", "True"),
    ],
)
def test_merge_refuses_mismatched_fingerprints_unless_allow_mixed(tmp_path, capsys, change, field, first, other):
    base = two_repeats(fake_results([1.0], [2.0]))
    part0, _ = shards(fingerprinted(base))
    _, part1 = shards(fingerprinted(base, **change))
    paths = write_parts(tmp_path, part0, part1)
    assert cli.main(["ablate", "--merge", *paths, "--out", str(tmp_path / "m")]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "do not share one fingerprint" in err and "--allow-mixed" in err
    assert f"{field} differs: {first} in {paths[0]} (run " in err and f"{other} in {paths[1]} (run " in err
    assert not (tmp_path / "m").exists()  # refused before anything is written
    assert cli.main(["ablate", "--merge", *paths, "--out", str(tmp_path / "m"), "--allow-mixed"]) == 0
    merged = json.loads((tmp_path / "m" / "results.json").read_text())
    assert field.split(": ")[-1] in {m["field"] for m in merged["mixed"]}
    text = (tmp_path / "m" / "results.md").read_text()
    assert "**MIXED DATA**: merged with --allow-mixed" in text and field.split(": ")[-1] in text


def test_merge_refuses_files_from_before_fingerprints_and_overlapping_shards(tmp_path, capsys):
    new = shards(fingerprinted(fake_results([1.0], [2.0])))[0]
    old = shards(fake_results([1.0], [2.0]))[1]
    paths = write_parts(tmp_path, new, old)
    assert cli.main(["ablate", "--merge", *paths]) == 2
    err = capsys.readouterr().err
    assert f"{paths[1]} predates run fingerprints (1 of its 1 runs have no run_id and fingerprint)" in err
    assert "--allow-mixed" in err
    assert cli.main(["ablate", "--merge", *paths, "--allow-mixed", "--out", str(tmp_path / "m")]) == 0
    assert f"{paths[1]} predates run fingerprints: its runs were not checked" in (tmp_path / "m" / "results.md").read_text()
    # the same shard run twice (other run ids, the same job indexes): the shards overlap
    again = write_parts(tmp_path, new, fingerprinted(new))
    assert cli.main(["ablate", "--merge", *again]) == 2
    assert f"overlapping shards: job 0 ran in {again[0]} (run " in capsys.readouterr().err
    assert cli.main(["ablate", "--allow-mixed", "--arm", "eager", "--device", "cpu"]) == 2
    assert "--allow-mixed is for --merge" in capsys.readouterr().err


# -- hardening: GPUs, signals, arm names, --out, --compare/--merge, --plot, cwd workloads ----------


def child_env(**extra: str) -> dict[str, str]:
    """This process's environment without INDUCTOR_KNOBS_* (a child must not inherit a test's knobs)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("INDUCTOR_KNOBS_")}
    env.update(extra)
    return env


@pytest.fixture
def no_arm_runs(monkeypatch):
    def execute(plan, progress=True):  # pragma: no cover - the point is that it is not reached
        raise AssertionError("an arm ran")

    monkeypatch.setattr(command, "execute", execute)


@pytest.mark.parametrize(
    ("visible", "index", "expected"),
    [
        (None, 1, "1"),
        ("2,3", 0, "2"),
        ("2,3", 1, "3"),
        (" 2 , 3 ", 1, "3"),
        ("GPU-8f3c2a1e-0000-1111-2222-333344445555,GPU-aaaa", 1, "GPU-aaaa"),
        ("MIG-4b1e7c9a-1111-2222-3333-444455556666", 0, "MIG-4b1e7c9a-1111-2222-3333-444455556666"),
    ],
)
def test_worker_gpu_maps_through_the_parents_visible_devices(visible, index, expected):
    assert workers.physical_gpu(index, visible) == expected


@pytest.mark.parametrize(("visible", "index"), [("2,3", 2), ("", 0)])
def test_worker_gpu_outside_the_visible_devices(visible, index):
    with pytest.raises(InvalidKnobValue, match="CUDA_VISIBLE_DEVICES"):
        workers.physical_gpu(index, visible)


def test_worker_env_gets_the_physical_gpu(monkeypatch):
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "2,3")
    monkeypatch.setenv("INDUCTOR_KNOBS_MIN_SMS", "7")  # the parent's knobs never leak into an arm
    env = workers.worker_env(spec.parse_arm("a:max_autotune=1"), gpu=1, cache="/c", emulate=None)
    assert env["CUDA_VISIBLE_DEVICES"] == "3"
    assert env["TMPDIR"] == env["TEMP"] == env["TMP"] == os.path.join("/c", "tmp")  # the job's own, removed with it
    assert env["INDUCTOR_KNOBS_MAX_AUTOTUNE"] == "1" and "INDUCTOR_KNOBS_MIN_SMS" not in env
    assert env["TORCHINDUCTOR_CACHE_DIR"] == os.path.join("/c", "inductor")
    cpu = workers.worker_env(spec.parse_arm("eager"), gpu=None, cache="/c", emulate=None)
    assert cpu["CUDA_VISIBLE_DEVICES"] == "2,3"  # a CPU worker's environment is left as it was


def test_the_fingerprints_settings_are_what_the_worker_applies(monkeypatch):
    """The parent's fingerprint of a run whose worker reported none (a timeout, a dead Slurm job) has the
    settings the worker would have applied: its knobs are env activation's reading of the worker's
    environment."""
    from inductor_knobs.core.knobs import Knobs

    monkeypatch.setenv("INDUCTOR_KNOBS_MIN_SMS", "7")  # the parent's knobs never reach an arm
    arm = spec.parse_arm("a:max_autotune=1,mode=max-autotune-no-cudagraphs")
    plan = plan_for("--device", "cpu", "--arm", "a:max_autotune=1,mode=max-autotune-no-cudagraphs", "--smoke")
    job_spec = plan.jobs()[0]
    env = workers.worker_env(arm, gpu=None, cache="/c", emulate="T4")
    record = job.stamp({"ok": False, "error": "timed out after 1 s", "index": 0}, {**job_spec, "emulate": "T4"})
    uuid.UUID(record["run_id"])
    fp = record["fingerprint"]
    assert set(fp) == {"workload", "workload_hash", "settings"}  # no versions, no GPU: the parent does not know them
    assert fp["settings"]["knobs_digest"] == Knobs.from_env(env).digest()
    assert fp["settings"]["knobs"] == {"max_autotune": True, "on_mismatch": "warn"}
    assert fp["settings"]["compile_args"] == {"mode": "max-autotune-no-cudagraphs"} and fp["settings"]["emulate"] == "T4"
    assert fp["workload"]["workload"] == "gemm_mlp" and fp["workload"]["source"] is None
    assert job.stamp(dict(record), job_spec)["run_id"] == record["run_id"]  # a record keeps its id


def test_torch_environment_keeps_the_variables_torch_reads():
    environ = {
        "TORCHINDUCTOR_MAX_AUTOTUNE": "1",
        "TORCH_LOGS": "recompiles",
        "TRITON_PTXAS_PATH": "/opt/ptxas",
        "TORCHINDUCTOR_CACHE_DIR": "/c/inductor",
        "TRITON_CACHE_DIR": "/c/triton",
        "TORCHINDUCTOR_COMPILE_THREADS": "4",
        "TORCH_HOME": "/h",
        "TORCHELASTIC_RUN_ID": "7",
        "PYTORCH_NVML_BASED_CUDA_CHECK": "1",
        "INDUCTOR_KNOBS_MIN_SMS": "40",
        "PATH": "/bin",
    }
    assert setup.torch_environment(environ) == {"TORCHINDUCTOR_MAX_AUTOTUNE": "1", "TRITON_PTXAS_PATH": "/opt/ptxas"}


def test_the_workers_fingerprint_holds_its_torch_variables(monkeypatch):
    """A shard run with TORCHINDUCTOR_MAX_AUTOTUNE=1 says so in every run's fingerprint; the per-run caches do not."""
    monkeypatch.setenv("TORCHINDUCTOR_MAX_AUTOTUNE", "1")
    plan = plan_for("--device", "cpu", "--arm", "eager", "--smoke")
    env = workers.worker_env(spec.parse_arm("eager"), gpu=None, cache="/c", emulate=None)
    fp = fingerprint.collect(plan.jobs()[0], env)
    assert fp["torch_env"]["TORCHINDUCTOR_MAX_AUTOTUNE"] == "1"
    assert "TORCHINDUCTOR_CACHE_DIR" not in fp["torch_env"] and "TRITON_CACHE_DIR" not in fp["torch_env"]
    assert fp["gpu_capability"] is None and fp["gpu"] is None  # a CPU run


def test_the_setups_driver_version_comes_from_the_driver(monkeypatch):
    """``cuda_driver`` is the CUDA version the driver reports (cuDriverGetVersion: 12080 -> "12.8"); None
    where no driver library loads.  (On an H100 with driver 580.159.04 and torch 2.11 it read "13.0".)"""
    import ctypes

    class Driver:
        def cuDriverGetVersion(self, out):
            out._obj.value = 12080
            return 0

    monkeypatch.setattr(ctypes, "CDLL", lambda name: Driver())
    assert setup.driver_version() == "12.8"

    def missing(name):
        raise OSError(f"{name}: cannot open shared object file")

    monkeypatch.setattr(ctypes, "CDLL", missing)
    assert setup.driver_version() is None


def _alive(pid: int) -> bool:
    """Whether ``pid`` still runs (a zombie, exited but not yet reaped by init, does not)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"
    except FileNotFoundError:
        return False
    except OSError:
        return True


#: The results.json of an earlier ablation that an interrupted ``--overwrite`` must leave as it was.
EARLIER = '{"earlier": "results"}'


def _start_a_run_to_interrupt(where: Path, sig: signal.Signals, overwrite: bool = False) -> dict:
    """``ablate`` in a process of its own, with the default disposition of ``sig``, whose second worker sleeps;
    with ``overwrite``, ``--overwrite`` on an ``--out`` that holds an earlier ablation's results and runs."""
    pids, tmp, out = where / "pids", where / "tmp", where / "out"
    for folder in (pids, tmp):
        folder.mkdir(parents=True)
    argv = [sys.executable, "-m", "inductor_knobs", "ablate", "--device", "cpu", "--workload", "ablation_workload:sleepy"]
    argv += ["--smoke", "--arm", "eager", "--arm", "default", "--out", str(out)]
    if overwrite:
        (out / "runs").mkdir(parents=True)
        (out / "results.json").write_text(EARLIER)
        (out / "runs" / "plan.json").write_text('{"jobs": []}')
        argv.append("--overwrite")
    env = child_env(TMPDIR=str(tmp), IK_TEST_PID_DIR=str(pids), IK_TEST_SLEEP="120")
    # A shell starts background jobs with SIGINT ignored, and the CLI rightly keeps an ignored signal
    # ignored; a terminal's foreground job has the default disposition, which is what this test is about.
    proc = subprocess.Popen(
        argv,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        preexec_fn=lambda: signal.signal(sig, signal.SIG_DFL),
    )
    return {"sig": sig, "proc": proc, "pids": pids, "tmp": tmp, "out": out, "seen": [], "own_group": False}


def test_interrupt_kills_workers_cleans_up_and_keeps_finished_runs(tmp_path):
    """SIGINT (status 130) and SIGTERM (143), each in its own run; the two runs go at once (they mostly wait).

    The SIGTERM run is an ``--overwrite`` of earlier results, which must stay as they were (the partial
    results go to the staging directory).  Each run's TMPDIR is empty afterwards: every worker's
    temporary files (the C++ compiler's ``cc*.s`` among them) went into its job's private directory.
    """
    runs = [
        _start_a_run_to_interrupt(tmp_path / sig.name, sig, overwrite=sig == signal.SIGTERM)
        for sig in (signal.SIGINT, signal.SIGTERM)
    ]
    try:
        deadline = time.monotonic() + 300  # a hang guard, not a measurement
        waiting = list(runs)
        while waiting:  # signal each run once its first run finished and its second worker sleeps in forward
            for run in list(waiting):
                assert run["proc"].poll() is None, run["proc"].communicate()
                if len(list(run["pids"].iterdir())) >= 2:
                    run["seen"] = [int(p.stem) for p in run["pids"].iterdir()]
                    sleeping = [pid for pid in run["seen"] if _alive(pid)]
                    run["own_group"] = bool(sleeping) and all(os.getpgid(pid) == pid for pid in sleeping)
                    run["proc"].send_signal(run["sig"])
                    waiting.remove(run)
            assert time.monotonic() < deadline, "the second worker never started"
            time.sleep(0.2)
        for run in runs:
            run["stdout"], run["stderr"] = run["proc"].communicate(timeout=120)
        deadline = time.monotonic() + 10
        while any(_alive(pid) for run in runs for pid in run["seen"]) and time.monotonic() < deadline:
            time.sleep(0.1)
        for run in runs:
            run["survivors"] = [pid for pid in run["seen"] if _alive(pid)]
    finally:
        for run in runs:
            if run["proc"].poll() is None:
                run["proc"].kill()
                run["proc"].communicate()
            for pid in run["seen"]:  # never leave a sleeping worker behind, whatever failed
                if _alive(pid):
                    os.kill(pid, signal.SIGKILL)
    for run, status in zip(runs, (130, 143)):
        sig, stdout, stderr = run["sig"], run["stdout"], run["stderr"]
        assert run["own_group"]  # the sleeping worker led its own process group
        assert run["proc"].returncode == status, stderr
        assert "Traceback" not in stderr
        assert stderr.strip().splitlines()[-1].startswith(f"inductor-knobs: interrupted by {sig.name}"), stderr
        assert not run["survivors"]
        assert not list(run["tmp"].iterdir())  # nothing left in TMPDIR, not even a compiler's temporary file
        out = run["out"]
        if sig == signal.SIGTERM:  # the interrupted --overwrite: the earlier results are untouched
            assert (out / "results.json").read_text() == EARLIER
            assert (out / "runs" / "plan.json").read_text() == '{"jobs": []}'
            assert f"the earlier results in {out} are unchanged" in stderr
            out = out / outdir.STAGING
        results = json.loads((out / "results.json").read_text())
        assert results["partial"] is True and results["interrupted"] == sig.name
        assert [(r["arm"], r["ok"]) for r in results["runs"]] == [("eager", True)]
        assert "| eager |" in stdout and "| default | not run |" in stdout and "**PARTIAL**" in stdout


@pytest.mark.parametrize(
    ("text", "error", "match"),
    [
        ("eagr", UnknownKnob, r"unknown arm 'eagr'; did you mean 'eager'\? Arms are NAME:knob=value"),
        ("defualt", UnknownKnob, r"did you mean 'default'\?"),
        ("zzz", UnknownKnob, r"unknown arm 'zzz'\. Arms are NAME:knob=value"),
        ("x min_sms=40", InvalidKnobValue, r"'x min_sms=40'.*whitespace or '='.*NAME:knob=value"),
        ("min_sms=40", InvalidKnobValue, r"whitespace or '='.*NAME:knob=value"),
        ("my arm:min_sms=40", InvalidKnobValue, r"whitespace or '='"),
    ],
)
def test_arm_names_that_cannot_be_meant(text, error, match):
    with pytest.raises(error, match=match):
        spec.parse_arm(text)


def test_bare_arm_names():
    assert spec.parse_arm("eager").eager
    default = spec.parse_arm("default")
    assert not default.eager and not default.knobs and not default.compile_args
    named = spec.parse_arm("plain:")  # the explicit form of "compiled, no knobs"
    assert named.name == "plain" and not named.eager and not named.knobs


def test_bad_arm_name_from_the_command_line_is_one_line(capsys, no_arm_runs):
    assert cli.main(["ablate", "--device", "cpu", "--arm", "eagr"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "did you mean 'eager'?" in err


def test_out_must_be_empty_unless_overwrite(tmp_path, capsys, no_arm_runs):
    (tmp_path / "results.json").write_text("{}")
    assert cli.main(["ablate", "--device", "cpu", "--arm", "eager", "--out", str(tmp_path)]) == 2
    err = capsys.readouterr().err
    assert "--out" in err and "--overwrite" in err and err.count("\n") == 1
    assert cli.main(["ablate", "--device", "cpu", "--arm", "eager", "--out", str(tmp_path / "results.json")]) == 2
    assert "not a directory" in capsys.readouterr().err


def test_help_prints_percent_signs_once_and_says_what_overwrite_does():
    """argparse %-formats argument help always, a description only when it holds ``%(prog)``."""
    parser = cli.argparse.ArgumentParser(prog="inductor-knobs")
    sub = parser.add_subparsers(dest="command")
    options.add_parser(sub)
    text = " ".join(sub.choices["ablate"].format_help().split())
    assert "%%" not in text and "95% t-intervals" in text
    assert "before the run" not in text
    assert f"writes into <out>/{outdir.STAGING} and, only if it exits 0" in text
    assert "a run that fails or is interrupted leaves the earlier results unchanged" in text


def test_overwrite_replaces_only_what_the_tool_wrote(tmp_path, capsys):
    part = tmp_path / "part.json"
    part.write_text(json.dumps(fingerprinted(fake_results([1.0], [2.0]))))
    out = tmp_path / "out"
    out.mkdir()
    for name in ("results.json", "results.csv", "results.png", "results.md"):
        (out / name).write_text("old")
    (out / "notes.txt").write_text("mine")
    assert cli.main(["ablate", "--merge", str(part), "--out", str(out)]) == 2
    assert (out / "results.png").read_text() == "old"
    assert cli.main(["ablate", "--merge", str(part), "--out", str(out), "--overwrite"]) == 0
    assert not (out / "results.png").exists()  # no --plot this time: the old plot must not survive
    assert (out / "notes.txt").read_text() == "mine"
    assert json.loads((out / "results.json").read_text())["merged_from"] == 1
    assert (out / "results.md").read_text().startswith("workload `w`")


@pytest.mark.parametrize("option", ["--compare", "--merge"])
@pytest.mark.parametrize("content", [None, "not json", "[1, 2]", '{"runs": []}'])
def test_unreadable_results_files_are_one_line_errors(tmp_path, capsys, option, content):
    good, bad = tmp_path / "good.json", tmp_path / "bad.json"
    good.write_text(json.dumps(fake_results([1.0], [2.0])))
    if content is not None:
        bad.write_text(content)
    assert cli.main(["ablate", option, str(good), str(bad)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and option in err and str(bad) in err


@pytest.mark.parametrize(
    ("change", "problem"),
    [
        ({"index": "1"}, "index = '1': allowed the job's index, an int >= 0"),
        ({"index": None}, "no index: allowed the job's index, an int >= 0"),
        ({"samples_ms": [0.0, 0.0]}, "samples_ms holds 0.0: allowed latencies in ms > 0 and finite"),
        ({"compile_seconds": "1.0"}, "compile_seconds = '1.0': allowed a number >= 0"),
        ({"arm": "z"}, "arm = 'z': allowed one of the file's arms ['a', 'b', 'c']"),
    ],
)
def test_a_malformed_record_is_a_one_line_error_naming_the_file_and_line(tmp_path, capsys, change, problem):
    data = fingerprinted(fake_results([1.0], [2.0]))
    bad = {**data["runs"][1], **change}
    data["runs"][1] = {k: v for k, v in bad.items() if v is not None}
    text = json.dumps(data, indent=2)
    runs_at = text.splitlines().index('  "runs": [')
    line = [i + 1 for i, t in enumerate(text.splitlines()) if t == "    {" and i > runs_at][1]
    path = tmp_path / "results.json"
    path.write_text(text)
    for option in (["--merge", str(path)], ["--compare", str(path), str(path)]):
        assert cli.main(["ablate", *option]) == 2
        err = capsys.readouterr().err
        assert err.count("\n") == 1 and "Traceback" not in err
        assert f"{option[0]} {str(path)!r}: record runs[1] (line {line}) is malformed: {problem}" in err


def test_compare_warns_when_the_results_are_not_comparable(tmp_path, capsys):
    old = {**fake_results([1.0], [2.0]), "quick": False, "repeats": 3, "environment": {"torch": "2.12.0"}}
    new = {**fake_results([1.0], [2.0]), "quick": True, "repeats": 1, "environment": {"torch": "2.13.0"}}
    new["arms"] = [{"name": "a"}, {"name": "b", "knobs": {"max_autotune": "1"}}, {"name": "c"}]
    paths = [tmp_path / "old.json", tmp_path / "new.json"]
    for path, data in zip(paths, (old, new)):
        path.write_text(json.dumps(data))
    assert cli.main(["ablate", "--compare", *map(str, paths)]) == 0
    warnings = [line for line in capsys.readouterr().err.splitlines() if line.startswith("warning:")]
    text = "\n".join(warnings)
    assert "quick" in text and "repeats" in text and "torch" in text and "arm b" in text
    assert cli.main(["ablate", "--compare", str(paths[0]), str(paths[0])]) == 0
    assert "warning:" not in capsys.readouterr().err


def test_plot_without_matplotlib_fails_before_any_arm_runs(monkeypatch, capsys, no_arm_runs):
    import importlib.util

    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name == "matplotlib" else real(name, *a))
    assert cli.main(["ablate", "--device", "cpu", "--arm", "eager", "--plot"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "--plot needs matplotlib" in err and "pip install 'inductor-knobs[ablate]'" in err


CWD_MODELS = """
import torch


def factory(device, quick):
    return torch.nn.Linear(8, 8).to(device), [(torch.randn(2, 8, device=device),)]
"""


def test_user_workload_resolves_from_the_current_directory(tmp_path, monkeypatch):
    (tmp_path / "ik_cwd_models_unit.py").write_text(CWD_MODELS)
    monkeypatch.chdir(tmp_path)
    monkeypatch.delitem(sys.modules, "ik_cwd_models_unit", raising=False)
    path = list(sys.path)
    assert callable(workloads.resolve("ik_cwd_models_unit:factory"))
    assert sys.path == path  # found from the current directory, without leaving it on sys.path
    monkeypatch.delitem(sys.modules, "ik_cwd_models_unit", raising=False)


def test_cli_user_workload_from_the_current_directory(tmp_path):
    proj, bin_dir = tmp_path / "proj", tmp_path / "bin"
    proj.mkdir()
    bin_dir.mkdir()
    (proj / "ik_cwd_models.py").write_text(CWD_MODELS)
    # Like the installed console script: sys.path[0] is the script's folder, not the current directory.
    (bin_dir / "launch.py").write_text("import sys\nfrom inductor_knobs.cli import main\nsys.exit(main())\n")
    env = child_env()
    env.pop("PYTHONPATH", None)
    argv = [sys.executable, str(bin_dir / "launch.py"), "ablate", "--device", "cpu", "--workload", "ik_cwd_models:factory"]
    out = subprocess.run([*argv, "--arm", "eager", "--smoke"], cwd=proj, env=env, capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr
    assert "| eager |" in out.stdout


def test_a_signal_ignored_on_entry_stays_ignored():
    # A shell starts background jobs with SIGINT ignored so that Ctrl-C reaches only the foreground job.
    previous = signal.signal(signal.SIGINT, signal.SIG_IGN)
    try:
        with signals.signals_raise():
            assert signal.getsignal(signal.SIGINT) is signal.SIG_IGN
            assert signal.getsignal(signal.SIGTERM) is not signal.SIG_IGN
        assert signal.getsignal(signal.SIGINT) is signal.SIG_IGN
    finally:
        signal.signal(signal.SIGINT, previous)


def test_worker_exit_kills_its_session_and_counts_its_cpu(tmp_path, monkeypatch, capsys):
    # Inductor's compile workers live in the worker's session; the worker counts their CPU time and
    # kills them instead of waiting seconds for their orderly shutdown.  The parent runs in this process
    # (the worker is a process of its own, leading its session, either way).
    pids = tmp_path / "pids"
    pids.mkdir()
    monkeypatch.setenv("IK_TEST_PID_DIR", str(pids))
    argv = ["ablate", "--device", "cpu", "--workload", "ablation_workload:helper_process", "--smoke", "--arm", "eager"]
    assert cli.main([*argv, "--out", str(tmp_path / "out")]) == 0, capsys.readouterr().err
    helper = int((pids / "helper.pid").read_text())
    deadline = time.monotonic() + 10
    while _alive(helper) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not _alive(helper)
    (run,) = json.loads((tmp_path / "out" / "results.json").read_text())["runs"]
    # The helper's half second of CPU is counted (CPU time, not wall time: no load makes it less); the
    # helper sleeps 600 s, so a worker that waited for its session instead of killing it would hit the timeout.
    assert run["ok"] and run["cpu_seconds"] >= 0.5 and "shutdown" in run["phase_seconds"]


def test_worker_outside_its_own_session_touches_no_other_process():
    from inductor_knobs.ablation import worker

    if os.getsid(0) == os.getpid():  # pragma: no cover - pytest run as a session leader
        pytest.skip("this process leads its session")
    assert worker._session_processes() is None


# -- processes at once, shared kernels ----------------------------------------------------------


def test_the_shared_kernel_directory_lives_in_the_ablations_own_directory(tmp_path):
    registry = workers.Workers(share_kernels=True)
    assert registry.kernels and os.path.isdir(registry.kernels)
    cache = tmp_path / "cache"
    env = workers.worker_env(spec.Arm("a"), None, str(cache), None, kernels=registry.kernels, cold=False, compile_threads=4)
    assert env["TRITON_CACHE_DIR"] == registry.kernels and env["TORCHINDUCTOR_CACHE_DIR"].startswith(str(cache))
    assert env["TORCHINDUCTOR_COMPILE_THREADS"] == os.environ.get("TORCHINDUCTOR_COMPILE_THREADS", "4")
    run_dir = registry.run_dir
    assert os.path.dirname(registry.kernels) == run_dir
    registry.remove_dirs()
    assert run_dir and not os.path.exists(run_dir)


def test_a_worker_through_the_barrier_records_its_wait_and_its_cpus(tmp_path):
    """The worker's side of the measurement barrier (ablation/quiet.py): an eager arm says ready, gets its
    turn and its lane's CPUs, and records the phases on the host's monotonic clock."""
    from inductor_knobs.ablation import quiet

    plan = plan_for("--device", "cpu", "--workload", "ablation_workload:tiny", "--arm", "eager", "--smoke")
    job_spec = plan.jobs()[0]
    registry = workers.Workers()
    barrier = quiet.Quiet([None], parallel=2, cap=2, jobs={None: 1})
    try:
        record = job.run_job(
            job_spec, plan.arms[0], None, 300, registry, parallel=2, compile_threads=1, barrier=barrier.admit(None)
        )
    finally:
        barrier.close()
        registry.remove_dirs()
    assert record is not None and record["ok"], record
    assert {"wait", "measure", "compile", "import"} <= set(record["phase_seconds"]) and record["kernel_cache"] == "cold"
    assert "gpu_utilization_before" not in record
    spans = record["phase_spans"]
    assert record["started_at"] <= spans["import"][0] <= spans["compile"][1] <= spans["wait"][1] <= spans["extras"][1]
    assert record["measure_cpus"] == sorted(os.sched_getaffinity(0)) or record.get("pin_error")
    assert record["start"] == "subprocess" and record["start_facts"] == {"cuda_initialized_at_start": False}


def test_doctors_report_comes_from_a_child_and_never_costs_the_runs(monkeypatch, tmp_path):
    """results.json's ``doctor`` entry comes from a child process (command._Doctor); a report that fails or never
    comes is recorded as an error, not raised, and a child that never ends is killed."""
    from inductor_knobs import doctor
    from inductor_knobs.ablation import command

    # No thread of this process touches torch (its C++ thread-locals aborted a command that finished while such a
    # thread was ending).
    monkeypatch.setattr(doctor, "collect", lambda *a, **k: pytest.fail("doctor.collect ran in the command's process"))
    child = command._Doctor()
    assert child.report()["versions"]["torch"] == __import__("torch").__version__
    child.close()

    monkeypatch.setattr(sys, "executable", "/bin/false")
    child = command._Doctor()
    assert child.report() == {"error": "RuntimeError: doctor exited 1 without a report: "}
    child.close()

    mixed = tmp_path / "mixed"  # a native library's bytes that are not UTF-8 on stderr: replaced, not raised
    mixed.write_text("#!/bin/sh\nprintf '\\377' >&2\necho '{\"versions\": {}}'\n")
    mixed.chmod(0o755)
    monkeypatch.setattr(sys, "executable", str(mixed))
    child = command._Doctor()
    assert child.report() == {"versions": {}}
    child.close()

    monkeypatch.setattr(sys, "executable", str(tmp_path / "missing"))
    child = command._Doctor()  # no process: recorded, not raised
    assert child.report()["error"].startswith("FileNotFoundError")
    child.close()

    hang = tmp_path / "hang"
    hang.write_text("#!/bin/sh\nexec sleep 600\n")
    hang.chmod(0o755)
    monkeypatch.setattr(sys, "executable", str(hang))
    monkeypatch.setattr(command, "DOCTOR_WAIT_S", 0.01)
    child = command._Doctor()
    assert child.report() == {"error": "doctor did not finish within 0 s"}
    assert child.proc.returncode == -signal.SIGKILL  # killed and reaped
    child.close()


def test_doctors_child_has_ended_before_the_first_run_starts(monkeypatch, tmp_path):
    """The child imports torch, Dynamo and Inductor: beside the CPU main job's first measuring run it made that run's
    samples 64 ms against 2.7 ms.  So it runs while the command sets up, and has ended before any run starts."""
    from inductor_knobs.ablation import command

    children: list = []
    made = command._Doctor.__init__

    def track(self) -> None:
        made(self)
        children.append(self)

    monkeypatch.setattr(command._Doctor, "__init__", track)
    execute = command._execute
    ended_first: list[bool] = []

    def check(*args, **kwargs):
        ended_first.append(all(c.proc.poll() is not None for c in children))
        return execute(*args, **kwargs)

    monkeypatch.setattr(command, "_execute", check)
    assert cli.main(["ablate", "--smoke", "--device", "cpu", "--arm", "eager", "--out", str(tmp_path / "out")]) == 0
    assert len(children) == 1 and ended_first == [True]
    assert json.loads((tmp_path / "out" / "results.json").read_text())["environment"]["doctor"]["versions"]


def test_an_interrupt_while_waiting_for_doctor_is_recorded_and_kills_the_child(monkeypatch, tmp_path):
    """SIGTERM while the command waits for doctor's report, before any run: the partial results say why the report
    is missing, and the child is gone."""
    from inductor_knobs.ablation import command

    children: list = []

    def interrupted(self) -> dict:
        children.append(self)
        raise signals.Interrupted(signal.SIGTERM, [], 0)

    monkeypatch.setattr(command._Doctor, "report", interrupted)
    argv = ["ablate", "--smoke", "--device", "cpu", "--arm", "eager", "--out", str(tmp_path / "out")]
    assert cli.main(argv) == 128 + signal.SIGTERM
    data = json.loads((tmp_path / "out" / "results.json").read_text())
    assert data["environment"]["doctor"] == {"error": "interrupted by SIGTERM before the report came"} and data["partial"]
    assert children and children[0].proc.poll() is not None  # killed when the command ended


def test_a_later_repeat_compiles_into_the_shared_directory_from_its_start(monkeypatch):
    """Repeat 0 compiles with empty caches; a later repeat uses the ablation's shared Triton directory as its
    ``TRITON_CACHE_DIR`` even while it is still empty (its own binaries go there for the runs compiling beside it),
    and its record says ``shared`` (the report's compile column leaves it out)."""
    monkeypatch.setattr(job, "WORKER", "this")  # a module that exits at once: the label is set before it runs
    seen: list[dict] = []
    env = workers.worker_env
    monkeypatch.setattr(job, "worker_env", lambda *a, **k: seen.append(env(*a, **k)) or seen[-1])
    registry = workers.Workers(share_kernels=True)
    arm = spec.Arm("a")
    try:
        later = {"index": 1, "repeat": 1, "arm": arm.to_dict()}
        assert not os.listdir(registry.kernels)
        assert job.run_job(later, arm, None, 60, registry)["kernel_cache"] == "shared"
        assert seen[-1]["TRITON_CACHE_DIR"] == registry.kernels
        assert seen[-1]["TRITON_CACHE_MANAGER"].endswith(":SharedKernels")
        first = {"index": 0, "repeat": 0, "arm": arm.to_dict()}
        assert job.run_job(first, arm, None, 60, registry)["kernel_cache"] == "cold"  # repeat 0 reads nothing shared
        assert seen[-1]["TRITON_CACHE_DIR"] != registry.kernels
        assert seen[-1]["TRITON_CACHE_MANAGER"].endswith(":PublishedKernels")
    finally:
        registry.remove_dirs()


def test_what_a_worker_leaves_running_is_killed_before_its_directory_goes(tmp_path, monkeypatch):
    """A worker that exits while a process it started still writes into its directory (as Inductor's compile
    workers go on after a worker that crashed mid-compile): the job's end kills that process and only then
    removes the directory, so nothing is left in ``$TMPDIR``."""
    (tmp_path / "leaves_a_writer.py").write_text(
        "import os, subprocess, sys, time\n"
        "marker = os.path.join(os.environ['TMPDIR'], 'writer.pid')\n"
        "code = 'import os, sys, time\\n'\\\n"
        '    \'open(sys.argv[1] + ".tmp", "w").write(str(os.getpid())); os.rename(sys.argv[1] + ".tmp", sys.argv[1])\\n\'\\\n'
        "    'while True:\\n    os.makedirs(os.path.join(sys.argv[2], \"inductor\"), exist_ok=True); time.sleep(0.01)\\n'\n"
        "subprocess.Popen([sys.executable, '-c', code, marker, os.path.dirname(os.environ['TMPDIR'])])\n"
        "while not os.path.exists(marker):\n    time.sleep(0.01)\n"
    )
    monkeypatch.setenv("PYTHONPATH", str(tmp_path))
    registry = workers.Workers()
    writer = None
    try:
        started = registry.start("leaves_a_writer", [], workers.base_env)
        assert started is not None
        proc, cache = started
        assert proc.wait(120) == 0, workers.read_output(cache)
        writer = int((Path(cache) / workers.TEMP_SUBDIR / "writer.pid").read_text())
        removed_after: list[bool] = []
        rmtree = workers.shutil.rmtree

        def remove(path, *args, **kwargs):  # the writer must be gone before its directory is
            removed_after.append(not _runs(writer))
            rmtree(path, *args, **kwargs)

        monkeypatch.setattr(workers.shutil, "rmtree", remove)
        registry.done(proc, cache)
        assert removed_after == [True] and not _runs(writer) and not os.path.exists(cache)
    finally:
        if writer is not None and _runs(writer):
            with contextlib.suppress(OSError):
                os.kill(writer, signal.SIGKILL)
        registry.remove_dirs()


def _runs(pid: int) -> bool:
    """Whether process ``pid`` runs (a zombie does not)."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] not in ("Z", "X")
    except OSError:
        return False


def test_a_process_that_took_a_finished_workers_number_is_not_killed():
    """The worker's number given to a new process that leads its own group (another worker, a fork-server child)
    before the job's end: the job's end signals nothing, since Linux would not hand out a number that a live
    process of the old group still held.  The number is forced through ``ns_last_pid`` (root only)."""
    last_pid = Path("/proc/sys/kernel/ns_last_pid")
    if not os.access(last_pid, os.W_OK):
        pytest.skip("forcing a process number needs a writable /proc/sys/kernel/ns_last_pid (root)")
    registry = workers.Workers()
    other = None
    try:
        started = registry.start("this", [], workers.base_env)  # exits at once, leaving nothing in its group
        assert started is not None
        proc, cache = started
        assert proc.wait(120) == 0
        last_pid.write_text(str(proc.pid - 1))
        other = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"], start_new_session=True)
        if other.pid != proc.pid:
            pytest.skip("another process took the number first")
        registry.done(proc, cache)
        assert other.poll() is None and not os.path.exists(cache)
    finally:
        if other is not None:
            other.kill()
            other.wait()
        registry.remove_dirs()
