"""A real torch.compile on CPU under the knobs."""

from __future__ import annotations

import torch

import inductor_knobs as ik


def _mlp():
    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Linear(64, 32), torch.nn.ReLU(), torch.nn.Linear(32, 8))


def test_compile_under_knobs_matches_eager_and_reverts(patches, cfg, tmp_path, fake_gpu):
    model, x = _mlp(), torch.randn(16, 64)
    before = (patches.read_override(cfg, "max_autotune_gemm"), patches.read_override(cfg, "trace.enabled"))
    torch._dynamo.reset()
    with ik.force_gemm_autotune(min_sms=40, trace=tmp_path, config={"fx_graph_cache": False}):
        compiled = torch.compile(model)
        out = compiled(x)  # compiles here, inside the block
    torch.testing.assert_close(out, model(x))
    assert any(tmp_path.rglob("output_code.py")), "trace.enabled did not reach the compilation"
    assert (patches.read_override(cfg, "max_autotune_gemm"), patches.read_override(cfg, "trace.enabled")) == before
    torch._dynamo.reset()
