"""Does a CUDA AOTInductor package that torch alone built (no inductor_knobs anywhere) load on this machine?

    python bench/probe_aot_plain.py --out DIR       # on a CUDA machine

Builds tests/bundle_worker.py's one-``bmm`` model with ``torch.export`` and ``aoti_compile_and_package``
in one fresh process, with and without ``max_autotune``, and loads each package in another, with
faulthandler on.  Prints each step's exit status; writes ``DIR/probe_aot_plain.json``.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
from pathlib import Path

TESTS = str(Path(__file__).resolve().parent.parent / "tests")
BUILD = """import sys, torch
sys.path.insert(0, {tests!r})
import bundle_worker
bundle_worker.device = "cuda"
m = bundle_worker.model()
x = bundle_worker.factory(56)
ep = torch.export.export(m, (x,), strict=False)
print(torch._inductor.aoti_compile_and_package(ep, package_path={path!r}, inductor_configs={configs!r}))
"""
LOAD = """import torch
m = torch._inductor.aoti_load_package({path!r})
print("loaded", flush=True)
"""


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\\n")[0])
    parser.add_argument("--out", required=True)
    out = Path(parser.parse_args().out)
    out.mkdir(parents=True, exist_ok=True)
    work = Path(tempfile.mkdtemp(prefix="probe-aot-plain-"))
    results = {}
    for name, configs in (("default", {}), ("max-autotune", {"max_autotune": True})):
        path = str(work / f"{name}.pt2")
        steps = (("build", BUILD.format(tests=TESTS, path=path, configs=configs)), ("load", LOAD.format(path=path)))
        for step, code in steps:
            command = [sys.executable, "-X", "faulthandler", "-c", code]
            done = subprocess.run(command, capture_output=True, text=True, errors="replace", timeout=240)
            results[f"{name}/{step}"] = {"exit": done.returncode, "stdout": done.stdout[-500:], "stderr": done.stderr[-1500:]}
            print(name, step, done.returncode, flush=True)
            (out / "probe_aot_plain.json").write_text(json.dumps(results, indent=1))
            if done.returncode != 0:
                break
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
