"""What are the sporadic slow calls of a warm model?  Wall, thread CPU and GPU time of each call; GPU clocks at slow ones.

    PYTHONPATH=$PWD python bench/slow_calls_probe.py [--calls 6000]

The ``bench/serving_real.py`` Llama at one warm length (512 tokens), compiled as its arms do
(``max-autotune-no-cudagraphs``, dynamic), after 30 warm calls and ``gc.freeze()``.  Each call is timed
with ``time.perf_counter`` (wall), ``time.thread_time`` (the thread's CPU) and two ``torch.cuda.Event``
records around it (the GPU's own time), then ``torch.cuda.synchronize()``.  A call over 4 ms, and every
500th call, also reads the SM and memory clocks and the clock-event (throttle) reasons through
``pynvml``.  Every 1,000 calls the loop idles 2 s, as between bursts of traffic.  Prints the medians and
every slow call (over 3x the median wall time and 1 ms above it).  A diagnostic, not a guarantee.
"""

from __future__ import annotations

import argparse
import gc
import statistics
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).parent))
import serving_real


def _clock_reader():
    """A function returning (SM MHz, memory MHz, clock-event reasons, query µs), or None without pynvml."""
    try:
        import pynvml

        pynvml.nvmlInit()
        handle = pynvml.nvmlDeviceGetHandleByIndex(torch.cuda._get_nvml_device_index(torch.cuda.current_device()))
    except Exception as err:  # noqa: BLE001 - a diagnostic: run without clocks
        print("no pynvml:", repr(err))
        return lambda: None
    reasons = getattr(pynvml, "nvmlDeviceGetCurrentClocksEventReasons", None) or pynvml.nvmlDeviceGetCurrentClocksThrottleReasons
    print("max SM clock", pynvml.nvmlDeviceGetMaxClockInfo(handle, pynvml.NVML_CLOCK_SM), "MHz")

    def read():
        start = time.perf_counter()
        sm = pynvml.nvmlDeviceGetClockInfo(handle, pynvml.NVML_CLOCK_SM)
        mem = pynvml.nvmlDeviceGetClockInfo(handle, pynvml.NVML_CLOCK_MEM)
        return sm, mem, hex(reasons(handle)), round(1e6 * (time.perf_counter() - start))

    return read


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--calls", type=int, default=6000)
    args = parser.parse_args()
    compiled = torch.compile(serving_real.build("llama"), mode="max-autotune-no-cudagraphs", dynamic=True)
    inputs = serving_real.make_inputs("llama", 512, None, 7)
    rows, clocks = [], {}
    with torch.no_grad():
        for _ in range(30):
            compiled(**inputs)
            torch.cuda.synchronize()
        gc.collect()
        gc.freeze()
        read_clocks = _clock_reader()
        for index in range(args.calls):
            begin, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            wall, cpu = time.perf_counter(), time.thread_time()
            begin.record()
            compiled(**inputs)
            end.record()
            torch.cuda.synchronize()
            wall, cpu = time.perf_counter() - wall, time.thread_time() - cpu
            rows.append((index, wall, cpu, begin.elapsed_time(end) / 1000))
            if wall > 0.004 or index % 500 == 250:
                clocks[index] = read_clocks()
            if index % 1000 == 999:
                time.sleep(2)
    median = statistics.median(r[1] for r in rows)
    print(
        f"median wall {1000 * median:.3f} ms, GPU {1000 * statistics.median(r[3] for r in rows):.3f} ms, "
        f"thread CPU {1000 * statistics.median(r[2] for r in rows):.3f} ms"
    )
    slow = [r for r in rows if r[1] > 3 * median and r[1] - median > 1e-3]
    print(f"{len(slow)} slow calls of {len(rows)}")
    for index, wall, cpu, gpu in slow:
        print(
            f"#{index} wall {1000 * wall:6.2f} thread CPU {1000 * cpu:6.2f} GPU {1000 * gpu:6.2f} ms; "
            f"(SM MHz, memory MHz, reasons, query µs) {clocks.get(index)}"
        )


if __name__ == "__main__":
    main()
