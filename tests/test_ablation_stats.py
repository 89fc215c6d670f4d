"""Ablation statistics and the checks around them: per-process intervals and verdicts, the load rule,
too few processes, real-model workloads and their extras, the main job's plan and its CPU note.

Everything here runs in-process on synthetic data (no worker starts), except the real-model builds,
which are skipped where transformers or timm is not installed."""

from __future__ import annotations

import json
import math
import sys
import types
from pathlib import Path

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from inductor_knobs import cli
from inductor_knobs.ablation import (
    build,
    command,
    explain,
    files,
    job,
    kernels,
    load,
    main_job,
    merge,
    models,
    options,
    quiet,
    report,
    runner,
    stats,
    summary,
    workloads,
)
from inductor_knobs.ablation.plan import Plan
from inductor_knobs.errors import InvalidKnobValue, UnknownKnob

TESTS = Path(__file__).parent


def plan_for(*argv: str) -> Plan:
    parser = cli.argparse.ArgumentParser()
    options.add_parser(parser.add_subparsers(dest="command"))
    return build.build_plan(parser.parse_args(["ablate", *argv]))


def run(arm: str, repeat: int, samples: list[float], **extra) -> dict:
    record = {
        "ok": True,
        "arm": arm,
        "repeat": repeat,
        "index": repeat,
        "samples_ms": samples,
        "compile_seconds": 2.0,
        "autotune_seconds": 0.5,
        "peak_memory_bytes": 2**20,
        "max_abs_diff": 0.0,
        "mismatch": False,
        "kernels": {},
        "gemm_calls": {"aten.mm": 4},
        "kernel_ms": None,
    }
    return {**record, **extra}


def results_of(per_arm: dict[str, list[list[float]]], **extra) -> dict:
    """results.json-like data: arm -> one list of samples per process."""
    runs = [run(arm, i, samples) for arm, processes in per_arm.items() for i, samples in enumerate(processes)]
    arms = [{"name": name, "knobs": {}, "compile_args": {}, "eager": False} for name in per_arm]
    repeats = max(len(p) for p in per_arm.values())
    base = {"workload": "w", "device": "cpu", "repeats": repeats, "iters": 5, "baseline": next(iter(per_arm))}
    return {**base, "arms": arms, "runs": runs, **extra}


# -- intervals and verdicts -------------------------------------------------------------------------


def test_identical_distributions_contain_one():
    values = [1.00, 1.02, 0.98, 1.01, 0.99]
    interval = stats.ratio_interval(values, list(reversed(values)))
    assert interval is not None and interval.contains(1.0)
    assert interval.estimate == pytest.approx(1.0) and interval.verdict() == stats.NO_DIFFERENCE


def test_a_two_fold_effect_with_small_spread_excludes_one_and_contains_two():
    baseline = [2.00, 2.02, 1.98, 2.01, 1.99]
    arm = [1.00, 1.01, 0.99, 1.005, 0.995]
    interval = stats.ratio_interval(baseline, arm)
    assert interval is not None and not interval.contains(1.0) and interval.contains(2.0)
    assert interval.verdict() == "faster"
    slower = stats.ratio_interval(arm, baseline)
    assert slower is not None and slower.verdict() == "slower" and slower.contains(0.5)


def test_the_process_not_the_sample_is_the_unit():
    """Three processes each, far apart, with thousands of nearly identical samples inside each: the
    interval must stay as wide as three processes allow, whatever the sample count."""
    per_process = {"a": [1.0, 2.0, 3.0], "b": [1.1, 2.1, 3.1]}

    def rows_for(samples_per_process: int) -> dict:
        data = {
            arm: [[m * (1 + 1e-6 * k) for k in range(samples_per_process)] for m in medians]
            for arm, medians in per_process.items()
        }
        return {row["arm"]: row for row in summary.summarize(results_of(data))}

    few, many = rows_for(5), rows_for(2000)
    assert many["b"]["verdict"] == stats.NO_DIFFERENCE and many["b"]["n"] == 6000
    assert many["b"]["processes"] == 3
    interval = (many["b"]["speedup_low"], many["b"]["speedup_high"])
    assert interval == pytest.approx((few["b"]["speedup_low"], few["b"]["speedup_high"]))
    assert many["b"]["speedup_high"] / many["b"]["speedup_low"] > 2  # as wide as the processes' spread


def test_the_speedup_interval_is_students_t_on_log_values():
    """The interval is scipy's pooled two-sample t-interval of the mean log values, exponentiated; the estimate is
    the ratio of geometric means."""
    from scipy import stats as sps

    baseline, arm = [1.00, 1.04, 0.97, 1.02], [0.80, 0.83, 0.78]
    interval = stats.ratio_interval(baseline, arm)
    expected = sps.ttest_ind(np.log(baseline), np.log(arm), equal_var=True).confidence_interval(0.95)
    assert interval is not None and interval.processes == (4, 3)
    assert (interval.low, interval.high) == pytest.approx((math.exp(expected.low), math.exp(expected.high)), rel=1e-12)
    assert interval.estimate == pytest.approx(sps.gmean(baseline) / sps.gmean(arm), rel=1e-12)
    assert stats.speedup(baseline, arm) == pytest.approx(interval.estimate, rel=1e-12)
    assert interval.verdict() == "faster"


def test_equal_processes_give_a_zero_width_interval_at_one():
    interval = stats.ratio_interval([2.0, 2.0, 2.0], [2.0, 2.0, 2.0])
    assert interval is not None and (interval.low, interval.estimate, interval.high) == (1.0, 1.0, 1.0)
    assert interval.verdict() == stats.NO_DIFFERENCE


def _recorded_comparisons(kind: str) -> list[dict]:
    data = json.loads((TESTS.parent / "bench" / "results" / "aa-per-process" / "aa_runs.json").read_text())
    return [c for c in data["comparisons"] if c["kind"] == kind]


def test_two_equal_arms_get_a_verdict_at_most_5_percent_of_the_time_at_3_processes():
    """The recorded A/A comparisons (H100, H200), processes resampled within each: two arms drawn from one
    comparison's processes say faster or slower in at most 5% of trials (bench/aa_coverage.py measures it
    with more trials and sizes).  The percentile bootstrap of medians said so in 6-7% here."""
    rng = np.random.default_rng(0)
    false = total = 0
    for comparison in _recorded_comparisons("aa"):
        pool = np.array([v for values in comparison["arms"].values() for v in values])
        for _ in range(40):
            draw = rng.choice(pool, size=6)
            interval = stats.ratio_interval(list(draw[:3]), list(draw[3:]))
            assert interval is not None
            false += interval.verdict() != stats.NO_DIFFERENCE
            total += 1
    assert total >= 1500 and false / total <= 0.05


def test_the_recorded_t4_kernel_time_effect_says_faster():
    """Every recorded emulated-T4 comparison of the main job (forced GEMM autotuning, about 1.5x in kernel
    time, 3 processes per arm) says faster."""
    kernel = [c for c in _recorded_comparisons("t4") if c["metric"] == "kernel_ms"]
    assert len(kernel) >= 20
    for comparison in kernel:
        gated, forced = comparison["arms"].values()
        interval = stats.ratio_interval(gated, forced)
        assert interval is not None and interval.verdict() == "faster", comparison["source"]


positive = st.floats(min_value=0.01, max_value=100.0, allow_nan=False, allow_infinity=False)
arms = st.lists(positive, min_size=3, max_size=8)


@settings(max_examples=60, deadline=None)
@given(baseline=arms, arm=arms, scale=st.floats(min_value=0.1, max_value=10.0))
def test_the_interval_is_reciprocal_scale_free_and_holds_its_estimate(baseline, arm, scale):
    forward, backward = stats.ratio_interval(baseline, arm), stats.ratio_interval(arm, baseline)
    assert forward is not None and backward is not None
    assert forward.low <= forward.estimate <= forward.high
    assert (forward.low, forward.high) == pytest.approx((1 / backward.high, 1 / backward.low), rel=1e-9)
    scaled = stats.ratio_interval([v * scale for v in baseline], [v * scale for v in arm])
    assert scaled is not None and (scaled.low, scaled.high) == pytest.approx((forward.low, forward.high), rel=1e-9)
    faster = stats.ratio_interval(baseline, [v / scale for v in arm])  # the arm truly `scale` x faster
    assert faster is not None and (faster.low, faster.high) == pytest.approx(
        (forward.low * scale, forward.high * scale), rel=1e-9
    )
    verdict = forward.verdict()
    assert (verdict == stats.NO_DIFFERENCE) == forward.contains(1.0)
    assert verdict != "faster" or forward.low > 1.0


def test_fewer_than_three_processes_give_no_interval():
    assert stats.ratio_interval([1.0, 1.1], [1.0, 1.1, 1.2]) is None
    assert stats.median_interval([1.0, 1.1]) is None
    rows = summary.summarize(results_of({"a": [[1.0], [1.1]], "b": [[2.0], [2.1]]}))
    assert rows[1]["verdict"].startswith("n/a") and "speedup_low" not in rows[1]


def test_intervals_are_reproducible_and_reject_bad_latencies():
    a, b = [1.0, 1.3, 0.9, 1.1], [0.7, 0.8, 0.75, 0.9]
    assert stats.ratio_interval(a, b) == stats.ratio_interval(a, b)
    with pytest.raises(ValueError, match="positive finite"):
        stats.ratio_interval([1.0, 0.0, 1.0], b)
    with pytest.raises(ValueError, match="positive finite"):
        stats.median_interval([1.0, math.nan, 1.0])
    with pytest.raises(ValueError, match="positive finite"):
        stats.speedup([1.0, -1.0], b)
    with pytest.raises(ValueError, match="at least one process"):
        stats.speedup([], b)


def test_table_says_no_detectable_difference_and_names_the_verdicts():
    data = results_of({"a": [[2.0, 2.1], [2.2, 2.3], [1.9, 2.0]], "b": [[2.05], [2.2], [1.95]], "c": [[1.0], [1.02], [0.98]]})
    rows = {r["arm"]: r for r in summary.summarize(data)}
    assert rows["a"]["verdict"] == "baseline"
    assert rows["b"]["verdict"] == stats.NO_DIFFERENCE and rows["c"]["verdict"] == "faster"
    text = report.markdown(data)
    assert "| b |" in text and stats.NO_DIFFERENCE in text and "excludes 1.00x" in text
    # The header names the method, the unit of replication and the measured false-verdict rate at 3 processes,
    # and what an arm's latency interval covers with 3.
    assert stats.METHOD in text and "the process the unit of replication" in text
    assert "in 3% of resampled recorded A/A comparisons with 3 processes per arm" in text
    assert "range of its processes, which contains the median of their distribution 75% of the time" in text
    smoke = report.markdown({**data, "smoke": True})  # --smoke --repeats 3: the intervals are there, and said so
    assert "no confidence intervals" not in smoke and "smoke run (quick inputs)" in smoke and "excludes 1.00x" in smoke
    assert "no confidence intervals" in report.markdown({**results_of({"a": [[1.0]], "b": [[0.5]]}), "smoke": True})
    for r in data["runs"]:  # a GPU shared before every run: the verdicts point to the warning
        r.update(gpu=0, gpu_utilization_before=90)
    loaded = report.markdown(data)
    assert "| faster (see LOAD WARNING) |" in loaded and f"| {stats.NO_DIFFERENCE} |" in loaded and "**LOAD WARNING**" in loaded


@pytest.mark.parametrize(
    ("processes", "quoted"),
    [
        (4, "3% of resampled recorded A/A comparisons with 3 processes"),
        (5, "5% of resampled recorded A/A comparisons with 5 processes"),
        (12, "5% of resampled recorded A/A comparisons with 8 processes"),
    ],
)
def test_the_header_quotes_the_false_verdict_rate_measured_at_the_processes_present(processes, quoted):
    data = results_of({"a": [[1.0 + 0.01 * i] for i in range(processes)], "b": [[0.9 + 0.01 * i] for i in range(processes)]})
    head = report.markdown(data).split("\n")[0]
    assert quoted in head and stats.METHOD in head
    assert ("contains the median of their distribution 88% of the time" in head) == (processes == 4)


def test_compare_gives_the_ratio_of_geometric_means_inside_its_interval():
    from inductor_knobs.ablation import compare

    old = results_of({"a": [[1.0], [1.3], [1.1]]})
    new = results_of({"a": [[0.5], [0.52], [0.9]]})
    line = next(line for line in compare.compare(old, new).splitlines() if line.startswith("| a |"))
    ratio = stats.speedup([0.5, 0.52, 0.9], [1.0, 1.3, 1.1])
    interval = stats.ratio_interval([0.5, 0.52, 0.9], [1.0, 1.3, 1.1])
    assert interval is not None and interval.contains(ratio)
    assert f"| {ratio:.3f} | {interval.low:.3f}–{interval.high:.3f} |" in line


def test_kernel_time_gets_its_own_speedup_and_interval_over_processes():
    """Launch-bound latency (no difference) beside kernel times that differ 2x: the GEMM choice
    shows in the kernel speedup, with the same bootstrap over processes."""
    data = results_of({"a": [[3.0], [3.1], [2.9]], "b": [[3.05], [2.95], [3.0]]})
    for r, kernel in zip(data["runs"], [1.0, 1.02, 0.98, 0.5, 0.51, 0.49]):
        r["kernel_ms"] = kernel
    rows = {r["arm"]: r for r in summary.summarize(data)}
    assert rows["b"]["verdict"] == stats.NO_DIFFERENCE
    assert rows["b"]["kernel_speedup"] == pytest.approx(2.0) and rows["b"]["kernel_verdict"] == "faster"
    assert rows["b"]["kernel_speedup_low"] > 1.0 and "kernel_speedup" not in rows["a"]
    assert "0.5000; 2.00x [" in report.markdown(data)
    assert report._interval(0.9966, 0.92, 0.9995, ".2f", "x") == "0.997x [0.920–1.000]"  # excludes 1.00x: it shows
    assert report._interval(0.98, 0.92, 1.004, ".2f", "x") == "0.98x [0.92–1.00]"
    data["runs"][-1]["kernel_ms"] = None  # 2 processes with a kernel time: an estimate, no interval
    row = summary.summarize(data)[1]
    assert "kernel_speedup" in row and "kernel_verdict" not in row


def test_merge_concatenates_processes():
    data = results_of({"a": [[1.0], [1.1], [0.9]], "b": [[0.5], [0.55], [0.45]]})
    for i, r in enumerate(data["runs"]):
        r.update(index=i, run_id=f"run-{i}", fingerprint={"torch": "2.13.0", "gpu": None})
    part0 = {**data, "runs": data["runs"][::2], "wall_seconds": 10.0}
    part1 = {**data, "runs": data["runs"][1::2], "wall_seconds": 12.0}
    merged = merge.merge([part0, part1])
    rows = {r["arm"]: r for r in summary.summarize(merged)}
    assert rows["a"]["processes"] == 3 and rows["b"]["processes"] == 3
    assert merged["shard_wall_seconds"] == [10.0, 12.0] and "wall_seconds" not in merged


def test_results_json_has_a_schema_and_newer_ones_are_refused(tmp_path):
    data = results_of({"a": [[1.0], [1.1], [0.9]]})
    files.write(data, str(tmp_path))
    written = json.loads((tmp_path / "results.json").read_text())
    assert written["schema"] == files.SCHEMA and written["summary"][0]["processes"] == 3
    assert files.check(written, "x") is written
    with pytest.raises(InvalidKnobValue, match="schema 99"):
        files.check({**written, "schema": 99}, "--compare 'x'")


# -- the load rule -------------------------------------------------------------------------------------


def synthetic_runs(competing, own_rate=1.0, seconds=15.0, count=9):
    """Back-to-back runs whose load readings follow Linux's damped average exactly: the ablation's
    own ``own_rate`` runnable tasks while a run lasts, plus ``competing(t)`` from elsewhere."""
    step, level, t = 0.05, 0.0, 0.0
    runs = []
    for i in range(count):
        record = {"arm": "abc"[i % 3], "repeat": i // 3, "start_s": t, "load_before": level}
        end = t + seconds
        while t < end - 1e-9:
            level += (own_rate + competing(t) - level) * (1 - math.exp(-step / load.LOAD_TAU_S))
            t += step
        record.update(end_s=t, load_after=level, cpu_seconds=own_rate * seconds)
        runs.append(record)
    return runs


def test_the_ablations_own_load_is_not_a_change():
    """The raw load average climbs from 0 towards 1 because of the ablation itself: no warning."""
    runs = synthetic_runs(lambda t: 0.0)
    assert runs[-1]["load_after"] - runs[0]["load_before"] > 0.8
    assert load.load_warnings(runs, cpu_count=2, section_of={}) == []
    assert all(value == pytest.approx(0.0, abs=0.05) for _, value in load.competing_windows(runs))


def test_a_steady_competing_load_is_not_a_change_but_a_busy_cpu():
    runs = synthetic_runs(lambda t: 1.5)
    assert load.load_warnings(runs, cpu_count=2, section_of={}, device="cuda") == []
    (warning,) = load.load_warnings(runs, cpu_count=2, section_of={}, device="cpu")
    assert "the machine was busy" in warning and "1.5 of 2 CPUs" in warning


def test_a_competing_load_that_starts_midway_is_a_change():
    runs = synthetic_runs(lambda t: 2.0 if t > 60 else 0.0)
    (warning,) = load.load_warnings(runs, cpu_count=2, section_of={})
    assert "machine load changed" in warning and "2.0" in warning
    data = results_of({"a": [[1.0]] * 3})
    data["runs"] = [{**run("a", r["repeat"], [1.0]), **r, "arm": "a"} for r in runs]
    text = report.markdown(data)
    assert "**LOAD WARNING**" in text


def test_the_load_threshold_scales_with_the_machine():
    runs = synthetic_runs(lambda t: 2.0 if t > 60 else 0.0)
    assert load.threshold(2) == 1.0 and load.threshold(64) == 16.0
    assert load.load_warnings(runs, cpu_count=64, section_of={}) == []


def test_gpu_sharing_and_clock_changes_are_warned():
    runs = [
        {"arm": "a", "repeat": 0, "gpu": 0, "gpu_utilization_before": 0, "gpu_clock_mhz": 1980},
        {"arm": "b", "repeat": 0, "gpu": 0, "gpu_utilization_before": 90, "gpu_clock_mhz": 1500},
        {"arm": "a@T4", "repeat": 0, "gpu": 0, "gpu_clock_mhz": 1200},
    ]
    out = load.load_warnings(runs, cpu_count=16, section_of={"a": "", "b": "", "a@T4": "T4"})
    assert any("90% busy before run b #0" in w for w in out)
    assert sum("SM clock changed" in w for w in out) == 1  # the T4 section's single clock is no change


def test_with_several_workers_at_once_only_the_clock_rule_applies():
    changed = synthetic_runs(lambda t: 2.0 if t > 60 else 0.0)
    assert load.load_warnings(changed, cpu_count=2, section_of={}, parallel=4) == []
    runs = [
        {"arm": "a", "repeat": 0, "gpu": 0, "gpu_utilization_before": 90, "gpu_clock_mhz": 1980},
        {"arm": "b", "repeat": 0, "gpu": 0, "gpu_utilization_before": 90, "gpu_clock_mhz": 1500},
    ]
    (warning,) = load.load_warnings(runs, cpu_count=16, section_of={}, parallel=4)
    assert "SM clock changed" in warning
    data = results_of({"a": [[1.0]] * 3}, parallel=4)
    data["runs"] = [{**run("a", r["repeat"], [1.0]), **r, "arm": "a"} for r in changed]
    text = report.markdown(data)
    assert "**LOAD WARNING**" not in text and "the load rule checks only SM clocks here" in text


def test_the_gpu_reading_before_a_run_waits_out_our_own_previous_worker(monkeypatch):
    """NVML's utilisation covers its last sample period: read at once after our own worker on that
    GPU exited, it would flag that worker's kernels as another process's."""
    now, slept = [100.0], []
    monkeypatch.setattr(job.time, "perf_counter", lambda: now[0])
    monkeypatch.setattr(job.time, "sleep", slept.append)
    monkeypatch.setattr(job.load, "gpu_utilization", lambda index: 0)
    monkeypatch.setattr(job, "_GPU_RELEASED", {})
    job._readings(5, "before")  # nothing of ours ran on GPU 5 yet
    job._readings(5, "after")  # our worker there exits at t = 100 s
    now[0] = 100.25
    assert job._readings(5, "before")["gpu_utilization_before"] == 0
    job._readings(6, "before")  # another GPU
    assert slept == [0.0, pytest.approx(load.NVML_SAMPLE_PERIOD_S - 0.25), 0.0]
    monkeypatch.setattr(job.load, "gpu_utilization", lambda index: None)  # no NVML: no reading, no wait
    job._readings(7, "after")
    assert 7 not in job._GPU_RELEASED


def test_old_results_without_readings_warn_nothing():
    assert load.load_warnings([{"arm": "a", "repeat": 0, "ok": True}], cpu_count=2, section_of={}) == []


# -- the command line: processes, extras, models ---------------------------------------------------------


@pytest.fixture
def no_arm_runs(monkeypatch):
    def execute(plan, progress=True):  # pragma: no cover - the point is that it is not reached
        raise AssertionError("an arm ran")

    monkeypatch.setattr(command, "execute", execute)


@pytest.mark.parametrize("value", ["1", "2"])
def test_too_few_processes_is_an_error_before_any_arm_runs(value, capsys, no_arm_runs):
    with pytest.raises(InvalidKnobValue, match=rf"--repeats={value} is too few processes per arm.*>= 3.*t-interval.*--smoke"):
        plan_for("--device", "cpu", "--arm", "eager", "--repeats", value)
    assert cli.main(["ablate", "--device", "cpu", "--arm", "eager", "--repeats", value]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "--repeats" in err


def test_too_few_processes_in_a_config_names_the_file(tmp_path):
    path = tmp_path / "a.toml"
    path.write_text('repeats = 2\n[[arm]]\nname = "eager"\n')
    with pytest.raises(InvalidKnobValue, match=r"repeats = 2 in --config .*a\.toml.*>= 3"):
        plan_for("--device", "cpu", "--config", str(path))


def test_command_line_wins_over_the_config_file_which_wins_over_the_defaults():
    example = str(TESTS.parent / "examples" / "ablation.toml")  # repeats = 5, 8 arms
    assert plan_for("--device", "cpu", "--config", example).repeats == 5
    smoke = plan_for("--device", "cpu", "--config", example, "--smoke")
    assert smoke.repeats == options.SMOKE_PROCESSES == 1 and len(smoke.arms) == 8  # 8 processes, not 40
    assert plan_for("--device", "cpu", "--config", example, "--quick").repeats == options.QUICK_PROCESSES
    assert plan_for("--device", "cpu", "--config", example, "--smoke", "--repeats", "2").repeats == 2


def test_process_defaults_and_smoke():
    assert plan_for("--device", "cpu", "--arm", "eager").repeats == options.DEFAULT_PROCESSES == 5
    assert plan_for("--device", "cpu", "--arm", "eager", "--quick").repeats == 3
    assert plan_for("--device", "cpu").repeats == 3  # the main job
    smoke = plan_for("--device", "cpu", "--arm", "eager", "--smoke")
    assert smoke.repeats == 1 and smoke.quick and smoke.smoke
    assert plan_for("--device", "cpu", "--arm", "eager", "--smoke", "--repeats", "2").repeats == 2


@pytest.mark.parametrize(
    ("workload", "extra"), [("hf:bert-base", "hf"), ("hf:tinyllama-2layer", "hf"), ("timm:resnet50", "timm")]
)
def test_a_missing_extra_is_named_before_any_arm_runs(monkeypatch, capsys, no_arm_runs, workload, extra):
    monkeypatch.setitem(sys.modules, models.EXTRAS[extra][0], None)  # how Python marks "not importable"
    module, _, requirement = models.EXTRAS[extra]
    with pytest.raises(InvalidKnobValue, match=rf"needs {module}.*pip install '{requirement}'.*'inductor-knobs\[{extra}\]'"):
        plan_for("--device", "cpu", "--workload", workload)
    assert cli.main(["ablate", "--device", "cpu", "--workload", workload]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and f"pip install '{requirement}'" in err


def test_install_hints_match_the_extras_in_pyproject():
    text = (TESTS.parent / "pyproject.toml").read_text()
    for _, extra, requirement in models.EXTRAS.values():
        assert f'{extra} = ["{requirement}"]' in text


def test_models_do_not_import_workloads():
    """Issue 23's import circle: workloads imports models, never the other way round."""
    import ast

    tree = ast.parse(Path(models.__file__).read_text())
    imported = {n.module for n in ast.walk(tree) if isinstance(n, ast.ImportFrom)}
    assert "workloads" not in imported and not any((m or "").endswith(".workloads") for m in imported)


def test_unknown_hf_model_suggests_close_names():
    with pytest.raises(UnknownKnob, match=r"unknown Hugging Face model 'bert-bas'; did you mean 'bert-base'\?"):
        workloads.resolve("hf:bert-bas")


def test_unknown_timm_model_suggests_close_names(monkeypatch):
    fake = types.ModuleType("timm")
    names = ["resnet18", "resnet50", "vit_small_patch16_224"]
    fake.is_model = lambda name: name in names  # type: ignore[attr-defined]
    fake.list_models = lambda: names  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, "timm", fake)
    with pytest.raises(UnknownKnob, match=r"unknown timm model 'resnet5'; did you mean 'resnet50'"):
        workloads.resolve("timm:resnet5")
    assert callable(workloads.resolve("timm:vit_small_patch16_224"))


@pytest.mark.parametrize("name", ["hf:bert-base", "hf:tinyllama-2layer"])
def test_hf_models_build_from_configs(name):
    pytest.importorskip("transformers")
    work = workloads.build(name, "cpu", True)
    with torch.no_grad():
        out = work.model(*work.inputs[0])
    assert isinstance(out, torch.Tensor) and out.dtype == torch.float32 and out.dim() == 3


def test_timm_models_build_without_downloads():
    pytest.importorskip("timm")
    work = workloads.build("timm:resnet18", "cpu", True)
    with torch.no_grad():
        out = work.model(*work.inputs[0])
    assert out.shape[0] == 1 and not work.model.training


def test_gemm_mlp_is_gemm_bound_and_small_on_cpu():
    work = workloads.build("gemm_mlp", "cpu", True)
    assert [type(m).__name__ for m in work.model] == ["Linear"] * 4
    with torch.no_grad():
        assert work.model(*work.inputs[0]).std().item() == pytest.approx(1.0, rel=0.3)


# -- the main job ---------------------------------------------------------------------------------------------


@pytest.fixture
def big_gpu(monkeypatch):
    """A fake 132-SM GPU with green contexts, for planning only (nothing runs on it)."""

    def fake(sms: int, green: bool = True):
        props = types.SimpleNamespace(multi_processor_count=sms, name="Fake GPU", total_memory=80 * 2**30)
        monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
        monkeypatch.setattr(torch.cuda, "device_count", lambda: 1)
        monkeypatch.setattr(torch.cuda, "get_device_properties", lambda device=None: props)
        if green:
            monkeypatch.setattr(torch.cuda, "GreenContext", type("GreenContext", (), {"Stream": None}), raising=False)
        else:
            monkeypatch.delattr(torch.cuda, "GreenContext", raising=False)

    return fake


def test_the_main_jobs_workers_at_once_follow_its_busiest_gpu(big_gpu, transformers_present, monkeypatch):
    """Repeat r of every arm runs on GPU r mod N: 3 repeats on 2 GPUs put 12 runs on GPU 0 and 6 on GPU 1, and the
    default sizes the workers for those 12 (one batch where memory allows, equal batches where it does not)."""
    import torch

    big_gpu(132)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 2)
    monkeypatch.setattr(main_job, "usable_cpus", lambda: 32)
    monkeypatch.setattr(quiet, "_available_gib", lambda: 240.0)
    assert plan_for().parallel == 12  # min(16 CPUs per GPU, GPU 0's 12 runs)
    monkeypatch.setattr(quiet, "_available_gib", lambda: 80.0)  # 10 live workers per GPU: GPU 0's 12 in two batches
    assert plan_for().parallel == 6
    assert plan_for("--shard", "0/2").parallel == 6  # this shard's jobs: 6 on GPU 0, one batch
    monkeypatch.setattr(quiet, "_available_gib", lambda: 240.0)
    assert plan_for("--shard", "0/2").parallel == 6


def test_main_job_on_a_big_gpu_emulates_t4_and_l4_and_keeps_an_aa_control(big_gpu, transformers_present, monkeypatch):
    big_gpu(132)
    monkeypatch.setattr(main_job, "usable_cpus", lambda: 16)
    monkeypatch.setattr(quiet, "_available_gib", lambda: 120.0)  # a one-H200 node's host memory
    plan = plan_for()
    names = [a.name for a in plan.arms]
    assert names == ["gated@T4", "force_gemm_autotune@T4", "gated@L4", "force_gemm_autotune@L4", "gated", "force_gemm_autotune"]
    assert plan.workload == "hf:bert-base" and plan.repeats == 3 and plan.main_job
    assert plan.quick and plan.iters == 200 and plan.warmup == 3 and plan.profile_iters == 5  # small inputs, 200 samples
    assert plan.parallel == 16  # min(16, 16 CPUs): the 18 runs in one batch of the barrier
    knobs = {a.name: a.knobs for a in plan.arms}
    assert knobs["gated@T4"] == knobs["gated"] == {"max_autotune_gemm": "1", "gemm_backends": "ATEN,TRITON", "cudagraphs": "1"}
    # Both arms run CUDA graphs and compile with the same Inductor config: only the gate differs (the A/A stays A/A).
    from inductor_knobs.core.knobs import Knobs
    from inductor_knobs.core.plan import config_values

    gated, forced = (config_values(Knobs.from_env(a.env())) for a in plan.arms[-2:])
    assert gated == forced and gated["triton.cudagraphs"] is True and knobs["force_gemm_autotune"]["cudagraphs"] == "1"
    assert [knobs[f"force_gemm_autotune{s}"]["min_sms"] for s in ("@T4", "@L4", "")] == ["40", "58", "132"]
    emulate = {j["arm"]["name"]: j["emulate"] for j in plan.jobs()}
    assert emulate["gated@T4"] == "T4" and emulate["force_gemm_autotune@L4"] == "L4" and emulate["gated"] is None
    assert plan.baselines == {n: ("gated" + n[n.index("@") :] if "@" in n else "gated") for n in names}
    assert "A/A control" in plan.sections["force_gemm_autotune"] and "below the gate" in plan.sections["gated@L4"]
    # --baseline in the main job names the arm whose counterpart each section compares with
    flipped = plan_for("--baseline", "force_gemm_autotune")
    assert flipped.baselines["gated@T4"] == "force_gemm_autotune@T4" and flipped.baselines["gated"] == "force_gemm_autotune"


def test_main_job_with_another_workload_uses_its_own_sizes(big_gpu):
    big_gpu(132)
    plan = plan_for("--workload", "gemm_mlp")
    assert plan.workload == "gemm_mlp" and not plan.quick and len(plan.arms) == 6


@pytest.mark.parametrize(
    ("sms", "green", "why", "arms"),
    [
        (40, True, "below torch's 68-SM gate", ["gated", "force_gemm_autotune"]),
        (132, False, "torch >= 2.11", ["gated", "force_gemm_autotune"]),
    ],
)
def test_main_job_without_emulated_sections_says_why(big_gpu, transformers_present, sms, green, why, arms):
    big_gpu(sms, green)
    plan = plan_for()
    assert [a.name for a in plan.arms] == arms and why in (plan.emulation_skipped or "") and not plan.sections
    assert plan.arms[1].knobs["min_sms"] == str(sms)


def test_main_job_on_a_gpu_without_transformers_stops_before_anything_runs(big_gpu, monkeypatch, capsys, tmp_path):
    big_gpu(132)
    monkeypatch.setitem(sys.modules, "transformers", None)

    def execute(plan, progress=True):  # pragma: no cover - the point is that it is not reached
        raise AssertionError("an arm ran")

    monkeypatch.setattr(command, "execute", execute)
    out = tmp_path / "ablation-results"
    assert cli.main(["ablate", "--out", str(out), "--overwrite", "--plot"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "pip install 'transformers>=4.40'" in err and "hf:bert-base" in err
    assert not out.exists()  # nothing half-written


@pytest.mark.parametrize(("value", "match"), [("0", ">= 1"), ("-1", ">= 1")])
def test_parallel_is_checked_before_anything_runs(value, match):
    with pytest.raises(InvalidKnobValue, match=match):
        plan_for("--device", "cpu", "--arm", "eager", "--parallel", value)
    assert plan_for("--device", "cpu").parallel == 1
    # On CPU too: the measurement barrier keeps every measurement away from compiling workers.
    assert plan_for("--device", "cpu", "--arm", "eager", "--parallel", "2").parallel == 2


@pytest.mark.parametrize("value", ["0", "-2"])
def test_compile_threads_are_checked_and_reach_every_worker(value, monkeypatch):
    monkeypatch.delenv("TORCHINDUCTOR_COMPILE_THREADS", raising=False)
    with pytest.raises(InvalidKnobValue, match=r"--compile-threads=.*allowed an int >= 1"):
        plan_for("--device", "cpu", "--arm", "eager", "--compile-threads", value)
    plan = plan_for("--device", "cpu", "--arm", "eager", "--parallel", "2", "--compile-threads", "3")
    assert plan.compile_threads == 3 and runner.make_workers(plan, 6).compile_threads == 3
    default = plan_for("--device", "cpu", "--arm", "eager", "--parallel", "2")
    assert default.compile_threads is None
    assert runner.make_workers(default, 6).compile_threads == max(1, quiet.usable_cpus() // 2)
    assert runner.make_workers(plan_for("--device", "cpu", "--arm", "eager"), 6).compile_threads is None
    # The environment's variable reaches every worker (workers.base_env keeps it): it is what the records say, and a
    # different --compile-threads is refused rather than silently overridden.
    monkeypatch.setenv("TORCHINDUCTOR_COMPILE_THREADS", "4")
    assert runner.make_workers(default, 6).compile_threads == 4
    with pytest.raises(InvalidKnobValue, match=r"--compile-threads=3 differs from TORCHINDUCTOR_COMPILE_THREADS='4'"):
        plan_for("--device", "cpu", "--arm", "eager", "--parallel", "2", "--compile-threads", "3")
    assert plan_for("--device", "cpu", "--arm", "eager", "--compile-threads", "4").compile_threads == 4


def test_compile_threads_are_for_the_local_executor_and_results_json_says_what_the_workers_used(tmp_path, monkeypatch):
    monkeypatch.delenv("TORCHINDUCTOR_COMPILE_THREADS", raising=False)
    from inductor_knobs.ablation import slurm_options

    monkeypatch.setattr(slurm_options, "check_available", lambda: None)  # no Slurm needed to check the option
    with pytest.raises(InvalidKnobValue, match=r"--compile-threads=2 is for the local executor"):
        plan_for(
            "--device", "cpu", "--arm", "eager", "--executor", "slurm", "--out", str(tmp_path / "s"), "--compile-threads", "2"
        )  # fmt: skip

    def execute(plan, progress=True, jobs=None, on_record=None, workers=None, before_measuring=None):
        return [
            run(job["arm"]["name"], job["repeat"], [1.0 + 0.01 * job["repeat"]], index=job["index"], shard=0)
            for job in (plan.jobs() if jobs is None else jobs)
        ]

    monkeypatch.setattr(command, "execute", execute)
    argv = ["ablate", "--device", "cpu", "--arm", "eager", "--arm", "default", "--parallel", "2", "--out"]
    assert cli.main([*argv, str(tmp_path / "a"), "--compile-threads", "3"]) == 0
    assert json.loads((tmp_path / "a" / "results.json").read_text())["compile_threads"] == 3
    assert cli.main([*argv, str(tmp_path / "b")]) == 0  # the default: CPUs / (lanes x parallel)
    assert json.loads((tmp_path / "b" / "results.json").read_text())["compile_threads"] == max(1, quiet.usable_cpus() // 2)


def test_main_job_on_cpu_explains_the_gate_before_the_table(tmp_path, monkeypatch, capsys):
    def execute(plan, progress=True, jobs=None, on_record=None, workers=None, before_measuring=None):
        return [
            run(job["arm"]["name"], job["repeat"], [1.0 + 0.01 * job["repeat"]], index=job["index"], shard=0)
            for job in (plan.jobs() if jobs is None else jobs)
        ]

    monkeypatch.setattr(command, "execute", execute)
    assert cli.main(["ablate", "--device", "cpu", "--out", str(tmp_path)]) == 0
    out = capsys.readouterr().out
    note = out.index("This is a CPU run: it tests no SM gate.")
    assert note < out.index("| arm |") and "aten.mm×4" in out[note : out.index("| arm |")]
    assert "runs no gate arm" in out and "What it cannot show" in out and "| force_gemm_autotune |" not in out
    md = (tmp_path / "results.md").read_text()
    assert "it tests no SM gate" in md
    written = json.loads((tmp_path / "results.json").read_text())
    assert written["main_job"] and isinstance(written["wall_seconds"], float) and written["gpus"] == []


def test_cpu_note_only_where_the_gate_is_involved():
    plain = results_of({"a": [[1.0]] * 3})
    assert explain.notes(plain, summary.summarize(plain)) == []
    gated = {**plain, "arms": [{"name": "a", "knobs": {"min_sms": "40"}}]}
    assert "only move that gate" in explain.notes(gated, summary.summarize(gated))[0]


# -- kernels and plots ------------------------------------------------------------------------------------------


WRAPPER = """
from torch._inductor.select_algorithm import extern_kernels
async_compile = AsyncCompile()
triton_tem_fused_mm_0 = async_compile.triton('triton_tem_fused_mm_0', '''
@triton.jit
def triton_tem_fused_mm_0(arg_A, arg_B, out_ptr0):
    acc += tl.dot(a, b)
''')
cpp_fused_mm_1 = async_compile.cpp_pybinding(['float*'], r'''
void kernel() { const int64_t Mc_blocks = 4; cpp_fused_mm_1_micro_gemm<false>(); }
''')
triton_poi_fused_relu_2 = async_compile.triton('triton_poi_fused_relu_2', '''x''')
async_compile.wait(globals())
del async_compile

def call(args):
    triton_tem_fused_mm_0.run(buf0, buf1, buf2, grid=grid(1))
    cpp_fused_mm_1(buf3)
    triton_poi_fused_relu_2.run(buf2)
    extern_kernels.mm(buf2, buf3, out=buf4)
    extern_kernels.addmm(b, buf4, w, alpha=1, beta=1, out=buf5)
    buf6 = torch.ops.mkldnn._linear_pointwise.default(buf5, w, None, 'none', [], '')
"""


def test_gemm_calls_are_read_from_the_wrapper(tmp_path):
    counts = kernels.count_gemm_calls(WRAPPER)
    assert dict(counts) == {
        "triton template": 1,
        "cpp gemm template": 1,
        "aten.mm": 1,
        "aten.addmm": 1,
        "mkldnn._linear_pointwise": 1,
    }
    (tmp_path / "ab").mkdir()
    (tmp_path / "ab" / "cwrapper.py").write_text(WRAPPER)
    (tmp_path / "ab" / "kernel.py").write_text("def call(args):\n    extern_kernels.mm(a, b)\n")  # not a wrapper
    assert kernels.gemm_calls(str(tmp_path))["aten.mm"] == 1
    assert kernels.gemm_calls(None) == {} and kernels.gemm_calls(str(tmp_path / "missing")) == {}


def test_plot_with_many_arms(tmp_path):
    pytest.importorskip("matplotlib")
    from inductor_knobs.ablation import plot

    per_arm = {f"arm-{i:02d}-with-a-long-name": [[1.0 + 0.05 * i + 0.01 * k] for k in range(3)] for i in range(14)}
    rows = summary.summarize(results_of(per_arm))
    path = plot.plot(rows, str(tmp_path / "r.png"), "many arms")
    import matplotlib.image

    height = matplotlib.image.imread(path).shape[0]
    assert height > 14 * plot.ROW_INCHES * 100  # the figure grew with the arms


def _drawn(monkeypatch, tmp_path, rows, device):
    """The figure :func:`plot.plot` draws for ``rows`` (kept open: ``plt.close`` is stubbed)."""
    pytest.importorskip("matplotlib")
    import matplotlib.pyplot as plt

    from inductor_knobs.ablation import plot

    figures = []
    monkeypatch.setattr(plt, "close", figures.append)
    plot.plot(rows, str(tmp_path / "results.png"), "w", device)
    forest, _, _, scatter = figures[0].axes
    return forest, scatter


def test_plot_on_cpu_names_what_was_measured_and_says_why_a_speedup_has_no_interval(monkeypatch, tmp_path):
    per_arm = {"base": [[1.0], [1.02], [0.98]], "slow": [[2.0], [2.1], [1.9]], "two": [[1.0], [1.1]]}
    rows = summary.summarize(results_of(per_arm))  # "two": 2 processes, too few for an interval
    forest, scatter = _drawn(monkeypatch, tmp_path, rows, "cpu")
    assert "latency on CPU" in forest.get_title() and "GPU" not in forest.get_title()
    assert "GPU" not in scatter.get_ylabel()
    # Every speedup drawn has its interval, or says beside its mark why there is none.
    with_interval = [c for c in forest.containers if c.has_xerr]
    assert len(forest.containers) == 3 and len(with_interval) == 1
    assert sorted(a.get_text() for a in forest.texts) == ["baseline (1.00x by definition)", "no interval: < 3 processes"]
    assert len([c for c in scatter.containers if c.has_yerr]) == 1


def test_plot_draws_no_speedup_where_the_baseline_has_no_measurement(monkeypatch, tmp_path):
    rows = summary.summarize(results_of({"base": [[1.0], [1.02], [0.98]], "arm": [[2.0], [2.1], [1.9]]}))
    for key in ("speedup", "speedup_low", "speedup_high", "verdict"):
        rows[1].pop(key)
    rows[1]["baseline"] = "failed"
    forest, scatter = _drawn(monkeypatch, tmp_path, rows[1:], "cuda")
    assert not forest.containers and not scatter.containers  # not a point at 1.00x as if no different
    assert [a.get_text() for a in forest.texts] == ["no speedup: baseline 'failed' has no measurement"]


def test_plot_legend_names_gpu_kernel_time_only_where_it_was_measured():
    from inductor_knobs.ablation import plot

    assert plot.legend([{"arm": "a", "kernel_speedup": 1.2}], "cuda") == "\u25a0 GPU kernel time, \u25cb latency"
    assert plot.legend([{"arm": "a"}], "cuda") == "\u25cb latency on CUDA"


class FakeProfile:
    """Stands in for ``torch.profiler.profile``: two CUDA kernels of 300 and 100 us per iteration,
    one user annotation over them, and a CPU op (neither may count)."""

    iterations = 0

    def __init__(self, activities):
        assert activities == [torch.profiler.ProfilerActivity.CUDA]

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return False

    def events(self):
        from torch.autograd import DeviceType

        def event(device, us, annotation=False):
            return types.SimpleNamespace(device_type=device, self_device_time_total=us, is_user_annotation=annotation)

        kernels = [event(DeviceType.CUDA, 300.0), event(DeviceType.CUDA, 100.0)] * FakeProfile.iterations
        return [*kernels, event(DeviceType.CUDA, 10_000.0, annotation=True), event(DeviceType.CPU, 50.0)]


def test_gpu_kernel_time_sums_device_kernels_per_iteration(monkeypatch):
    monkeypatch.setattr(torch.cuda, "synchronize", lambda: None)
    monkeypatch.setattr(torch.profiler, "profile", FakeProfile)

    def call():
        FakeProfile.iterations += 1

    FakeProfile.iterations = 0
    assert sum(kernels.gpu_kernel_times(call, 4).values()) == pytest.approx(0.4)  # (300 + 100) us per iteration
    FakeProfile.iterations = 0  # no kernels recorded at all
    with pytest.raises(RuntimeError, match="no CUDA kernels"):
        kernels.gpu_kernel_times(lambda: None, 1)


def test_a_failing_profiler_never_fails_the_run():
    from inductor_knobs.ablation import worker

    extras = worker._extras(lambda: None, on_gpu=not torch.cuda.is_available(), compiled=False, profile_iters=2)
    if not torch.cuda.is_available():  # torch.cuda.synchronize raises here: recorded, not raised
        assert extras["kernel_ms"] is None and extras["kernel_ms_error"]


# -- compile time, where the time went, the GPU note ---------------------------------------------------------


def test_compile_time_is_the_cold_processes_and_the_time_table_sums_the_runs():
    data = results_of({"gated": [[2.0], [2.1], [2.2]], "forced": [[1.0], [1.1], [1.2]]}, parallel=4, wall_seconds=50.0)
    for r in data["runs"]:
        cold = r["repeat"] == 0
        r.update(
            kernel_cache="cold" if cold else "shared",
            compile_seconds=60.0 if cold else 20.0,
            wall_seconds=80.0 if cold else 30.0,
            phase_seconds={"import": 9.0, "build": 1.0, "compile": 60.0 if cold else 20.0, "wait": 2.0, "measure": 0.1},
        )
    rows = {r["arm"]: r for r in summary.summarize(data)}
    assert rows["forced"]["compile_seconds"] == 60.0 and rows["forced"]["compile_processes"] == 1
    text = report.markdown(data)
    assert "4 processes per GPU compiled at once and measured one at a time beside the others" in text  # no barrier record
    assert "timed while up to 4 processes compiled at once" in text and "**Where the time went**" in text
    assert "the 4 of 6 later repeats, which share Triton binaries, are left out" in text
    assert "| all runs (sum) | 6 |" in text and "in 50 s of wall time (5.6 processes alive on average" in text
    assert "12 s of the process time was waiting for a quiet turn" in text
    old = results_of({"a": [[1.0]] * 3})  # files from before phases were recorded: no table, and all runs are cold
    assert report.time_table(old) == [] and summary.summarize(old)[0]["compile_processes"] == 3


def test_an_arm_whose_cold_runs_all_failed_says_its_compile_time_is_not_cold():
    """Only runs that reused kept Triton binaries finished: their compile time stands in, and the table's heading
    and the arm's note say so instead of calling it cold."""
    data = results_of({"gated": [[2.0], [2.1], [2.2]], "forced": [[1.0], [1.1], [1.2]]}, parallel=4)
    for r in data["runs"]:
        r.update(kernel_cache="cold" if r["repeat"] == 0 else "shared", compile_seconds=60.0 if r["repeat"] == 0 else 20.0)
        if r["arm"] == "forced" and r["repeat"] == 0:
            r.update(ok=False, error="worker exited -11 without a result")
    rows = {r["arm"]: r for r in summary.summarize(data)}
    assert rows["gated"]["compile_cold"] and rows["gated"]["compile_seconds"] == 60.0
    assert rows["forced"]["compile_cold"] is False and rows["forced"]["compile_seconds"] == 20.0
    text = report.markdown(data)
    assert "compile s of forced is from later repeats, which shared their Triton binaries (no cold run finished)" in text
    one_at_a_time = report.markdown({**data, "parallel": 1})  # the shared kernels are there on any GPU ablation
    assert "compile s of forced is from later repeats" in one_at_a_time
    assert explain.measured(data, rows["forced"]).startswith(
        "forced compiled in later repeats sharing Triton binaries (no cold run of it finished) in 20.0 s"
    )


def _explained(per_arm_runs: dict, device: str = "cpu", **extra) -> str:
    """The notes of a main job whose runs carry ``per_arm_runs[arm]`` (a dict of record fields) three times."""
    data = results_of({arm: [[1.0], [1.01], [0.99]] for arm in per_arm_runs}, device=device, main_job=True, **extra)
    for r in data["runs"]:
        r.update(per_arm_runs[r["arm"]])
    return "\n".join(explain.notes(data, summary.summarize(data)))


def test_the_notes_claim_only_what_the_runs_measured():
    """Synthetic records: where no run recorded autotuning, the note says exactly that (autotune_seconds 0),
    and claims no benchmarked candidates; where the runs recorded it, the note gives their numbers; where
    this torch could not observe it, the note says it was not measured."""
    none = {"autotune_seconds": 0.0, "autotune_observed": True, "autotune_ops": 0, "autotune_choices": 0}
    note = _explained({"default": none, "max-autotune-no-cudagraphs": none})
    assert (
        "no autotune benchmarks were recorded in any run of max-autotune-no-cudagraphs (autotune_seconds 0 in all 3 runs)" in note
    )
    assert "candidates" not in note and "C++ GEMM template" not in note  # no work that did not happen
    assert "default's compiled code calls aten.mm×4 (ATen's GEMM kernels)" in note
    assert "default compiled cold in 2.0 s" in note and "the same GEMM kernels (aten.mm×4)" in note

    tuned = {"autotune_seconds": 1.5, "autotune_observed": True, "autotune_ops": 1, "autotune_choices": 12}
    note = _explained({"default": none, "max-autotune-no-cudagraphs": {**tuned, "gemm_calls": {"cpp gemm template": 4}}})
    assert (
        "max-autotune-no-cudagraphs recorded autotune benchmarks in 3 of 3 runs: 12 candidates over 1 op(s) per run "
        "(median), autotune_seconds 1.50 s (median)"
    ) in note
    assert "calls cpp gemm template×4 (Inductor's C++ GEMM template)" in note and "different GEMM kernels" in note

    unseen = _explained({"default": {"autotune_seconds": 0.0, "autotune_observed": False}})
    assert "whether default benchmarked GEMM candidates was not measured" in unseen and "no autotune" not in unseen
    old = _explained({"default": {"autotune_seconds": 0.7}})  # a file from before autotune_choices: seconds only
    assert "default recorded autotune benchmarks in 3 of 3 runs, autotune_seconds 0.70 s (median)" in old
    eager = _explained({"eager": {}}, arms=[{"name": "eager", "eager": True}])
    assert "eager ran eagerly (nothing compiled)" in eager and "autotune" not in eager.split("What the runs")[1]


def test_gpu_note_says_what_each_section_measured():
    section = "emulated T4 (40 SMs, below the gate)"
    arms = [
        {"name": "gated@T4", "emulate": "T4", "section": section},
        {"name": "force_gemm_autotune@T4", "emulate": "T4", "section": section},
    ]
    gated = {"autotune_seconds": 0.0, "autotune_observed": True, "autotune_ops": 0, "autotune_choices": 0}
    forced = {"autotune_seconds": 3.0, "autotune_observed": True, "autotune_ops": 2, "autotune_choices": 40}
    forced["gemm_calls"] = {"triton template": 3, "aten.mm": 1}
    note = _explained({"gated@T4": gated, "force_gemm_autotune@T4": forced}, device="cuda", arms=arms, workload="hf:bert-base")
    assert f"In {section}: gated@T4 compiled cold in 2.0 s; no autotune benchmarks were recorded in any run of gated@T4" in note
    assert "force_gemm_autotune@T4 recorded autotune benchmarks in 3 of 3 runs: 40 candidates over 2 op(s)" in note
    assert "calls aten.mm×1, triton template×3 (autotuned Triton GEMM templates; ATen's GEMM kernels)" in note
    assert "keeps GEMMs on ATen" not in note and "Triton GEMM templates compete" not in note  # claims, not data


def test_gpu_note_says_how_to_read_the_sections_and_the_control():
    arms = [
        {"name": "gated@T4", "emulate": "T4", "section": "emulated T4 (40 SMs, below the gate)"},
        {"name": "force_gemm_autotune@T4", "emulate": "T4", "section": "emulated T4 (40 SMs, below the gate)"},
        {"name": "gated", "section": "this GPU (132 SMs, above the gate): A/A control"},
    ]
    note = explain.gpu_note({"workload": "hf:bert-base", "arms": arms})
    assert "Does forcing the SM gate help `hf:bert-base`" in note and "A/A control" in note and "kernel time" in note
    assert "torch >= 2.11" in explain.gpu_note({"arms": [], "emulation_skipped": "SM emulation needs torch >= 2.11"})
