"""The examples run on a machine without a CUDA GPU and print something true there, not empty tables."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

EXAMPLES = Path(__file__).resolve().parent.parent / "examples"


def run_on_cpu(script: str, tmp_path: Path) -> str:
    """Run ``examples/<script>`` in a fresh interpreter with no CUDA device and an empty Inductor cache; its stdout."""
    env = {**os.environ, "CUDA_VISIBLE_DEVICES": "", "TORCHINDUCTOR_CACHE_DIR": str(tmp_path / "inductor")}
    env = {k: v for k, v in env.items() if not k.startswith("INDUCTOR_KNOBS_")}
    done = subprocess.run(
        [sys.executable, str(EXAMPLES / script)], env=env, cwd=tmp_path, capture_output=True, text=True, timeout=600
    )
    assert done.returncode == 0, done.stderr[-3000:]
    return done.stdout


def test_force_gemm_autotune_on_cpu_says_why_nothing_is_autotuned_and_shows_the_attested_knobs(tmp_path):
    out = run_on_cpu("force_gemm_autotune.py", tmp_path)
    first = out.splitlines()[0]
    assert first.startswith("No CUDA GPU, so nothing is autotuned here") and "On a GPU this prints" in first, out
    assert "GEMM(s) autotuned" not in out, out  # no empty autotune tables
    # The knobs as Inductor read them inside the compile: asked by the block, and compiled with.
    rows = {line.split()[0]: line.split() for line in out.splitlines() if line.startswith(("max_autotune", "is_big_gpu"))}
    assert rows["max_autotune_gemm"][1:] == ["True", "knobs", "True"], out
    assert rows["max_autotune_gemm_backends"][1:] == ["'ATEN,TRITON,CPP'", "knobs", "'ATEN,TRITON,CPP'"], out
    assert rows["is_big_gpu"][-1] == "-", out  # the gate override was set, and no CUDA compile consulted it
