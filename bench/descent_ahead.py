"""Coordinate descent with its candidates compiled ahead in Inductor's compile workers, against torch's own descent.

    python bench/descent_ahead.py --out DIR [--pairs 2]

Each arm is a fresh process on fresh, empty cache directories (``TORCHINDUCTOR_CACHE_DIR``, ``TRITON_CACHE_DIR``),
the arms alternating, ``ahead`` first in odd pairs and ``serial`` first in even ones.  A process compiles one function
of pointwise and reduction kernels (softmax, layer norm, GELU, row sums, at six shapes, bf16) with
``coordinate_descent_tuning=True`` inside ``inductor_knobs.serving.torch_fixes.torch_fixes()`` (``ahead``, as the
package's warm-up and AOT builds hold it) or with ``descent_ahead`` switched off (``serial``: torch's own descent), and
calls it once.  Per arm: the first call's wall time, torch's summed ``CachingAutotuner.coordinate_descent_tuning``
phase (``compilation_time_metrics``), torch's count of descent benchmarks (``coordesc_tuning_bench``), the package's
counts of compiles ahead, failed and late, the first failure's text, and each kernel's winning config.  Writes
``descent_ahead.json`` and prints one line per arm.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path


def arm(serial: bool) -> dict:
    """One arm in this process (the caches are the environment's)."""
    import torch
    import torch.nn.functional as F
    from torch._dynamo.utils import compilation_time_metrics, counters

    if serial:
        from inductor_knobs.patches.fixes import TorchFixes

        TorchFixes.descent_ahead = lambda self, release: False  # type: ignore[method-assign]
    failures: list[str] = []

    class Keep(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            failures.append(record.getMessage())

    logger = logging.getLogger("inductor_knobs.patches.descent")
    logger.setLevel(logging.DEBUG)
    logger.addHandler(Keep())
    from inductor_knobs.serving.torch_fixes import torch_fixes

    shapes = [(4096, 1024), (8192, 768), (1024, 4096), (2048, 2048), (16384, 256), (512, 8192)]
    inputs = [torch.randn(shape, device="cuda", dtype=torch.bfloat16) for shape in shapes]

    def f(*xs):
        out = []
        for x in xs:
            out += [x.softmax(-1), F.layer_norm(x, x.shape[-1:]), F.gelu(x) + 1, x.float().sum(-1)]
        return out

    compiled = torch.compile(f, options={"coordinate_descent_tuning": True})
    with torch_fixes():
        started = time.perf_counter()
        compiled(*inputs)
        torch.cuda.synchronize()
        wall = time.perf_counter() - started
    from torch._inductor.codecache import PyCodeCache
    from torch._inductor.runtime.triton_heuristics import CachingAutotuner

    winners = {}
    for module in list(PyCodeCache.modules):
        for name, value in vars(module).items():
            if isinstance(value, CachingAutotuner) and value.launchers:
                config = value.launchers[0].config
                winners[name] = {**config.kwargs, "num_warps": config.num_warps, "num_stages": config.num_stages}
    descent = sum(compilation_time_metrics.get("CachingAutotuner.coordinate_descent_tuning", []))
    cubins = list(Path(os.environ["TRITON_CACHE_DIR"]).rglob("*.cubin"))
    return {
        "arm": "serial" if serial else "ahead",
        "first_call_s": round(wall, 3),
        "descent_s": round(descent, 3),
        "counters": {key: value for key, value in counters["inductor"].items() if key.startswith("coordesc")},
        "first_failure": failures[0] if failures else None,
        "triton_cache_cubins": len(cubins),
        "ptxas_variable": os.environ.get("TRITON_PTXAS_PATH"),
        "torch_ptxas": (Path(torch.__file__).parent / "bin" / "ptxas").exists(),
        "winners": winners,
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--out", help="directory for descent_ahead.json (the parent)")
    parser.add_argument("--pairs", type=int, default=2)
    parser.add_argument("--arm", choices=("ahead", "serial"), help=argparse.SUPPRESS)  # a child
    args = parser.parse_args()
    if args.arm:
        print(json.dumps(arm(args.arm == "serial")))
        return 0
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    results = []
    for pair in range(1, args.pairs + 1):
        for name in ("ahead", "serial") if pair % 2 else ("serial", "ahead"):
            work = tempfile.mkdtemp(prefix="descent-ahead-")
            env = {**os.environ, "TORCHINDUCTOR_CACHE_DIR": f"{work}/inductor", "TRITON_CACHE_DIR": f"{work}/triton"}
            done = subprocess.run([sys.executable, __file__, "--arm", name], env=env, capture_output=True, text=True)
            lines = done.stdout.strip().splitlines()
            result = json.loads(lines[-1]) if done.returncode == 0 and lines else {"arm": name, "error": done.stderr[-2000:]}
            result["pair"] = pair
            results.append(result)
            print(json.dumps({k: v for k, v in result.items() if k != "winners"}), flush=True)
    (out / "descent_ahead.json").write_text(json.dumps(results, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
