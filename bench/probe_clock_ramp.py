"""Does an autotune timing taken right after the GPU idled read slow?  (issue 31, the A/A control)

Times one small GEMM of the main job's BERT-base (``addmm`` 128x768 by 768x768, bf16) with Inductor's own
benchmarker (``torch._inductor.runtime.benchmarking.benchmarker.benchmark_gpu``: the call every GEMM
candidate's autotune timing ends in) 30 times back to back, after the GPU idled for 3 s, four ways:

- ``cold``: nothing before the timings;
- ``spin``: a 20 ms ``torch.cuda._sleep`` kernel first;
- ``burst``: 50 ms of large GEMMs (4096^3 bf16) first;
- ``warm``: the same 30 timings again at once (the GPU busy just before).

For each: the first five timings, the median of the last ten, and NVML's SM clock before and after
(``torch.cuda.clock_rate``, an average over the last 1/6 to 1 s).  One process, one GPU, nothing beside it.

    python bench/probe_clock_ramp.py
"""

from __future__ import annotations

import statistics
import time

import torch
from torch._inductor.runtime.benchmarking import benchmarker


def timings(fn, n: int = 30) -> list[float]:
    return [benchmarker.benchmark_gpu(fn) * 1000 for _ in range(n)]


def main() -> None:
    dev = "cuda"
    a = torch.randn(128, 768, device=dev, dtype=torch.bfloat16)
    b = torch.randn(768, 768, device=dev, dtype=torch.bfloat16)
    bias = torch.randn(768, device=dev, dtype=torch.bfloat16)
    big = torch.randn(4096, 4096, device=dev, dtype=torch.bfloat16)

    def gemm() -> torch.Tensor:
        return torch.addmm(bias, a, b)

    def spin() -> None:
        torch.cuda._sleep(int(20e-3 * 1.98e9))

    def burst() -> None:
        end = time.perf_counter() + 0.05
        while time.perf_counter() < end:
            for _ in range(20):
                big @ big
            torch.cuda.synchronize()

    timings(gemm, 5)  # load cuBLAS, the benchmarker's buffers
    print(f"GPU {torch.cuda.get_device_name()} torch {torch.__version__}")
    for name, before in (("cold", None), ("spin", spin), ("burst", burst), ("warm", "warm")):
        if before != "warm":
            torch.cuda.synchronize()
            time.sleep(3.0)
        clock0 = torch.cuda.clock_rate()
        if callable(before):
            before()
            torch.cuda.synchronize()
        t = timings(gemm)
        clock1 = torch.cuda.clock_rate()
        first = ", ".join(f"{x:.2f}" for x in t[:5])
        last = statistics.median(t[-10:])
        print(f"{name:5s} clock {clock0}->{clock1} MHz  first us: {first}  median of last 10: {last:.2f} us")


if __name__ == "__main__":
    main()
