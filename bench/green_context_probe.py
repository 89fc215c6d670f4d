"""Do CUDA green contexts confine Inductor's kernels?  Groundwork for small-GPU emulation (issue 5).

    python bench/green_context_probe.py --out DIR        # torch >= 2.11 (GreenContext with Stream())

For N in SM counts, time a bf16 GEMM (eager cuBLAS and an Inductor-compiled Triton template forced
by ``force_gemm_autotune``) launched on the green context's own stream, without ``set_context``
(deprecated from torch 2.14). The context is made the way this torch's patch module says
(``inductor_knobs.emulation.confine.green_stream``: ``GreenContext.create(num_sms=, device_id=)`` on
2.11-2.13, the ``GreenContext(num_sms=, device_id=)`` constructor on 2.14-2.15, whose ``create``
is only "kept for compatibility"); ``granted_sms`` is what the driver gave. If the stream confines
kernels, both times grow as N shrinks; a compiled time that stays flat means Triton's launches
escape the partition.
Writes ``green_context_probe.json``.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import torch
from triton.testing import do_bench

import inductor_knobs as ik
from inductor_knobs.emulation.confine import green_stream

SHAPE = (4096, 4096, 4096)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--out", default=".")
    parser.add_argument("--sms", default="16,32,40,66,0", help="0: the whole GPU (no green context)")
    args = parser.parse_args()
    m, k, n = SHAPE
    a = torch.randn(m, k, device="cuda", dtype=torch.bfloat16)
    b = torch.randn(k, n, device="cuda", dtype=torch.bfloat16)
    with ik.force_gemm_autotune(min_sms=1, backends="TRITON", config={"autotune_local_cache": False}):
        compiled = torch.compile(lambda x, y: x @ y)
        compiled(a, b)
    total = torch.cuda.get_device_properties(0).multi_processor_count
    rows = []
    for sms in (int(s) for s in args.sms.split(",")):
        if sms:
            stream, granted = green_stream(0, sms)
        else:
            stream, granted = torch.cuda.current_stream(), total
        with torch.cuda.stream(stream):
            eager_ms = do_bench(lambda: a @ b)
            compiled_ms = do_bench(lambda: compiled(a, b))
        rows.append({"sms": sms or total, "granted_sms": granted, "eager_ms": eager_ms, "compiled_triton_ms": compiled_ms})
        print(rows[-1], flush=True)
    result = {"gpu": torch.cuda.get_device_name(0), "sms": total, "torch": torch.__version__, "shape": SHAPE, "rows": rows}
    Path(args.out).mkdir(parents=True, exist_ok=True)
    (Path(args.out) / "green_context_probe.json").write_text(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
