"""A builder for ik.warmup(cudnn_sdpa_trial="sdpa_trial_model:build") in test_sdpa_trial: a CPU attention call."""

import torch


def build():
    def fn(q):
        return torch.nn.functional.scaled_dot_product_attention(q, q, q)

    return fn, lambda length: torch.randn(1, 2, length, 8)
