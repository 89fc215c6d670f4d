"""Run in a fresh process by test_release_knobs: load a lookup table written by ik.record_autotune, compile, report.

python lookup_worker.py TABLE.json cpu|cpu-plain|cuda

cpu: torch's lookup table is CUDA-only (LookupTableChoices._get_lookup_table returns {} without CUDA and
_get_device_key gives a CPU no key), so this lifts exactly those two guards, as a GPU host has them, and
the rest is torch's own lookup: the knob's table and handler, torch's key of the CPU bmm, its "lookup hit".
cpu-plain: the same, but the table set with torch's config.patch alone, without the knob (torch's default
choices handler: no hit).  cuda: nothing is lifted (the GPU test).

Prints one JSON line: whether torch logged a lookup hit, what the compile attested, and how many autotunes
were benchmarked.
"""

import json
import logging
import sys
import warnings

import torch
from torch._inductor.lookup_table import LookupTableChoices

import inductor_knobs as ik
from inductor_knobs.errors import LookupTableUnusedWarning

path, device = sys.argv[1], sys.argv[2]
hits = []


class _Hits(logging.Handler):
    def emit(self, record):
        if "lookup hit" in record.getMessage():
            hits.append(record.getMessage())


logger = logging.getLogger("torch._inductor.lookup_table.choices")
logger.setLevel(logging.INFO)
logger.addHandler(_Hits())
if device.startswith("cpu"):
    LookupTableChoices._get_lookup_table = lambda self: torch._inductor.config.lookup_table.table or {}
    LookupTableChoices._get_device_key = staticmethod(lambda device: "cpu")
    knobs = ik.Knobs(lookup_table=path, max_autotune=True, gemm_backends="ATEN,CPP")
    a, b = torch.randn(4, 64, 32), torch.randn(4, 32, 48)

    def fn(x, y):
        return torch.bmm(x, y)

else:
    knobs = ik.Knobs(lookup_table=path, max_autotune=True, gemm_backends="ATEN,TRITON")
    a = torch.randn(256, 512, device="cuda", dtype=torch.float16)
    b = torch.randn(512, 384, device="cuda", dtype=torch.float16)

    def fn(x, y):
        return x @ y


with warnings.catch_warnings(record=True) as caught:
    warnings.simplefilter("always", LookupTableUnusedWarning)
    if device == "cpu-plain":
        with ik.record_autotune() as rec, ik.knobs(max_autotune=True, gemm_backends="ATEN,CPP"):
            with torch._inductor.config.patch({"lookup_table.table": json.load(open(path))}):
                torch.compile(fn)(a, b)
    else:
        with ik.record_autotune() as rec, ik.knobs(knobs):
            torch.compile(fn)(a, b)
table = json.load(open(path))
attested = [a.to_dict() for a in rec.attestations]
print(
    json.dumps(
        {
            "hits": hits,
            "table_attested": all(
                s.compiled_with == table for a in rec.attestations for s in a.settings if s.key == "lookup_table.table"
            )
            and device != "cpu-plain",
            "handler": sorted({s.compiled_with for a in rec.attestations for s in a.settings if s.key.endswith("V.choices")}),
            "benchmarked": [r.op for r in rec.benchmarked],
            "unused_warnings": [str(w.message) for w in caught if issubclass(w.category, LookupTableUnusedWarning)],
            "attestations": len(attested),
        }
    )
)
