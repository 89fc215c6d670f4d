"""Run in a subprocess by test_warm_cache: compile an inference and a training graph under knobs, and
print what every compile of each attested.

python attest_worker.py   (TORCHINDUCTOR_CACHE_DIR set by the caller: a second run is a warm cache)
"""

import json

import torch

import inductor_knobs as ik


def attested(grad: bool) -> list[dict[str, object]]:
    # A new function object per case, so the training compile is not a Dynamo guard hit of the inference one.
    def f(x):
        return torch.nn.functional.relu(x @ x.T) + 1

    x = torch.randn(16, 16, requires_grad=grad)
    with ik.record_compiles() as rec, ik.knobs(coordinate_descent_tuning=False, max_autotune=False):
        out = torch.compile(f, mode="max-autotune-no-cudagraphs")(x)
        if grad:
            out.sum().backward()
    return [
        {"graph": a.graph, "cache": a.cache, "ok": a.ok, "cdt": a.value("coordinate_descent_tuning")} for a in rec.attestations
    ]


print(json.dumps({"inference": attested(False), "training": attested(True)}))
