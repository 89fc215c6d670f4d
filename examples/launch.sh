#!/usr/bin/env bash
# Env activation: no code change.  Every Python process started from here (and its child
# processes) opens the SM gate at >= 40 SMs and turns GEMM autotuning on, as soon as
# torch._inductor is imported.  `inductor-knobs doctor` shows what the variables resolve to.
set -euo pipefail
export INDUCTOR_KNOBS_PRESET=force_gemm_autotune   # max_autotune_gemm=1, gemm_backends=ATEN,TRITON
export INDUCTOR_KNOBS_MIN_SMS=40
export INDUCTOR_KNOBS_CUDAGRAPHS=0
inductor-knobs doctor --min-sms "$INDUCTOR_KNOBS_MIN_SMS"
python -c '
import torch, torch._inductor.config as cfg, torch._inductor.utils as utils
print("max_autotune_gemm =", cfg.max_autotune_gemm, "| backends =", cfg.max_autotune_gemm_backends,
      "| gate wrapped:", type(utils.is_big_gpu).__name__)
'
