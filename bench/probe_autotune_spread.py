"""How much do GEMM autotune timings spread between fresh processes, outside any ablation?  (issue 31)

The main job's A/A control found processes whose autotuning timed every Triton GEMM candidate 1.3-3x slower
than other processes of the same settings did (H100, torch 2.11), even with one process alone on the host,
and which then picked slower kernels.  This probe asks whether plain torch does that too: it starts
``--processes`` fresh interpreters one after another (no fork server, no lock, no other worker), each with
empty Inductor and Triton caches, and in each compiles one ``nn.Linear`` of BERT-base's shape (bf16,
128x768 by 768x768) with ``mode="max-autotune-no-cudagraphs"``, records the candidates' timings
(``ik.record_autotune``), then times the compiled call two ways: CUDA events around 200 back-to-back calls
(GPU time per call, launch-bound if the host is slow) and the host's own time per call.

    python bench/probe_autotune_spread.py --processes 8             # as torch times candidates
    python bench/probe_autotune_spread.py --processes 16 --queued   # alternating with the ablation's queued timing

Prints one line per process: the winner and its timing, the median timing of the Triton candidates, the
fastest ATen candidate, and the compiled call's GPU and host microseconds per call.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time


def child() -> None:
    import torch

    import inductor_knobs as ik
    from inductor_knobs.ablation.autotune_lock import benchmarks_in_turn
    from inductor_knobs.ablation.queued_timing import QUEUE_US

    torch.manual_seed(0)
    lin = torch.nn.Linear(768, 768, device="cuda", dtype=torch.bfloat16)
    x = torch.randn(128, 768, device="cuda", dtype=torch.bfloat16)
    f = torch.compile(lin, mode="max-autotune-no-cudagraphs")
    queue_us = QUEUE_US if os.environ.get("IK_PROBE_QUEUED") == "1" else 0.0
    started = time.perf_counter()
    with torch.no_grad(), benchmarks_in_turn(None, queue_us=queue_us), ik.record_autotune() as rec:
        f(x)
    compile_s = time.perf_counter() - started
    rows = [c for r in rec.benchmarked for c in r.choices if c.time_ms]
    triton = [c.time_ms * 1000 for c in rows if c.kind == "triton"]
    aten = [c.time_ms * 1000 for c in rows if c.kind == "aten"]
    winner = min(rows, key=lambda c: c.time_ms) if rows else None
    with torch.no_grad():
        for _ in range(50):
            f(x)
        torch.cuda.synchronize()
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        host = time.perf_counter()
        start.record()
        for _ in range(200):
            f(x)
        end.record()
        host_us = (time.perf_counter() - host) / 200 * 1e6
        torch.cuda.synchronize()
    print(
        json.dumps(
            {
                "winner": winner.name if winner else None,
                "winner_us": winner.time_ms * 1000 if winner else None,
                "triton_median_us": statistics.median(triton) if triton else None,
                "triton_min_us": min(triton) if triton else None,
                "aten_min_us": min(aten) if aten else None,
                "candidates": len(rows),
                "gpu_us_per_call": start.elapsed_time(end) / 200 * 1000,
                "host_us_per_call": host_us,
                "compile_s": compile_s,
            }
        )
    )


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--processes", type=int, default=8)
    parser.add_argument("--child", action="store_true")
    parser.add_argument("--queued", action="store_true", help="alternate torch's timing and the ablation's queued timing")
    args = parser.parse_args()
    if args.child:
        child()
        return
    for i in range(args.processes):
        # With --queued, alternate: even processes as torch times, odd ones with each timing's launch queued first
        # (inductor_knobs/ablation/queued_timing.py, as every ablation worker on a GPU times its candidates).
        queued = args.queued and i % 2 == 1
        with tempfile.TemporaryDirectory(prefix="ik-spread-") as tmp:
            env = {**os.environ, "TORCHINDUCTOR_CACHE_DIR": f"{tmp}/inductor", "TRITON_CACHE_DIR": f"{tmp}/triton"}
            env["IK_PROBE_QUEUED"] = "1" if queued else "0"
            out = subprocess.run([sys.executable, __file__, "--child"], env=env, capture_output=True, text=True, timeout=300)
            line = out.stdout.strip().splitlines()[-1] if out.stdout.strip() else out.stderr[-500:]
            print(f"process {i} ({'queued' if queued else 'torch'} timing): {line}", flush=True)


if __name__ == "__main__":
    main()
