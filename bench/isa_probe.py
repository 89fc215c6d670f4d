"""What each CPU vector-ISA probe of Inductor needs to load: torch imported, or only torch's libraries by path.

    python bench/isa_probe.py --out DIR

On fresh, empty Inductor caches: ``torch._inductor.cpu_vec_isa.valid_vec_isa_list()`` (torch's ISA list for this
CPU) under the package's torch fixes, then, for every probe library the dry compiles left in the cache, three child
loads, each timed: the package's fixed script (``patches/fixes.py: vec_isa_probe``; its ``import torch`` fallback
counted), torch's ``libgomp``, ``libc10`` and ``libtorch_cpu`` only, and torch 2.4-2.12's own
(``import torch`` first).  Writes ``isa_probe.json``: per library its ISA flags, each load's exit status, seconds
and first line of errors.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path


def load(script: str, library: Path) -> dict:
    started = time.perf_counter()
    done = subprocess.run([sys.executable, "-c", script.replace("__lib_path__", str(library))], capture_output=True, text=True)
    lines = [line for line in done.stderr.splitlines() if line.strip()]
    return {"ok": done.returncode == 0, "seconds": round(time.perf_counter() - started, 3), "error": lines[-1] if lines else ""}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--out", required=True)
    args = parser.parse_args()
    cache = Path(tempfile.mkdtemp(prefix="isa-probe-"))
    os.environ["TORCHINDUCTOR_CACHE_DIR"] = str(cache)
    import torch
    from inductor_knobs.patches.fixes import VEC_ISA_PROBE_BEFORE, vec_isa_probe
    from torch._inductor.cpu_vec_isa import valid_vec_isa_list

    from inductor_knobs.ext import torch_compat
    from inductor_knobs.serving.torch_fixes import torch_fixes

    started = time.perf_counter()
    with torch_fixes():
        isas = [str(isa) for isa in valid_vec_isa_list()]
    listed = round(time.perf_counter() - started, 3)
    fixed = vec_isa_probe(str(Path(torch.__file__).parent / "lib"))
    without_fallback = (
        fixed.split("try:\n")[0]
        + "load(["
        + ", ".join(
            repr(str(Path(torch.__file__).parent / "lib" / name)) for name in ("libgomp.so.1", "libc10.so", "libtorch_cpu.so")
        )
        + "])\n"
    )
    rows = []
    for library in sorted(cache.rglob("*.so")):
        source = library.with_suffix(".cpp")
        rows.append(
            {
                "library": library.name,
                "has_source": source.is_file(),
                "fixed": load(fixed, library),
                "libraries_only": load(without_fallback, library),
                "import_torch": load(VEC_ISA_PROBE_BEFORE, library),
            }
        )
    patches = torch_compat.installed(strict=False)
    result = {
        "torch": torch.__version__,
        "fix_applies": bool(patches.fixes(torch_compat.release_of(torch.__version__))),
        "isas": isas,
        "valid_vec_isa_list_s": listed,
        "probes": rows,
    }
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    (out / "isa_probe.json").write_text(json.dumps(result, indent=1) + "\n")
    print(json.dumps(result, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
