"""Per-call cost of an AOT serving bundle's input check, side by side with an unchecked call.

    python bench/aot_input_check.py --out /tmp/aot_input_check.json              # CUDA if present, else CPU
    python bench/aot_input_check.py --device cpu --out /tmp/aot_input_check.json

Builds the AOTInductor package of a small model, ``forward(x, y, scale) = relu(x) * w * scale + y`` with ``x``
and ``y`` of ``(n, 1024)`` float32 (their lengths tied by the export), warmed at n = 8 and 16 with ``scale=2.0``,
as ``ik.serving.save_serving_bundle(..., aot=True)`` does (``aot_package.build``: export, AOTInductor, the load check
in a child), loads it as ``ik.serving.load_serving_bundle`` does (``aot_package.load``) and times, per call of
``(x, y, scale)`` at n = 16:

- ``check``: ``ShapeCheckedPackage.check`` alone (the contract's dtype, device, sizes, tied sizes, layout and
  value compares; nothing runs);
- ``unchecked``: ``ShapeCheckedPackage.run``: torch's ``AOTICompiledModel`` call (flatten by the input spec,
  ``boxed_run``, rebuild the outputs) without the check;
- ``checked``: the served call (``check`` then ``run``).

Each figure is in microseconds per call: the median over ``--repeats`` batches of ``--calls`` calls, the smallest
of three rounds that take the three in turn (a slower stretch of a shared host weighs on each alike); on CUDA
each batch ends with ``torch.cuda.synchronize()`` (inside its time: the calls' kernels are part of a call).  The
JSON written to ``--out`` holds the three, ``ratio`` (checked / unchecked), ``check_over_unchecked`` (check /
unchecked), whether ``check`` is within ``--target-us`` (5 us), and ``refused``: the message of each call the
package was not compiled for (a shorter ``y``, a float64 ``x``, a transposed ``x``, ``scale=5.0``), None where one
ran.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time

import torch

import inductor_knobs as ik
from inductor_knobs.serving import aot_package

WIDTH = 1024
LENGTHS = (8, 16)


class Scaled(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        torch.manual_seed(0)
        self.w = torch.nn.Parameter(torch.randn(WIDTH))

    def forward(self, x: torch.Tensor, y: torch.Tensor, scale: float) -> torch.Tensor:
        return torch.relu(x) * self.w * scale + y


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", required=True, help="the JSON file to write")
    parser.add_argument("--device", choices=("cuda", "cpu"), default="cuda" if torch.cuda.is_available() else "cpu")
    parser.add_argument("--calls", type=int, default=2000, help="calls per batch (default 2000)")
    parser.add_argument("--repeats", type=int, default=15, help="batches per figure (default 15)")
    parser.add_argument("--target-us", type=float, default=5.0, help="the check's per-call budget (default 5 us)")
    options = parser.parse_args()
    device = options.device

    def factory(n: int) -> dict:
        g = torch.Generator().manual_seed(n)
        return {
            "x": torch.randn(n, WIDTH, generator=g).to(device),
            "y": torch.randn(n, WIDTH, generator=g).to(device),
            "scale": 2.0,
        }

    started = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="aot-input-check-") as cache:
        os.environ.setdefault("TORCHINDUCTOR_CACHE_DIR", cache)
        model = Scaled().to(device).eval()
        payload, built = aot_package.build("aot_input_check", ik.compile(model), factory, list(LENGTHS))
        served = aot_package.load("aot_input_check", payload, json.loads(json.dumps(built["inputs"])))
    build_s = time.perf_counter() - started
    call = factory(LENGTHS[-1])
    sync = torch.cuda.synchronize if device == "cuda" else (lambda: None)

    def per_call_us(fn) -> float:
        for _ in range(100):  # warm: first calls, allocator, caches
            fn(**call)
        sync()
        batches = []
        for _ in range(options.repeats):
            begin = time.perf_counter_ns()
            for _ in range(options.calls):
                fn(**call)
            sync()
            batches.append((time.perf_counter_ns() - begin) / options.calls / 1000)
        return statistics.median(batches)

    with torch.no_grad():
        answer = served(**call)
        expected = model(**call)
        error = float((answer - expected).abs().max())
        figures: dict[str, list[float]] = {"check": [], "unchecked": [], "checked": []}
        for _ in range(3):
            figures["check"].append(per_call_us(served.check))
            figures["unchecked"].append(per_call_us(served.run))
            figures["checked"].append(per_call_us(served))
        refused = {}  # calls the package was not compiled for: each must be refused, naming the input, with nothing run
        short_y = {**call, "y": factory(LENGTHS[0])["y"]}
        for case, bad in {
            "tied size (y shorter than x)": short_y,
            "dtype (float64 x)": {**call, "x": call["x"].double()},
            "layout (transposed x)": {**call, "x": call["x"].t().contiguous().t()},
            "value (scale=5.0)": {**call, "scale": 5.0},
        }.items():
            try:
                served(**bad)
                refused[case] = None
            except ik.serving.BundleInputRefused as err:
                refused[case] = str(err)
    us = {name: min(values) for name, values in figures.items()}
    result = {
        "device": torch.cuda.get_device_name() if device == "cuda" else f"cpu ({os.cpu_count()} CPUs)",
        "torch": torch.__version__,
        "python": sys.version.split()[0],
        "model": f"relu(x) * w * scale + y, x and y ({LENGTHS[-1]}, {WIDTH}) float32, scale 2.0",
        "calls_per_batch": options.calls,
        "repeats": options.repeats,
        "us_per_call": us,
        "ratio": us["checked"] / us["unchecked"],
        "check_over_unchecked": us["check"] / us["unchecked"],
        "target_us": options.target_us,
        "check_within_target": us["check"] <= options.target_us,
        "max_abs_error": error,
        "refused": refused,
        "all_refused": all(refused.values()),
        "build_s": build_s,
        "cxx": built["cxx"],
    }
    with open(options.out, "w") as out:
        json.dump(result, out, indent=2)
    print(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
