"""ablate --executor slurm and --resume: option checks before anything runs, the run store, and a real
Slurm cluster on this machine (tests/slurm_cluster.py): a 2-arm x 3-repeat ablation, one job cancelled
with scancel, then resumed."""

from __future__ import annotations

import importlib.util
import json
import os
import re
import signal
import stat
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from inductor_knobs import cli
from inductor_knobs.ablation import build, command, files, options, outdir, slurm, store
from inductor_knobs.ablation.errors import SlurmSubmitFailed
from inductor_knobs.ablation.job import stamp
from inductor_knobs.ablation.plan import TIME_MARGIN_MIN, SlurmOptions
from inductor_knobs.ablation.signals import Interrupted
from inductor_knobs.errors import InvalidKnobValue

pytest_plugins = ["slurm_cluster"]

TESTS = Path(__file__).parent

#: The tiny CPU ablation of these tests: two eager arms (nothing compiles; each run is one worker that
#: imports torch and measures a 16x16 Linear), three processes each.
TINY = ["ablate", "--device", "cpu", "--workload", "ablation_workload:tiny", "--quick", "--repeats", "3"]
TINY += ["--arm", "eager", "--arm", "e2:eager=true"]


@pytest.fixture(autouse=True)
def _workload_importable(monkeypatch):
    monkeypatch.syspath_prepend(str(TESTS))
    monkeypatch.setenv("PYTHONPATH", str(TESTS))


@pytest.fixture
def no_arm_runs(monkeypatch):
    def execute(*args, **kwargs):  # pragma: no cover - the point is that it is not reached
        raise AssertionError("an arm ran")

    monkeypatch.setattr(command, "execute", execute)
    monkeypatch.setattr(slurm, "execute", execute)


@pytest.fixture
def sbatch_here(monkeypatch):
    """``sbatch`` found on PATH whether Slurm is installed or not: the tests that use this fixture check what
    the command line plans, which submits nothing, so they run on every machine (the real cluster's test skips
    where Slurm is missing)."""
    import shutil

    real = shutil.which
    monkeypatch.setattr(shutil, "which", lambda name, *a, **k: "/usr/bin/sbatch" if name == "sbatch" else real(name, *a, **k))


def plan_for(*argv: str):
    parser = cli.argparse.ArgumentParser()
    options.add_parser(parser.add_subparsers(dest="command"))
    return build.build_plan(parser.parse_args(["ablate", *argv]))


# -- bad input, before anything runs -----------------------------------------------------------


@pytest.mark.parametrize(
    ("argv", "match"),
    [
        (["--executor", "slurmm"], r"--executor='slurmm' is not an executor: allowed local, slurm; did you mean 'slurm'\?"),
        (["--slurm-partition", "gpu"], r"--slurm-partition needs --executor slurm"),
        (["--executor", "local", "--slurm-time", "10"], r"--slurm-time needs --executor slurm \(the local executor"),
        (["--slurm-sbatch-flag", "exclusive"], r"--slurm-sbatch-flag needs --executor slurm"),
        (["--executor", "slurm"], r"--executor slurm needs --out"),
        (
            ["--executor", "slurm", "--out", "o", "--slurm-time", "0"],
            r"--slurm-time=0 is invalid: allowed an int >= 1 \(minutes\)",
        ),
        (["--executor", "slurm", "--out", "o", "--slurm-gpus-per-job", "-1"], r"allowed an int >= 0"),
        (["--executor", "slurm", "--out", "o", "--slurm-partition", "a b"], r"a name without spaces"),
        (["--executor", "slurm", "--out", "o", "--slurm-sbatch-flag", "array=0-3"], r"submitit sets --array"),
        (["--executor", "slurm", "--out", "o", "--slurm-sbatch-flag", "=3"], r"expected KEY=VALUE"),
        (["--executor", "slurm", "--out", "o", "--slurm-sbatch-flag", "constraint="], r"give a value"),
        (["--executor", "slurm", "--out", "o", "--gpus", "0"], r"--gpus='0' picks GPUs of this machine"),
    ],
)
def test_bad_executor_options_fail_before_anything_runs(argv, match, sbatch_here):
    with pytest.raises(InvalidKnobValue, match=match):
        plan_for("--device", "cpu", "--arm", "eager", *argv)


def test_slurm_without_submitit_names_the_install(monkeypatch, capsys, no_arm_runs):
    import importlib.util

    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name == "submitit" else real(name, *a))
    assert cli.main(["ablate", "--device", "cpu", "--arm", "eager", "--executor", "slurm", "--out", "o"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "needs submitit" in err and "pip install 'inductor-knobs[ablate]'" in err


def test_slurm_without_sbatch_says_where_to_run(monkeypatch):
    import shutil

    real = shutil.which
    monkeypatch.setattr(shutil, "which", lambda name, *a, **k: None if name == "sbatch" else real(name, *a, **k))
    with pytest.raises(InvalidKnobValue, match="sbatch, which is not on PATH"):
        plan_for("--device", "cpu", "--arm", "eager", "--executor", "slurm", "--out", "o")


def test_toml_executor_and_slurm_table(tmp_path, sbatch_here):
    path = tmp_path / "a.toml"
    path.write_text(
        'executor = "slurm"\n[[arm]]\nname = "eager"\n'
        '[slurm]\npartition = "gpu"\ngpus_per_job = 2\ntime = 30\naccount = "lab"\n'
        'sbatch = {constraint = "a100", exclusive = true, "cpus-per-task" = 8}\n'
    )
    plan = plan_for("--device", "cpu", "--config", str(path), "--out", str(tmp_path / "o"), "--slurm-sbatch-flag", "qos=high")
    assert plan.executor == "slurm" and plan.parallel == 1
    assert plan.slurm == SlurmOptions(
        partition="gpu",
        gpus_per_job=2,
        time_min=30,
        account="lab",
        sbatch={"constraint": "a100", "exclusive": True, "cpus-per-task": "8", "qos": "high"},
    )
    params = plan.slurm.parameters(plan)
    assert params["timeout_min"] == 30 and params["gpus_per_node"] == 2 and params["slurm_partition"] == "gpu"
    assert params["slurm_additional_parameters"]["cpus_per_task"] == "8" and params["slurm_account"] == "lab"
    # The command line wins key by key, and --executor local runs the file here (its [slurm] table unused).
    assert plan_for("--device", "cpu", "--config", str(path), "--out", "o", "--slurm-time", "5").slurm.time_min == 5
    assert plan_for("--device", "cpu", "--config", str(path), "--executor", "local").slurm is None


@pytest.mark.parametrize(
    ("content", "match"),
    [
        ('executor = "slurm"\n[[arm]]\nname = "eager"\n[slurm]\npartitoin = "x"\n', r"unknown keys \['partitoin'\]"),
        ('[[arm]]\nname = "eager"\n[slurm]\npartition = "x"\n', r"has a \[slurm\] table but no executor = \"slurm\""),
        ('executor = "pbs"\n[[arm]]\nname = "eager"\n', r"executor = 'pbs' in --config .* is not an executor"),
        ('executor = "slurm"\n[[arm]]\nname = "eager"\n[slurm]\ntime = "1h"\n', r"time = '1h' is invalid: allowed an int >= 1"),
        ('executor = "slurm"\nslurm = 3\n[[arm]]\nname = "eager"\n', r"allowed a \[slurm\] table"),
    ],
)
def test_bad_slurm_tables(tmp_path, content, match):
    path = tmp_path / "a.toml"
    path.write_text(content)
    with pytest.raises(InvalidKnobValue, match=match):
        plan_for("--device", "cpu", "--config", str(path), "--out", str(tmp_path / "o"))


def test_default_time_limit_and_gpus(sbatch_here):
    plan = plan_for("--device", "cpu", "--arm", "eager", "--executor", "slurm", "--out", "o", "--timeout", "61")
    assert plan.slurm is not None
    assert plan.slurm.parameters(plan) == {"name": "ik-ablate", "timeout_min": 2 + TIME_MARGIN_MIN}


def test_cuda_jobs_from_a_machine_without_a_gpu(sbatch_here):
    import torch

    if torch.cuda.is_available():
        pytest.skip("this machine has a GPU")
    plan = plan_for("--device", "cuda", "--arm", "default", "--executor", "slurm", "--out", "o")
    assert plan.device == "cuda" and plan.gpus == [] and plan.slurm is not None
    assert plan.slurm.parameters(plan)["gpus_per_node"] == 1
    assert command.environment(plan)["device_name"] == "the Slurm jobs' GPUs"
    with pytest.raises(InvalidKnobValue, match="sees no CUDA GPU"):
        plan_for("--device", "cuda", "--arm", "default")
    # The main job's GPU workload is hf:bert-base: without transformers that refusal comes first (as in CI).
    needs = "the main job on a GPU reads the GPU's SM count" if importlib.util.find_spec("transformers") else "needs transformers"
    with pytest.raises(InvalidKnobValue, match=needs):
        plan_for("--device", "cuda", "--executor", "slurm", "--out", "o")


# -- the run store and --resume ----------------------------------------------------------------


def test_resume_checks_the_plan_and_keeps_only_successful_runs(tmp_path):
    jobs = plan_for("--device", "cpu", "--arm", "eager", "--arm", "e2:eager=true", "--smoke").jobs()
    runs = store.RunStore(str(tmp_path))
    assert runs.begin(jobs, resume=False) == {}
    runs.save({"ok": True, "index": 0, "arm": "eager", "repeat": 0})
    runs.save({"ok": False, "index": 1, "arm": "e2", "repeat": 0, "error": "boom"})
    assert not list((tmp_path / "runs").glob(".*"))  # no temporary file left behind
    assert runs.begin(jobs, resume=True) == {0: {"ok": True, "index": 0, "arm": "eager", "repeat": 0}}
    other = plan_for("--device", "cpu", "--arm", "eager", "--arm", "e3:eager=true", "--smoke").jobs()
    with pytest.raises(InvalidKnobValue, match=r"plan is not the one in --out .*job 1's arm was"):
        runs.begin(other, resume=True)
    with pytest.raises(InvalidKnobValue, match="holds no earlier ablation"):
        store.RunStore(str(tmp_path / "empty")).begin(jobs, resume=True)


def test_out_with_runs_suggests_resume_and_resume_refuses_overwrite(tmp_path, capsys, no_arm_runs):
    store.RunStore(str(tmp_path)).begin([], resume=False)
    assert cli.main(["ablate", "--device", "cpu", "--arm", "eager", "--out", str(tmp_path)]) == 2
    assert "--resume" in capsys.readouterr().err
    assert cli.main(["ablate", "--device", "cpu", "--arm", "eager", "--out", str(tmp_path), "--resume", "--overwrite"]) == 2
    assert "give one of the two" in capsys.readouterr().err
    assert cli.main(["ablate", "--device", "cpu", "--arm", "eager", "--out", str(tmp_path / "new"), "--resume"]) == 2
    assert "holds no earlier ablation" in capsys.readouterr().err


def fake_record(job: dict) -> dict:
    record = {"ok": True, "index": job["index"], "arm": job["arm"]["name"], "repeat": job["repeat"], "samples_ms": [1.0]}
    record.update(compile_seconds=0.0, autotune_seconds=0.0, peak_memory_bytes=1, max_abs_diff=0.0, mismatch=False)
    return record


def test_overwrite_starts_the_runs_again(tmp_path, monkeypatch, capsys):
    def execute(plan, progress=True, jobs=None, on_record=None, workers=None, before_measuring=None):
        records = [fake_record(job) for job in jobs]
        for record in records:
            on_record(record)
        return records

    monkeypatch.setattr(command, "execute", execute)
    argv = ["ablate", "--device", "cpu", "--arm", "eager", "--arm", "e2:eager=true", "--smoke", "--out", str(tmp_path)]
    assert cli.main(argv) == 0
    (tmp_path / "runs" / "run-7.json").write_text("{}")  # a stale record of another plan
    assert cli.main([*argv, "--overwrite"]) == 0
    assert sorted(p.name for p in (tmp_path / "runs").iterdir()) == ["plan.json", "run-0.json", "run-1.json"]
    assert "not kept" not in capsys.readouterr().err


def _snapshot(out: Path) -> dict[str, bytes]:
    """Every file under ``out`` except the staging directory, with its bytes."""
    return {
        str(p.relative_to(out)): p.read_bytes() for p in sorted(out.rglob("*")) if p.is_file() and outdir.STAGING not in p.parts
    }


def test_overwrite_keeps_the_earlier_results_until_the_new_run_succeeds(tmp_path, monkeypatch, capsys):
    """--overwrite runs into <out>/.ablate-next: an interrupted run, one that raises (sbatch refused the
    jobs, a results file that cannot be written) and one whose runs all fail leave the earlier results
    and runs/ byte for byte as they were; --resume then continues the staged run and, once it
    succeeds, publishes it."""
    how = {"mode": "ok"}

    def execute(plan, progress=True, jobs=None, on_record=None, workers=None, before_measuring=None):
        records = [fake_record(job) for job in jobs]
        if how["mode"] == "fail":
            records = [{**r, "ok": False, "error": "boom"} for r in records]
        for record in records[:1] if how["mode"] == "interrupt" else records:
            on_record(record)
        if how["mode"] == "interrupt":
            raise Interrupted(signal.SIGINT, records[:1], len(jobs))
        if how["mode"] == "refused":
            raise SlurmSubmitFailed("sbatch refused the ablation's 2 job(s): no partition")
        return records

    monkeypatch.setattr(command, "execute", execute)
    out = tmp_path / "out"
    argv = ["ablate", "--device", "cpu", "--arm", "eager", "--arm", "e2:eager=true", "--smoke", "--out", str(out)]
    assert cli.main([*argv, "--plot"]) == 0
    (out / "notes.txt").write_text("mine")
    earlier = _snapshot(out)
    assert {"results.json", "results.png", "runs/plan.json", "runs/run-0.json"} <= set(earlier)
    staging = out / outdir.STAGING
    capsys.readouterr()

    how["mode"] = "interrupt"
    assert cli.main([*argv, "--overwrite"]) == 130
    err = capsys.readouterr().err
    assert _snapshot(out) == earlier and f"the earlier results in {out} are unchanged" in err
    assert json.loads((staging / "results.json").read_text())["partial"] is True

    how["mode"] = "refused"
    assert cli.main([*argv, "--overwrite"]) == 2
    assert _snapshot(out) == earlier and "sbatch refused" in capsys.readouterr().err

    how["mode"] = "ok"
    real = command.files.write

    def write_then_fail(results, where, plot=False):  # results.json is written, results.md fails
        real(results, where, plot)
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(command.files, "write", write_then_fail)
    with pytest.raises(OSError, match="No space left"):
        cli.main([*argv, "--overwrite"])
    assert _snapshot(out) == earlier
    monkeypatch.setattr(command.files, "write", real)

    how["mode"] = "fail"
    assert cli.main([*argv, "--overwrite"]) == 1  # every run failed
    err = capsys.readouterr().err
    assert _snapshot(out) == earlier and f"its results are in {staging}" in err

    how["mode"] = "ok"  # --resume continues the staged run (its two failed runs) and publishes it
    assert cli.main([*argv, "--resume"]) == 0
    assert "resuming: 0 of 2 runs kept, 2 to run" in capsys.readouterr().err
    assert not staging.exists() and (out / "notes.txt").read_text() == "mine"
    assert not (out / "results.png").exists()  # no --plot this time: the earlier plot does not survive
    published = json.loads((out / "results.json").read_text())
    assert published["resumed_runs"] == 0 and all(r["ok"] for r in published["runs"])
    assert _snapshot(out) != earlier and sorted(p.name for p in (out / "runs").iterdir()) == [
        "plan.json",
        "run-0.json",
        "run-1.json",
    ]
    assert not [p for p in out.rglob("*.tmp")]  # no temporary file of an atomic write is left


def test_results_files_are_written_whole_or_not_at_all(tmp_path, monkeypatch):
    """A results file is a temporary file in the same directory until it is complete, then renamed over
    the old one: a write that fails half way leaves the old file and no temporary file."""
    from inductor_knobs.core.files import atomic_write

    path = tmp_path / "results.md"
    path.write_text("old")
    with pytest.raises(RuntimeError, match="half way"), atomic_write(path) as dst:
        dst.write("new, but only half of it")
        raise RuntimeError("half way")
    assert path.read_text() == "old" and sorted(p.name for p in tmp_path.iterdir()) == ["results.md"]
    with atomic_write(path) as dst:
        dst.write("new")
    mask = os.umask(0)
    os.umask(mask)
    assert path.read_text() == "new" and stat.S_IMODE(path.stat().st_mode) == 0o666 & ~mask
    # the results files: results.md is written after results.json and results.csv
    monkeypatch.setattr(files, "markdown", lambda *a, **k: (_ for _ in ()).throw(RuntimeError("report failed")))
    with pytest.raises(RuntimeError, match="report failed"):
        files.write({"workload": "w", "baseline": "a", "repeats": 1, "arms": [], "runs": []}, str(tmp_path))
    assert path.read_text() == "new" and json.loads((tmp_path / "results.json").read_text())["workload"] == "w"
    assert not list(tmp_path.glob(".*"))


def test_local_resume_runs_only_the_missing_run(tmp_path, capsys):
    """The local executor keeps its records too: a kept run is not run again (one worker runs here)."""
    argv = [
        "ablate",
        "--device",
        "cpu",
        "--workload",
        "ablation_workload:tiny",
        "--smoke",
        "--arm",
        "eager",
        "--arm",
        "e2:eager=true",
    ]
    plan = plan_for(*argv[1:])
    runs = store.RunStore(str(tmp_path))
    runs.begin(plan.jobs(), resume=False)
    runs.save(stamp({**fake_record(plan.jobs()[0]), "marker": "kept"}, plan.jobs()[0]))
    assert cli.main([*argv, "--out", str(tmp_path), "--resume"]) == 0, capsys.readouterr().err
    assert "resuming: 1 of 2 runs kept, 1 to run" in capsys.readouterr().err
    results = json.loads((tmp_path / "results.json").read_text())
    assert results["executor"] == "local" and results["resumed_runs"] == 1
    assert [r.get("marker") for r in results["runs"]] == ["kept", None] and results["runs"][1]["ok"]
    assert json.loads((tmp_path / "runs" / "run-1.json").read_text())["ok"]


RESUMED = ["ablate", "--device", "cpu", "--workload", "resumed_workload:tiny", "--smoke", "--arm", "eager"]
RESUMED += ["--arm", "e2:eager=true"]


def _kept_run(tmp_path, monkeypatch, **fingerprint_fields):
    """An ablation in ``tmp_path/out`` whose first run is kept (its fingerprint as a worker of this machine
    would report it, plus ``fingerprint_fields``); the workload is ``tmp_path/resumed_workload.py``."""
    (tmp_path / "resumed_workload.py").write_text("from ablation_workload import tiny\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join([str(tmp_path), str(TESTS)]))
    jobs = plan_for(*RESUMED[1:]).jobs()
    out = tmp_path / "out"
    runs = store.RunStore(str(out))
    runs.begin(jobs, resume=False)
    record = stamp(fake_record(jobs[0]), jobs[0])
    record["fingerprint"].update({"torch_env": {}, **fingerprint_fields})
    runs.save(record)
    return out


def _fake_execute(monkeypatch, **fingerprint_fields):
    def execute(plan, progress=True, jobs=None, on_record=None, workers=None, before_measuring=None):
        records = []
        for spec in jobs:
            records.append(stamp(fake_record(spec), spec))
            records[-1]["fingerprint"].update({"torch_env": {}, **fingerprint_fields})
            records[-1]["compile_threads"] = workers.compile_threads if workers is not None else None  # as runner.execute
            on_record(records[-1])
        return records

    monkeypatch.setattr(command, "execute", execute)


def test_resume_refuses_kept_runs_of_a_changed_workload_before_anything_runs(tmp_path, monkeypatch, capsys, no_arm_runs):
    out = _kept_run(tmp_path, monkeypatch)
    (tmp_path / "resumed_workload.py").write_text("from ablation_workload import tiny  # another model now\n")
    assert cli.main([*RESUMED, "--out", str(out), "--resume"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "--resume: the runs do not share one fingerprint: workload.source differs: 'sha256:" in err
    assert f"in the kept runs in {out / 'runs'} (run " in err and "in this run (run " in err and "e2 repeat 0, job 1" in err
    assert "--allow-mixed" in err and "--overwrite" in err
    assert not (out / "results.json").exists()


def test_resume_refuses_runs_under_other_torch_variables_and_allow_mixed_reports_them(tmp_path, monkeypatch, capsys):
    out = _kept_run(tmp_path, monkeypatch)
    _fake_execute(monkeypatch, torch_env={"TORCHINDUCTOR_MAX_AUTOTUNE": "1"})
    assert cli.main([*RESUMED, "--out", str(out), "--resume"]) == 2
    err = capsys.readouterr().err.splitlines()[-1]
    assert "torch_env.TORCHINDUCTOR_MAX_AUTOTUNE differs: absent in the kept runs in " in err and "'1' in this run" in err
    assert f"This run's records are kept in {out / 'runs'} as well." in err
    assert cli.main([*RESUMED, "--out", str(out), "--resume", "--allow-mixed"]) == 0
    results = json.loads((out / "results.json").read_text())
    assert "torch_env.TORCHINDUCTOR_MAX_AUTOTUNE" in {m.get("field") for m in results["mixed"]}
    assert "**MIXED DATA**" in (out / "results.md").read_text()


def test_resume_refuses_runs_of_another_compile_thread_count_before_anything_runs(tmp_path, monkeypatch, capsys):
    out = _kept_run(tmp_path, monkeypatch)
    record = json.loads((out / "runs" / "run-0.json").read_text())
    (out / "runs" / "run-0.json").write_text(json.dumps({**record, "compile_threads": 3}))
    monkeypatch.delenv("TORCHINDUCTOR_COMPILE_THREADS", raising=False)
    _fake_execute(monkeypatch)
    assert cli.main([*RESUMED, "--out", str(out), "--resume", "--compile-threads", "2"]) == 2
    err = capsys.readouterr().err.splitlines()[-1]
    assert "compile_threads differs: 3 in the kept runs in " in err and "2 in this run" in err, err
    assert not (out / "results.json").exists()
    assert cli.main([*RESUMED, "--out", str(out), "--resume", "--compile-threads", "3"]) == 0, capsys.readouterr().err


def test_resume_of_runs_alike_is_not_mixed(tmp_path, monkeypatch, capsys):
    out = _kept_run(tmp_path, monkeypatch)
    _fake_execute(monkeypatch)
    assert cli.main([*RESUMED, "--out", str(out), "--resume"]) == 0, capsys.readouterr().err
    assert "mixed" not in json.loads((out / "results.json").read_text())


# -- a real Slurm cluster --------------------------------------------------------------------------


def _cancel(cluster, known: set[str], cancelled: dict[str, str], stop: threading.Event) -> None:
    """In the first job array that appears after ``known``: scancel element 0 once it runs and element 5
    (the last) as soon as it is queued (2 CPUs: still pending); ``cancelled`` gets element -> job id."""
    while not stop.is_set() and len(cancelled) < 2:
        for job, state in cluster.jobs().items():
            element = job.rpartition("_")[2]
            if job in known or element in cancelled:
                continue
            if element == "5" or (element == "0" and state == "RUNNING"):
                cluster.command("scancel", job)
                cancelled[element] = job
        time.sleep(0.1)


def test_slurm_ablation_cancel_jobs_and_resume(slurm_cluster, tmp_path, capsys):
    """2 arms x 3 processes through --executor slurm; scancel kills the first array element while it
    runs and the last while it is pending; the report names both failed with their log paths and the
    others are kept; --resume submits those two only and completes the results; the records and
    summary rows have the local executor's fields."""
    out, local = tmp_path / "slurm", tmp_path / "local"
    argv = [*TINY, "--executor", "slurm", "--slurm-partition", slurm_cluster.partition, "--out", str(out)]
    # The same ablation on the local executor, for its fields, in a process of its own meanwhile.
    here = subprocess.Popen(
        [sys.executable, "-m", "inductor_knobs", *TINY, "--out", str(local)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        _cancel_and_resume(slurm_cluster, out, argv, capsys)
        _, err = here.communicate(timeout=600)
    finally:
        if here.poll() is None:
            here.kill()
            here.communicate()
    assert here.returncode == 0, err
    resumed = json.loads((out / "results.json").read_text())
    local_results = json.loads((local / "results.json").read_text())
    assert {tuple(sorted(r)) for r in resumed["runs"]} == {tuple(sorted(r)) for r in local_results["runs"]}
    assert [sorted(r) for r in resumed["summary"]] == [sorted(r) for r in local_results["summary"]]
    assert set(resumed) - set(local_results) == {"slurm", "resumed_runs"} and set(local_results) <= set(resumed)
    assert local_results["executor"] == "local" and len(local_results["runs"]) == 6


def _cancel_and_resume(slurm_cluster, out: Path, argv: list[str], capsys) -> None:
    cancelled: dict[str, str] = {}
    stop = threading.Event()
    canceller = threading.Thread(target=_cancel, args=(slurm_cluster, set(slurm_cluster.jobs()), cancelled, stop), daemon=True)
    canceller.start()
    try:
        status = cli.main(argv)
    finally:
        stop.set()
        canceller.join(10)
    captured = capsys.readouterr()
    assert status == 0, captured.err  # two runs failed, the others finished
    assert sorted(cancelled) == ["0", "5"], cancelled
    results = json.loads((out / "results.json").read_text())
    assert results["executor"] == "slurm" and len(results["slurm"]["job_ids"]) == 6
    assert [r["ok"] for r in results["runs"]] == [False, True, True, True, True, False]
    for index, element, arm, repeat in ((0, "0", "eager", 0), (5, "5", "e2", 2)):
        failed, job = results["runs"][index], cancelled[element]
        assert (failed["arm"], failed["repeat"]) == (arm, repeat) and f"Slurm job {job}" in failed["error"]
        assert failed["log"] == str(out.resolve() / "slurm" / f"{job}_0_log.err")
        assert f"{arm} repeat {repeat} failed: " in captured.out and failed["log"] in captured.out
    assert len(list((out / "runs").glob("run-*.json"))) == 6

    # The rerun: the two cancelled runs submitted again, the four finished ones kept as they were.
    queued = set(slurm_cluster.jobs())
    assert cli.main([*argv, "--resume"]) == 0
    captured = capsys.readouterr()
    assert "resuming: 4 of 6 runs kept, 2 to run" in captured.err
    assert len(set(slurm_cluster.jobs()) - queued) == 2  # what Slurm was given
    resumed = json.loads((out / "results.json").read_text())
    assert list(resumed["slurm"]["job_ids"]) == ["0", "5"] and resumed["resumed_runs"] == 4
    assert all(r["ok"] for r in resumed["runs"]) and [r["index"] for r in resumed["runs"]] == list(range(6))
    assert resumed["runs"][1:5] == results["runs"][1:5]
    assert [(r["arm"], r["processes"]) for r in resumed["summary"]] == [("eager", 3), ("e2", 3)]
    assert "FAILED" not in captured.out and "failed:" not in captured.out
    assert re.search(r"whole run \d+ s", (out / "results.md").read_text())


def test_resume_finds_compile_threads_that_differ_among_the_kept_runs_themselves():
    from inductor_knobs.ablation.errors import MergeRefused
    from inductor_knobs.ablation.merge import check_resume

    def record(index: int, threads: int) -> dict:
        return {"arm": "a", "repeat": index, "index": index, "fingerprint": {}, "compile_threads": threads}

    kept = [record(0, 3), record(1, 2)]  # an earlier --resume --allow-mixed pooled 3 and 2
    with pytest.raises(MergeRefused, match=r"compile_threads differs: 3 in the kept runs in runs .*, 2 in the kept runs"):
        check_resume(kept, [record(2, 3)], "runs", allow_mixed=False, ran=True)
    mixed = check_resume(kept, [record(2, 3)], "runs", allow_mixed=True, ran=True)
    assert [m["field"] for m in mixed] == ["compile_threads"]
