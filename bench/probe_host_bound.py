"""Probe: is a padded, compiled model host-bound, and are its slow calls host or GPU time?

    python bench/probe_host_bound.py MODEL MODE REQUESTS OUT_DIR   # MODEL llama|bert

Compiles ``bench/serving_real.py``'s model with ``torch.compile(mode=MODE, dynamic=True)`` (for
example ``max-autotune`` for CUDA graph trees, ``max-autotune-no-cudagraphs`` without), warms its 16
buckets of 128 tokens four times, ``gc.freeze()``, then serves REQUESTS seeded random lengths padded
to their bucket.  Per request: wall time (CUDA synchronised), the host part (until the call
returned) and the thread's CPU time.  Prints p50/p99/max, the host part's median and every call
over 2x p50; writes ``OUT_DIR/MODEL-MODE.json`` with every row.
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
from torch._dynamo.utils import counters

BUCKETS = tuple(range(128, 2049, 128))


def main() -> None:
    model, mode, requests, out_dir = sys.argv[1], sys.argv[2], int(sys.argv[3]), sys.argv[4]
    compiled = torch.compile(sr.build(model), mode=mode, dynamic=True)
    rows = []
    with torch.no_grad():
        for _ in range(4):
            for bucket in BUCKETS:
                compiled(**sr.make_inputs(model, bucket, BUCKETS, bucket))
                torch.cuda.synchronize()
        gc.collect()
        gc.freeze()
        for i, n in enumerate(random.Random(21).choices(range(128, 2049), k=requests)):
            inputs = sr.make_inputs(model, n, BUCKETS, 1000 + i)
            start, cpu = time.perf_counter(), time.thread_time()
            compiled(**inputs)
            returned = time.perf_counter()
            torch.cuda.synchronize()
            rows.append((n, time.perf_counter() - start, returned - start, time.thread_time() - cpu))
    walls = [row[1] for row in rows]
    p50 = statistics.median(walls)
    result = {
        "model": model,
        "mode": mode,
        "p50_ms": 1e3 * p50,
        "p99_ms": 1e3 * statistics.quantiles(walls, n=100)[98],
        "max_ms": 1e3 * max(walls),
        "host_median_ms": 1e3 * statistics.median(row[2] for row in rows),
        "slow": [
            {"i": i, "n": n, "wall": 1e3 * wall, "host": 1e3 * host, "cpu": 1e3 * cpu}
            for i, (n, wall, host, cpu) in enumerate(rows)
            if wall > 2 * p50
        ],
        "cudagraph_counters": {k: v for k, v in counters["inductor"].items() if "cudagraph" in k},
    }
    print(json.dumps(result))
    with open(f"{out_dir}/{model}-{mode}.json", "w") as out:
        json.dump({**result, "rows": rows}, out)


if __name__ == "__main__":
    main()
