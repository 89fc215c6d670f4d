"""Repeats blocked by GPU (ablation/plan.py gpu_for_repeat, ablation/runner.py): with several GPUs, repeat r of
every arm runs on GPU r mod N, the host compiles on whichever GPU the runs are, and the report says how the
repeats were placed.  Several GPUs are faked on CPU: the runner's job function is replaced by one that goes
through the real measurement barrier without starting a process."""

from __future__ import annotations

import threading
from collections import Counter
from types import SimpleNamespace

import pytest
import torch

from inductor_knobs.ablation import quiet, runner, spec
from inductor_knobs.ablation.plan import Plan, gpu_for_repeat, placement_note
from inductor_knobs.ablation.workers import Workers


class _FakeJobs:
    """``call_job`` without a process: the job says ready at the barrier, waits for its turn, "measures" and
    says measured; it counts what compiles and measures at once."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.measuring = 0
        self.most_measuring = 0

    def __call__(self, job, arm, gpu, timeout, shard, workers, origin, parallel, threads, barrier):
        sock, _ = quiet.wait_turn(barrier)
        with self.lock:
            self.measuring += 1
            self.most_measuring = max(self.most_measuring, self.measuring)
        with self.lock:
            self.measuring -= 1
        quiet.done_measuring(sock)
        return {"ok": True, "arm": arm.name, "repeat": job["repeat"], "index": job["index"], "gpu": gpu, "shard": shard}


def _fake_gpus(monkeypatch) -> _FakeJobs:
    fake = _FakeJobs()
    monkeypatch.setattr(runner, "call_job", fake)
    monkeypatch.setattr(torch.cuda, "get_device_properties", lambda g: SimpleNamespace(total_memory=80 * 2**30))
    return fake


@pytest.mark.parametrize(("gpus", "repeats"), [([0, 1], 3), ([0, 1], 4), ([0, 1, 2, 3], 3), ([2, 3], 5)])
def test_every_arms_repeat_r_runs_on_gpu_r_mod_n(monkeypatch, gpus, repeats):
    fake = _fake_gpus(monkeypatch)
    arms = [spec.parse_arm(a) for a in ("eager", "default", "c:max_autotune=1")]
    plan = Plan(workload="gemm_mlp", arms=arms, repeats=repeats, device="cuda", gpus=gpus, parallel=2)
    runs = runner.execute(plan, progress=False, workers=Workers())
    assert sorted(r["index"] for r in runs) == list(range(len(arms) * repeats))
    for r in runs:
        assert r["gpu"] == gpus[r["repeat"] % len(gpus)]
    per_arm = {a.name: Counter(r["gpu"] for r in runs if r["arm"] == a.name) for a in arms}
    assert all(count == per_arm["eager"] for count in per_arm.values())  # every arm has the same GPUs
    assert fake.most_measuring == 1  # one measurement at a time on the host, as on one GPU
    note = placement_note({"gpus": gpus, "runs": runs})
    assert note.startswith("Repeats were blocked by GPU: repeat r of every arm ran on ")


def test_a_resumed_ablation_keeps_the_placement(monkeypatch):
    """A resumed ablation runs only the missing jobs: each still on its repeat's GPU."""
    _fake_gpus(monkeypatch)
    plan = Plan(
        workload="gemm_mlp", arms=[spec.parse_arm("eager"), spec.parse_arm("default")], repeats=3, device="cuda", gpus=[0, 1]
    )
    missing = [j for j in plan.jobs() if j["repeat"] == 1]
    runs = runner.execute(plan, progress=False, jobs=missing, workers=Workers())
    assert [(r["repeat"], r["gpu"]) for r in runs] == [(1, 1), (1, 1)]


def test_one_gpu_and_the_cpu_run_everything_on_their_one_lane(monkeypatch):
    _fake_gpus(monkeypatch)
    arms = [spec.parse_arm("eager"), spec.parse_arm("default")]
    for device, gpus, lane in (("cuda", [1], 1), ("cpu", [], None)):
        plan = Plan(workload="gemm_mlp", arms=arms, repeats=3, device=device, gpus=gpus, parallel=2)
        runs = runner.execute(plan, progress=False, workers=Workers())
        assert len(runs) == 6 and {r["gpu"] for r in runs} == {lane}
        assert placement_note({"gpus": gpus, "runs": runs}) == ""
    assert [gpu_for_repeat(r, [None]) for r in range(3)] == [None, None, None]


def test_the_host_compiles_parallel_per_gpu_whichever_gpu_the_runs_are_on():
    """3 repeats on 2 GPUs put twice the runs on GPU 0: with 2 compiling at once per GPU, GPU 0 may have all 4
    slots of the host while GPU 1 has nothing to compile; no more than 4 compile at once."""
    barrier = quiet.Quiet([0, 1], parallel=2, cap=6, jobs={0: 6, 1: 0})
    admitted: list = []
    try:
        assert barrier.admit(1) is None  # nothing to run on GPU 1
        taking = threading.Thread(target=lambda: admitted.extend(barrier.admit(0) for _ in range(4)), daemon=True)
        taking.start()
        taking.join(60)  # a hang guard: the fourth admission does not wait
        assert len(admitted) == 4 and all(admitted)
        fifth = threading.Thread(target=lambda: admitted.append(barrier.admit(0)), daemon=True)
        fifth.start()
        fifth.join(0.3)
        assert fifth.is_alive()  # the host's 4 compile slots are taken
        barrier.finished(admitted[0])  # one ends: its slot goes to GPU 0's next run
        fifth.join(60)
        assert len(admitted) == 5 and admitted[-1]
    finally:
        barrier.close()


def test_the_live_cap_counts_the_busiest_lane(monkeypatch):
    """The cap is per lane, from the most runs any lane holds: 12 of the main job's 18 runs on GPU 0 of 2 fit in
    one batch at 9 compiling at once."""
    monkeypatch.setattr(quiet, "_available_gib", lambda: 240.0)
    assert quiet.live_cap(9, 12, lanes=2, gpu_gib=79.1) == 12
    assert quiet.live_cap(9, 18, lanes=1, gpu_gib=79.1) == 18


def _runs(pairs):
    return [{"arm": "a", "repeat": r, "gpu": g} for r, g in pairs]


def test_the_report_says_how_the_repeats_were_placed():
    blocked = _runs([(0, 0), (1, 1), (2, 0)] * 2)
    assert placement_note({"gpus": [0, 1], "runs": blocked}) == (
        "Repeats were blocked by GPU: repeat r of every arm ran on GPU r mod 2 (GPU 0: repeats 0,2; GPU 1: repeat 1)"
    )
    idle = placement_note({"gpus": [0, 1, 2, 3], "runs": _runs([(0, 0), (1, 1), (2, 2)])})
    assert idle.endswith("(GPU 0: repeat 0; GPU 1: repeat 1; GPU 2: repeat 2; GPU 3: no runs)")
    picked = placement_note({"gpus": [2, 3], "runs": _runs([(0, 2), (1, 3)])})
    assert "ran on the (r mod 2)-th of GPUs 2,3 (GPU 2: repeat 0; GPU 3: repeat 1)" in picked
    free = placement_note({"gpus": [0, 1], "runs": _runs([(0, 0), (0, 1), (1, 0)])})
    assert free.startswith("Repeats were not blocked by GPU") and "(GPU 0: repeats 0,1; GPU 1: repeat 0)" in free
    assert placement_note({"gpus": [0], "runs": _runs([(0, 0), (1, 0)])}) == ""
    assert placement_note({"gpus": [], "runs": _runs([(0, None)])}) == ""
    assert "not blocked" in placement_note({"executor": "slurm", "gpus": [], "runs": _runs([(0, 0)])})
