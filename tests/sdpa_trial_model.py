"""Builders for ik.serving.warmup(cudnn_sdpa_trial="sdpa_trial_model:...") in test_sdpa_trial.

build: a CPU attention call (the trial's plumbing).  build_cuda / build_cuda_bias: cuDNN attention on a
GPU at a varying sequence length, BSHD q/k/v (the path TORCH_CUDNN_SDPA_AVOID_RECOMPILE takes), causal by
the is_causal hint or by a mask passed as a bias (the path it does not take).
"""

import torch


def build():
    def fn(q):
        return torch.nn.functional.scaled_dot_product_attention(q, q, q)

    return fn, lambda length: torch.randn(1, 2, length, 8)


def _cuda(bias):
    from torch.nn.attention import SDPBackend, sdpa_kernel

    def fn(q, mask):
        with sdpa_kernel([SDPBackend.CUDNN_ATTENTION]):
            if bias:
                return torch.nn.functional.scaled_dot_product_attention(q, q, q, attn_mask=mask)
            return torch.nn.functional.scaled_dot_product_attention(q, q, q, is_causal=True)

    def factory(length):
        q = torch.randn(4, length, 16, 128, device="cuda", dtype=torch.bfloat16).transpose(1, 2)  # BSHD storage
        mask = torch.ones(length, length, device="cuda", dtype=torch.bool).tril() if bias else None
        return q, mask

    return fn, factory


def build_cuda():
    return _cuda(bias=False)


def build_cuda_bias():
    return _cuda(bias=True)
