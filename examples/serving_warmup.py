"""Serve the reference MLP (mm-autotune-per-shape.txt) without autotune stalls.

    python examples/serving_warmup.py           # CUDA if present, else a small CPU version

1. Compile with ``ik.compile`` (the knobs, here ``mode="max-autotune"``, follow every recompile).
2. ``ik.serving.warmup`` over representative lengths: prints what each length compiled and autotuned,
   with Dynamo's recompile reasons.
3. Serve 200 random lengths under ``ik.serving.no_autotune()``: it raises if any request would
   autotune or recompile.
4. Save the compile cache, so that the next process can ``ik.serving.load_compile_cache`` it and
   start warm.
"""

from __future__ import annotations

import os
import random
import tempfile

import torch

import inductor_knobs as ik

CUDA = torch.cuda.is_available()
# On CPU, Inductor autotunes a batched GEMM between ATen and its C++ template.
LENS, LOW, HIGH = ((560, 1024, 2048), 512, 2048) if CUDA else ((56, 102, 204), 51, 204)
DTYPE = torch.bfloat16 if CUDA else torch.float32
DEVICE = "cuda" if CUDA else "cpu"
weight = torch.randn(4, 3420 if CUDA else 64, 1280 if CUDA else 32, device=DEVICE, dtype=DTYPE)


def model(x: torch.Tensor) -> torch.Tensor:
    return torch.nn.functional.linear(x, weight[0].t()) if CUDA else torch.bmm(x, weight)


def hidden_states(seq_len: int) -> torch.Tensor:
    x = torch.randn(seq_len, 3420, device=DEVICE, dtype=DTYPE) if CUDA else torch.randn(4, seq_len, 64)
    torch._dynamo.mark_dynamic(x, 0 if CUDA else 1)
    return x


def main() -> None:
    knobs = ik.Knobs() if CUDA else ik.Knobs(max_autotune=True, gemm_backends="ATEN,CPP")
    compiled = ik.compile(model, knobs, mode="max-autotune" if CUDA else None)
    report = ik.serving.warmup(compiled, shapes=LENS, factory=hidden_states)
    print(report.table())

    lengths = random.Random(0).choices(range(LOW, HIGH + 1), k=200)
    with ik.serving.no_autotune():
        for n in lengths:
            compiled(hidden_states(n))
    print(f"\nserved {len(lengths)} requests with lengths in [{LOW}, {HIGH}]: no autotuning, no recompilation")

    if ik.core.torch_compat.installed().has_cache_artifacts:
        path = os.path.join(tempfile.mkdtemp(), "compile.cache")
        header = ik.serving.save_compile_cache(path, compiled)
        print(f"saved the compile cache to {path} ({header['artifacts']}); in the next process:")
        print(f"    compiled = ik.compile(model, knobs, mode=...); ik.serving.load_compile_cache({path!r}, compiled)")


if __name__ == "__main__":
    main()
