"""Run in a fresh process by test_knob_table: compile one function under torch's defaults, or under each knob of the
knob table in turn, on the cache directory the caller set (``TORCHINDUCTOR_CACHE_DIR``), and print what happened.

python knob_table_worker.py defaults
python knob_table_worker.py knobs '{"name": {"knob": value, ...}, ...}' TRACE_DIR
"""

import contextlib
import json
import os
import sys
import warnings

import torch
import torch.nn.functional as F
from torch._dynamo.utils import counters

import inductor_knobs as ik


def f(q, w):
    attention = F.scaled_dot_product_attention(q, q, q)
    return (attention.flatten(1) @ w).relu() + 1


def run(knobs):
    """Compile and call ``f`` under ``knobs``; what torch's caches did, what was attested, and the ops that ran."""
    torch._dynamo.reset()  # a fresh Dynamo compile: Inductor's on-disk caches decide hit or miss
    before = {group: dict(counters[group]) for group in ("inductor", "aot_autograd")}
    q, w = torch.randn(2, 2, 8, 4), torch.randn(64, 16)
    block = ik.knobs(**knobs, on_mismatch="warn") if knobs else contextlib.nullcontext()
    with warnings.catch_warnings(record=True) as caught, ik.record_compiles() as rec, block:
        warnings.simplefilter("always")
        with torch.profiler.profile() as prof:
            torch.compile(f, backend="inductor")(q, w)
    delta = {f"{group}.{k}": int(v) - before[group].get(k, 0) for group in before for k, v in counters[group].items()}
    return {
        "hits": delta.get("inductor.fxgraph_cache_hit", 0) + delta.get("aot_autograd.autograd_cache_hit", 0),
        "misses": delta.get("inductor.fxgraph_cache_miss", 0),
        "attestations": [{"cache": a.cache, "settings": [s.to_dict() for s in a.settings]} for a in rec.attestations],
        "ops": sorted({e.name for e in prof.events() if "scaled_dot_product" in e.name}),
        "warnings": [str(w.message) for w in caught if "did not take effect" in str(w.message)],
    }


if sys.argv[1] == "defaults":
    print(json.dumps(run({})))
else:
    samples, trace_dir = json.loads(sys.argv[2]), sys.argv[3]
    out = {}
    for name, knobs in samples.items():
        before = sum(len(files) for _, _, files in os.walk(trace_dir))
        out[name] = run(knobs)
        out[name]["trace_files"] = sum(len(files) for _, _, files in os.walk(trace_dir)) - before
    print(json.dumps(out))
