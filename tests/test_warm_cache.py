"""Proof on a warm cache (issue 29): a compile served from torch's caches is attested like a fresh one.

Each run is a fresh process on one ``TORCHINDUCTOR_CACHE_DIR``: the first compiles (cold), the second
finds the FX graph and AOTAutograd caches warm, as a restarted server does.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

WORKER = Path(__file__).with_name("attest_worker.py")


def run_worker(cache_dir: Path) -> dict[str, list[dict[str, object]]]:
    env = {**os.environ, "TORCHINDUCTOR_CACHE_DIR": str(cache_dir), "TRITON_CACHE_DIR": str(cache_dir / "triton")}
    env["TORCHINDUCTOR_FX_GRAPH_CACHE"] = "1"  # off by default before torch 2.5 (config.fx_graph_cache)
    env.pop("INDUCTOR_KNOBS_DISABLE", None)
    out = subprocess.run([sys.executable, str(WORKER)], env=env, capture_output=True, text=True, check=True)
    return json.loads(out.stdout.strip().splitlines()[-1])


@pytest.fixture(scope="module")
def cold_then_warm(tmp_path_factory):
    """One cold and one warm process on one cache directory, each compiling an inference and a training graph."""
    cache = tmp_path_factory.mktemp("warm-cache")
    return run_worker(cache), run_worker(cache)


@pytest.mark.parametrize("case", ["inference", "training"])
def test_a_warm_cache_compile_is_attested_as_a_cache_hit(cold_then_warm, case):
    """Before: the second process recorded 0 attestations (record_compiles' docstring example raised IndexError)."""
    cold, warm = (run[case] for run in cold_then_warm)
    assert cold and all(a["cache"] is None for a in cold), cold
    # The knob beat the mode's coordinate_descent_tuning=True, inside the compile, cold and warm.
    assert all(a["cdt"] is False and a["ok"] for a in cold + warm), (cold, warm)
    assert warm, "a warm-cache compile was not attested"
    assert all(a["cache"] in ("aot_autograd", "fx_graph") for a in warm), warm
