"""Probe: one ``torch.cuda.graph`` of the whole compiled model per bucket, against the compiled model itself.

    python bench/probe_graph_capture.py MODEL REQUESTS OUT_DIR   # MODEL llama|bert

What ``ik.serving.capture_cuda_graphs`` does, written out with torch's own API: compile
``bench/serving_real.py``'s model with ``mode="max-autotune-no-cudagraphs", dynamic=True``, warm
its 16 buckets, warm them again on a side stream, capture one graph per bucket (largest first, one
pool), check the replayed output against the compiled model's at the smallest and largest bucket,
then serve REQUESTS seeded random padded lengths by replay and the same lengths by the compiled
model, in one process.  Per arm p50/p99/max and the host part's median; writes
``OUT_DIR/graph-MODEL.json`` with every row.
"""

from __future__ import annotations

import gc
import json
import random
import statistics
import sys
import time

import serving_real as sr  # bench/ is on sys.path when run as a script
import torch

BUCKETS = tuple(range(128, 2049, 128))


def first_tensor(output):
    """The logits (Llama) or last hidden state (BERT) of a model output."""
    return output.logits if getattr(output, "logits", None) is not None else output.last_hidden_state


def main() -> None:
    model, requests, out_dir = sys.argv[1], int(sys.argv[2]), sys.argv[3]
    compiled = torch.compile(sr.build(model), mode="max-autotune-no-cudagraphs", dynamic=True)
    result: dict = {"model": model}
    rows = []
    with torch.no_grad():
        static = {b: sr.make_inputs(model, b, BUCKETS, b) for b in BUCKETS}
        for _ in range(3):
            for b in BUCKETS:
                compiled(**static[b])
        reference = {b: first_tensor(compiled(**static[b])).clone() for b in (BUCKETS[0], BUCKETS[-1])}
        side = torch.cuda.Stream()
        side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(side):
            for b in BUCKETS:
                compiled(**static[b])
        torch.cuda.current_stream().wait_stream(side)
        pool, graphs = torch.cuda.graph_pool_handle(), {}
        for b in reversed(BUCKETS):
            graph = torch.cuda.CUDAGraph()
            with torch.cuda.graph(graph, pool=pool):
                graphs[b] = (graph, compiled(**static[b]))
        for b in reference:
            graphs[b][0].replay()
            torch.cuda.synchronize()
            result[f"max_abs_diff_{b}"] = float((first_tensor(graphs[b][1]).float() - reference[b].float()).abs().max())
        gc.collect()
        gc.freeze()
        lengths = random.Random(21).choices(range(128, 2049), k=requests)
        for arm in ("graph", "compiled"):
            for i, n in enumerate(lengths):
                inputs = sr.make_inputs(model, n, BUCKETS, 1000 + i)
                start = time.perf_counter()
                if arm == "graph":
                    bucket = inputs["input_ids"].shape[1]
                    for name, value in inputs.items():
                        static[bucket][name].copy_(value)
                    graphs[bucket][0].replay()
                else:
                    compiled(**inputs)
                returned = time.perf_counter()
                torch.cuda.synchronize()
                rows.append((arm, n, time.perf_counter() - start, returned - start))
    for arm in ("graph", "compiled"):
        walls = [row[2] for row in rows if row[0] == arm]
        p50 = statistics.median(walls)
        result[arm] = {
            "p50_ms": 1e3 * p50,
            "p99_ms": 1e3 * statistics.quantiles(walls, n=100)[98],
            "max_ms": 1e3 * max(walls),
            "host_median_ms": 1e3 * statistics.median(row[3] for row in rows if row[0] == arm),
        }
    print(json.dumps(result))
    with open(f"{out_dir}/graph-{model}.json", "w") as out:
        json.dump({**result, "rows": rows}, out)


if __name__ == "__main__":
    main()
