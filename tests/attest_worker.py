"""Run in a subprocess by test_warm_cache: compile once under knobs, print what every compile attested.

python attest_worker.py [grad]   (TORCHINDUCTOR_CACHE_DIR set by the caller: a second run is a warm cache)
"""

import json
import sys

import torch
import torch._inductor.config as cfg

import inductor_knobs as ik

grad = "grad" in sys.argv[1:]
seen_inside = []
real = cfg.patch


def f(x):
    return torch.nn.functional.relu(x @ x.T) + 1


x = torch.randn(16, 16, requires_grad=grad)
with ik.record_compiles() as rec, ik.knobs(coordinate_descent_tuning=False, max_autotune=False):
    out = torch.compile(f, mode="max-autotune-no-cudagraphs")(x)
    if grad:
        out.sum().backward()
print(
    json.dumps(
        {
            "attestations": [
                {"graph": a.graph, "cache": a.cache, "ok": a.ok, "cdt": a.value("coordinate_descent_tuning")}
                for a in rec.attestations
            ],
        }
    )
)
