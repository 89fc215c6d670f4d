"""Run in a subprocess by test_compile_cache: compile the reference GEMM once, report what autotuned.

python cache_worker.py save|load|cold PATH MIN_SMS
"""

import json
import sys

import torch

import inductor_knobs as ik

mode, path, min_sms = sys.argv[1], sys.argv[2], int(sys.argv[3])
knobs = ik.Knobs(max_autotune=True, gemm_backends="ATEN,CPP", min_sms=min_sms)
if mode == "load":
    ik.serving.load_compile_cache(path, knobs)
weight = torch.randn(4, 64, 32)
compiled = ik.compile(lambda x: torch.bmm(x, weight), knobs)
with ik.record_autotune() as rec:
    compiled(torch.randn(4, 56, 64))
if mode == "save":
    ik.serving.save_compile_cache(path, compiled)
print(json.dumps({"benchmarked": len(rec.benchmarked), "compiles": len(rec.compiles)}))
