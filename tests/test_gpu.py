"""On a real NVIDIA GPU: the gate decides whether Triton GEMM templates are autotuned."""

from __future__ import annotations

import pytest
import torch
import torch._inductor.utils as inductor_utils

import inductor_knobs as ik

pytestmark = pytest.mark.gpu
requires_cuda = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")


def _autotune_choices(knobs: ik.KnobsContext) -> list[str]:
    """Compile a bf16 mm under ``knobs`` and return the kinds of the choices autotuning timed."""
    from torch._inductor import select_algorithm

    kinds: list[str] = []

    def saver(timings, name, input_nodes, choices, *rest):
        kinds.extend(type(c).__name__ for c in choices)

    select_algorithm.add_feedback_saver(saver)
    try:
        torch._dynamo.reset()
        a = torch.randn(1024, 2048, device="cuda", dtype=torch.bfloat16)
        b = torch.randn(2048, 1536, device="cuda", dtype=torch.bfloat16)
        with knobs:
            out = torch.compile(lambda x, y: x @ y)(a, b)
        torch.testing.assert_close(out, a @ b, rtol=2e-2, atol=2e-1)
    finally:
        select_algorithm._ALGORITHM_SELECTOR_CACHE.feedback_saver_fns.remove(saver)
        torch._dynamo.reset()
    return kinds


@requires_cuda
def test_gate_decides_triton_templates_on_a_real_gpu():
    sms = torch.cuda.get_device_properties(0).multi_processor_count
    original = inductor_utils.is_big_gpu
    common = {"max_autotune_gemm": True, "gemm_backends": "ATEN,TRITON", "config": {"autotune_local_cache": False}}
    closed = _autotune_choices(ik.knobs(min_sms=min(sms + 1, 1024), **common))
    opened = _autotune_choices(ik.knobs(min_sms=min(40, sms), **common))
    triton_closed = sum("Triton" in k for k in closed)
    triton_open = sum("Triton" in k for k in opened)
    print(f"\n{torch.cuda.get_device_name(0)} ({sms} SMs), torch {torch.__version__}: "
          f"min_sms={sms + 1}: {len(closed)} timed choices, {triton_closed} Triton; "
          f"min_sms=40: {len(opened)} timed choices, {triton_open} Triton")  # fmt: skip
    assert triton_closed == 0
    assert triton_open > 0
    assert inductor_utils.is_big_gpu is original
    assert original(0) is (sms >= 68)  # torch's own gate again
