"""What the compile interception and its attestation cost at the first compile.

    python bench/attestation.py [--pairs 8] [--device cpu|cuda] [--out bench/results/attestation-cpu]

Two variants compile the same model with the same effective Inductor config, each in a fresh
process (cold Inductor and Triton caches in a private directory), interleaved A B A B …:

- ``knobs``: ``with ik.record_compiles(), ik.knobs(coordinate_descent_tuning=False):
  torch.compile(model, mode="max-autotune-no-cudagraphs")`` — the interception rewrites the
  mode's ``coordinate_descent_tuning=True`` and attests every graph;
- ``torch``: ``torch.compile(model, options={"max_autotune": True, "coordinate_descent_tuning":
  False})`` with inductor_knobs never imported.

Reported: the first call's seconds per process, each variant's median, and the ratio of medians
with the per-pair ratios' median and range (the unit of replication is one process; pairs are
adjacent in time, so slow drift of the machine hits both variants of a pair alike).  The child
also checks that both variants compiled with ``coordinate_descent_tuning=False``.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

CHILD = r"""
import json, os, sys, time
import torch
variant, device = sys.argv[1], sys.argv[2]
model = torch.nn.Sequential(*[torch.nn.Linear(256, 256) for _ in range(4)]).to(device)
x = torch.randn(64, 256, device=device)
seen = []
from torch._inductor.graph import GraphLowering
import torch._inductor.config as cfg
real = GraphLowering.__init__
def spy(self, *a, **k):
    seen.append(cfg.coordinate_descent_tuning)
    return real(self, *a, **k)
GraphLowering.__init__ = spy
def sync():
    if device == "cuda":
        torch.cuda.synchronize()
with torch.no_grad():
    if variant == "knobs":
        import inductor_knobs as ik
        fn = torch.compile(model, mode="max-autotune-no-cudagraphs")
        with ik.record_compiles() as rec, ik.knobs(coordinate_descent_tuning=False):
            sync(); start = time.perf_counter(); fn(x); sync(); seconds = time.perf_counter() - start
        assert all(a.ok for a in rec.attestations), rec.attestations
    else:
        assert "inductor_knobs" not in sys.modules
        fn = torch.compile(model, options={"max_autotune": True, "coordinate_descent_tuning": False})
        sync(); start = time.perf_counter(); fn(x); sync(); seconds = time.perf_counter() - start
assert seen and not any(seen), seen
print(json.dumps({"variant": variant, "seconds": seconds}))
"""


def run_one(variant: str, device: str) -> float:
    with tempfile.TemporaryDirectory(prefix="ik-bench-") as cache:
        env = {k: v for k, v in os.environ.items() if not k.startswith("INDUCTOR_KNOBS_")}
        env.update(TORCHINDUCTOR_CACHE_DIR=os.path.join(cache, "inductor"), TRITON_CACHE_DIR=os.path.join(cache, "triton"))
        done = subprocess.run(
            [sys.executable, "-c", CHILD, variant, device], capture_output=True, text=True, env=env, timeout=900, check=False
        )
        if done.returncode:
            raise SystemExit(f"{variant} child failed:\n{done.stderr[-3000:]}")
        return float(json.loads(done.stdout.strip().splitlines()[-1])["seconds"])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--pairs", type=int, default=8)
    parser.add_argument("--device", default="cuda" if _has_cuda() else "cpu")
    parser.add_argument("--out", default=None)
    args = parser.parse_args()
    out = Path(args.out or f"bench/results/attestation-{args.device}")
    pairs = []
    for i in range(args.pairs):
        order = ("knobs", "torch") if i % 2 == 0 else ("torch", "knobs")
        got = {v: run_one(v, args.device) for v in order}
        pairs.append(got)
        print(f"pair {i}: knobs {got['knobs']:.3f} s, torch {got['torch']:.3f} s", file=sys.stderr)
    knobs = [p["knobs"] for p in pairs]
    plain = [p["torch"] for p in pairs]
    ratios = [p["knobs"] / p["torch"] for p in pairs]
    import torch

    result = {
        "device": args.device,
        "torch": torch.__version__,
        "pairs": pairs,
        "median_knobs_s": statistics.median(knobs),
        "median_torch_s": statistics.median(plain),
        "ratio_of_medians": statistics.median(knobs) / statistics.median(plain),
        "median_pair_ratio": statistics.median(ratios),
        "pair_ratio_range": [min(ratios), max(ratios)],
    }
    out.mkdir(parents=True, exist_ok=True)
    (out / "attestation.json").write_text(json.dumps(result, indent=2))
    table = (
        f"first compile, {args.pairs} process pairs interleaved, {args.device}, torch {torch.__version__}\n\n"
        "| variant | median s |\n|---|---|\n"
        f"| ik.knobs + interception + attestation | {result['median_knobs_s']:.3f} |\n"
        f"| plain torch.compile (same config) | {result['median_torch_s']:.3f} |\n\n"
        f"ratio of medians {result['ratio_of_medians']:.3f}; per-pair ratio median {result['median_pair_ratio']:.3f}, "
        f"range {min(ratios):.3f}–{max(ratios):.3f}\n"
    )
    (out / "attestation.md").write_text(table)
    print(table)


def _has_cuda() -> bool:
    try:
        import torch

        return bool(torch.cuda.is_available())
    except ImportError:
        return False


if __name__ == "__main__":
    main()
