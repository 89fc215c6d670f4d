"""Where a fresh process's load of an AOT serving bundle spends its time, outside the package itself.

    python bench/profile_aot_load.py BUNDLE [--device cuda]

Times ``import torch``, ``import inductor_knobs`` and ``ik.serving.load_serving_bundle`` (the tests' small model:
``tests/bundle_worker.py build-aot`` makes the bundle), and prints the load's cProfile (cumulative and own
time) and which of its imports took longest.  Run it on an empty ``TORCHINDUCTOR_CACHE_DIR``, as on a new
serving host.
"""

from __future__ import annotations

import argparse
import cProfile
import io
import pstats
import sys
import time
from pathlib import Path

STARTED = time.perf_counter()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("bundle")
    parser.add_argument("--device", default="cpu")
    args = parser.parse_args()
    seconds = {}
    import torch

    seconds["import torch"] = time.perf_counter() - STARTED
    started = time.perf_counter()
    import inductor_knobs as ik

    seconds["import inductor_knobs"] = time.perf_counter() - started
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))
    import bundle_worker

    bundle_worker.device = args.device
    if args.device == "cuda":
        started = time.perf_counter()
        torch.zeros(1, device="cuda")
        torch.cuda.synchronize()
        seconds["CUDA init"] = time.perf_counter() - started
    before = set(sys.modules)
    profile = cProfile.Profile()
    started = time.perf_counter()
    profile.enable()
    with torch.no_grad():
        loaded = ik.serving.load_serving_bundle(args.bundle, None, factory=bundle_worker.factory, on_cold="warn", on="record")
    profile.disable()
    seconds["load_serving_bundle"] = time.perf_counter() - started
    seconds.update({f"  of which {k}": v for k, v in loaded.proof.seconds.items()})
    for name, value in seconds.items():
        print(f"{name:40s} {value:8.3f} s")
    imported = sorted(set(sys.modules) - before)
    print(
        f"\nmodules the load imported: {len(imported)}; top-level packages: "
        f"{sorted({m.split('.')[0] for m in imported})}; torch subpackages: "
        f"{sorted({'.'.join(m.split('.')[:3]) for m in imported if m.startswith('torch.')})[:40]}"
    )
    for order in ("cumulative", "tottime"):
        out = io.StringIO()
        pstats.Stats(profile, stream=out).sort_stats(order).print_stats(35)
        print(f"\n== by {order}\n" + out.getvalue()[-7000:])


if __name__ == "__main__":
    main()
