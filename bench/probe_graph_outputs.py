"""What outputs="copy" costs per replay against outputs="static", side by side (one CUDA GPU, transformers).

    python bench/probe_graph_outputs.py --out results/graph-outputs

The serving Llama of ``bench/serving_real.py``, compiled with ``max-autotune-no-cudagraphs``; one CUDA
graph per bucket (512 and 2048 tokens) captured twice, once per ``outputs`` mode.  1,000 cycles, each
one call of each mode in a random order, timed from the call to ``torch.cuda.synchronize()``; the
median per-call time of each and the median of the per-cycle differences (the cycle is the unit of
replication).  Writes ``graph_outputs.json``.
"""

from __future__ import annotations

import argparse
import json
import random
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
import serving_real  # the models and inputs of the serving benchmark


def main() -> int:
    import torch

    import inductor_knobs as ik

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", default="results/graph-outputs")
    parser.add_argument("--cycles", type=int, default=1000)
    args = parser.parse_args()
    net = serving_real.build("llama")
    buckets = (512, 2048)
    results = {"environment": serving_real.environment(), "buckets": {}}
    with torch.no_grad():
        compiled = ik.compile(net, mode="max-autotune-no-cudagraphs", dynamic=True)
        padded = lambda n: serving_real.make_inputs("llama", n, buckets, n)  # noqa: E731
        graphs = {
            mode: ik.serving.capture_cuda_graphs(compiled, shapes=list(buckets), factory=padded, outputs=mode)
            for mode in ("copy", "static")
        }
        for bucket in buckets:
            inputs = padded(bucket)
            times: dict[str, list[float]] = {"copy": [], "static": []}
            order = random.Random(bucket)
            for _ in range(args.cycles):
                modes = ["copy", "static"]
                order.shuffle(modes)
                for mode in modes:
                    torch.cuda.synchronize()
                    started = time.perf_counter()
                    graphs[mode](**inputs)
                    torch.cuda.synchronize()
                    times[mode].append(time.perf_counter() - started)
            diffs = [c - s for c, s in zip(times["copy"], times["static"])]
            out = graphs["copy"](**inputs)
            logits = out.logits if hasattr(out, "logits") else out[0]
            results["buckets"][bucket] = {
                "copy_ms": 1000 * statistics.median(times["copy"]),
                "static_ms": 1000 * statistics.median(times["static"]),
                "copy_minus_static_ms": 1000 * statistics.median(diffs),
                "output_bytes": logits.numel() * logits.element_size(),
            }
            print(json.dumps({bucket: results["buckets"][bucket]}), flush=True)
    path = Path(args.out)
    path.mkdir(parents=True, exist_ok=True)
    (path / "graph_outputs.json").write_text(json.dumps(results, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
