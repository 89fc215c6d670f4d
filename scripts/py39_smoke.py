"""Python 3.9 smoke test (run under Debian's pypy3, which is Python 3.9; torch is not needed).

Imports every module that does not need torch, builds and validates knobs, parses
``INDUCTOR_KNOBS_*``, and runs the startup hook's bootstrap: the parts a torch 2.4–2.8 user on
Python 3.9/3.10 runs before any torch code.  Fails loudly on any syntax or stdlib feature newer
than 3.9.
"""

import importlib
import os
import pkgutil
import sys

assert sys.version_info[:2] == (3, 9), sys.version
import inductor_knobs as ik  # noqa: E402

NEEDS_TORCH = set()
for info in pkgutil.walk_packages(ik.__path__, "inductor_knobs."):
    if info.name.endswith("__main__"):
        continue
    try:
        importlib.import_module(info.name)
    except ModuleNotFoundError as err:
        if err.name and err.name.split(".")[0] == "torch":
            NEEDS_TORCH.add(info.name)
            continue
        raise
# The patch modules come from the top-level patches/ folder through the installed package.
assert {"inductor_knobs.patches.torch_2_4", "inductor_knobs.patches.torch_2_15"} <= set(sys.modules) | NEEDS_TORCH, NEEDS_TORCH
k = ik.Knobs(min_sms=40, coordinate_descent_tuning=False, config={"epilogue-fusion": False})
assert k.to_dict()["config"] == {"epilogue_fusion": False}, k
env = {"INDUCTOR_KNOBS_MIN_SMS": "40", "INDUCTOR_KNOBS_CUDAGRAPHS": "0", "INDUCTOR_KNOBS_GEMM_BACKENDS": ""}
assert ik.Knobs.from_env(env) == ik.Knobs(min_sms=40, cudagraphs=False)
try:
    ik.Knobs.from_env({"INDUCTOR_KNOBS_MIN_SMS": "abc"})
except ik.KnobsError as err:
    assert "INDUCTOR_KNOBS_MIN_SMS='abc'" in str(err)
else:
    raise AssertionError("a bad variable was accepted")
os.environ["INDUCTOR_KNOBS_MIN_SMS"] = "40"
from inductor_knobs import startup  # noqa: E402

startup.bootstrap()
assert any(type(f).__name__ == "_AfterImport" for f in sys.meta_path)
print(f"python {sys.version.split()[0]}: inductor_knobs imports and parses; modules needing torch: {len(NEEDS_TORCH)}")
