"""Run an ablation: every arm in fresh processes, repeats interleaved (ABCABC…), spread over GPUs.

Each job (arm × repeat) is one ``inductor_knobs.ablation.worker`` process with the arm's
``INDUCTOR_KNOBS_*`` variables, its own empty Inductor and Triton cache directories and, on GPUs,
``CUDA_VISIBLE_DEVICES`` set to one GPU.  With several GPUs, one thread per GPU takes the next
job in the interleaved order, so every GPU runs one process at a time.  A job that crashes or
runs past ``timeout`` seconds becomes an error record; the others still run.
"""

from __future__ import annotations

import json
import os
import queue
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass, field
from typing import Any

from ..knobs import EMULATE_SMS_VAR, ENV_PREFIX
from .spec import Arm


@dataclass
class Plan:
    """What to run.

    Attributes:
        workload: a built-in name or ``pkg.module:factory``.
        arms: the arms, baseline first unless ``baseline`` names another.
        repeats: processes per arm.
        device: ``cuda`` or ``cpu``.
        gpus: GPU indices to spread jobs over (CUDA only).
        quick: smaller inputs and fewer samples (for CI).
        iters: latency samples per process; warmup: iterations before sampling.
        timeout: seconds per job.
        shard: ``(i, n)``: run only jobs ``j`` with ``j % n == i``.
        emulate: ``INDUCTOR_KNOBS_EMULATE_SMS`` for every job (an SM count or preset), or None.
    """

    workload: str
    arms: list[Arm]
    repeats: int = 3
    device: str = "cpu"
    gpus: list[int] = field(default_factory=list)
    quick: bool = False
    iters: int = 20
    warmup: int = 3
    timeout: float = 900.0
    shard: tuple[int, int] = (0, 1)
    baseline: str | None = None
    emulate: str | None = None

    def jobs(self) -> list[dict[str, Any]]:
        """Interleaved jobs (repeat 0 of every arm, then repeat 1, …), this shard's only."""
        jobs: list[dict[str, Any]] = [
            {
                "index": r * len(self.arms) + a,
                "repeat": r,
                "arm": arm.to_dict(),
                "workload": self.workload,
                "device": self.device,
                "quick": self.quick,
                "iters": self.iters,
                "warmup": self.warmup,
                "seed": 0,
                "emulate": self.emulate,
            }
            for r in range(self.repeats)
            for a, arm in enumerate(self.arms)
        ]
        index, count = self.shard
        return [j for j in jobs if int(j["index"]) % count == index]


def run_job(job: dict[str, Any], arm: Arm, gpu: int | None, timeout: float) -> dict[str, Any]:
    """Run one job in a fresh process; always returns a record (errors included)."""
    with tempfile.TemporaryDirectory(prefix="ik-ablate-") as cache:
        env = {k: v for k, v in os.environ.items() if not k.startswith("INDUCTOR_KNOBS_")}
        env.update({ENV_PREFIX + "ON_MISMATCH": "warn", **arm.env()})
        env.update(
            {"TORCHINDUCTOR_CACHE_DIR": os.path.join(cache, "inductor"), "TRITON_CACHE_DIR": os.path.join(cache, "triton")}
        )
        if gpu is not None:
            env["CUDA_VISIBLE_DEVICES"] = str(gpu)
        if job.get("emulate"):
            env[EMULATE_SMS_VAR] = str(job["emulate"])
        start = time.perf_counter()
        try:
            out = subprocess.run(
                [sys.executable, "-m", "inductor_knobs.ablation.worker", json.dumps(job)],
                env=env,
                capture_output=True,
                text=True,
                timeout=timeout,
            )
            lines = out.stdout.strip().splitlines()
            result = json.loads(lines[-1]) if lines and lines[-1].startswith("{") else None
            if result is None:
                result = {
                    "ok": False,
                    "error": f"worker exited {out.returncode} without a result",
                    "traceback": out.stderr[-3000:],
                }
        except subprocess.TimeoutExpired:
            result = {"ok": False, "error": f"timed out after {timeout:.0f} s", "traceback": ""}
    return {
        **result,
        "arm": arm.name,
        "repeat": job["repeat"],
        "index": job["index"],
        "gpu": gpu,
        "wall_seconds": time.perf_counter() - start,
    }


def execute(plan: Plan, progress: bool = True) -> list[dict[str, Any]]:
    """Run every job of ``plan``; one thread per GPU (or one on CPU) takes jobs in order."""
    from tqdm import tqdm

    arms = {a.name: a for a in plan.arms}
    pending: queue.Queue[dict[str, Any]] = queue.Queue()
    for job in plan.jobs():
        pending.put(job)
    results: list[dict[str, Any]] = []
    lock = threading.Lock()
    bar = tqdm(total=pending.qsize(), desc=f"ablate {plan.workload}", unit="run", disable=not progress, file=sys.stderr)

    def worker(gpu: int | None) -> None:
        while True:
            try:
                job = pending.get_nowait()
            except queue.Empty:
                return
            record = run_job(job, arms[job["arm"]["name"]], gpu, plan.timeout)
            with lock:
                results.append(record)
                bar.set_postfix_str(f"{record['arm']} #{record['repeat']} {'ok' if record['ok'] else 'FAILED'}")
                bar.update()

    slots: list[int | None] = list(plan.gpus) if plan.device == "cuda" and plan.gpus else [None]
    threads = [threading.Thread(target=worker, args=(g,), daemon=True) for g in slots]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    bar.close()
    return sorted(results, key=lambda r: r["index"])
