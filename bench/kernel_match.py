"""Which kernels of an AOT build equal one of the warm-up's up to their names, and how close the others come.

    python bench/kernel_match.py DIR        # DIR: bench/aot_build.py --keep-sources's sources/ (warm-up/, build/)

A kernel's autotune entry is keyed on its module's file, named by the hash of its source; the source names the
kernel (its ``def`` and the ``kernel_name`` of its ``inductor_meta``) and an AOT build's stores its cubin
(``'store_cubin': True``).  For each kernel module of the build (GEMM templates marked ``tem``), this prints whether
a warm-up kernel's source equals it with those taken out, and otherwise the warm-up kernel closest to it
(``difflib.SequenceMatcher.ratio`` of the two texts, 1.0 equal).
"""

from __future__ import annotations

import difflib
import re
import sys
from pathlib import Path

DEF = re.compile(r"^def (triton_\w+)\(", re.MULTILINE)  # the kernel, not a helper before it
CUBIN = re.compile(r"'store_cubin': (?:True|False)")


def up_to_name(text: str) -> tuple[str, str] | None:
    """(kernel name, source with the name and its store_cubin setting taken out), or None for no kernel."""
    found = DEF.search(text)
    if found is None:
        return None
    name = found.group(1)
    return name, CUBIN.sub("'store_cubin': _", re.sub(rf"\b{re.escape(name)}\b", "KERNEL", text))


def load(folder: Path) -> dict[str, tuple[str, str]]:
    return {p.name: kernel for p in sorted(folder.glob("*.py")) if (kernel := up_to_name(p.read_text(errors="replace")))}


def main() -> int:
    root = Path(sys.argv[1])
    warm_up, build = load(root / "warm-up"), load(root / "build")
    texts = {text: name for name, text in warm_up.values()}
    print(f"{len(build)} build kernels, {len(warm_up)} warm-up kernels")
    for name, text in sorted(build.values()):
        kind = "tem" if "tem_" in name or name == "triton_mm" else name.split("_")[1]
        if text in texts:
            print(f"{kind:4s} {name[:70]:70s} equal to {texts[text][:70]}")
            continue
        ratio, closest = max((difflib.SequenceMatcher(None, other, text).ratio(), n) for n, other in warm_up.values())
        print(f"{kind:4s} {name[:70]:70s} closest {closest[:70]} ({ratio:.3f})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
