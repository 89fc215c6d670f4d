"""Compile the MLP of the "mm autotune per shape" report with max-autotune, with the SM gate
closed and with it forced open, and print which GEMM choices autotuning considered.

    python examples/force_gemm_autotune.py            # CUDA if present, else CPU

Model: Linear(3420 -> 1280, bias=False), bf16 on GPU (fp32 on CPU), seq lens 560/1024/2048
with a dynamic first dimension.  On a GPU below torch's 68-SM gate, "gate closed" is what
torch does by default; on a bigger GPU the example closes the gate with min_sms above the
GPU's SM count so you can see the difference there too.  On CPU the same code path runs,
but the gate only guards GPU templates, so both arms see the same choices.
"""

from __future__ import annotations

import torch

import inductor_knobs as ik

SEQ_LENS = (560, 1024, 2048)


def compile_and_record(arm: str, knobs: ik.Knobs, device: str, dtype: torch.dtype) -> ik.record_autotune:
    torch._dynamo.reset()
    model = torch.nn.Linear(3420, 1280, bias=False, device=device, dtype=dtype)
    compiled = ik.compile(model, knobs, mode="max-autotune-no-cudagraphs")
    with ik.record_autotune() as rec:
        for seq_len in SEQ_LENS:
            x = torch.randn(seq_len, 3420, device=device, dtype=dtype)
            torch._dynamo.mark_dynamic(x, 0)
            compiled(x)
    print(f"\n== {arm}: {len(rec.records)} GEMM(s) autotuned")
    print(rec.table(top=5))
    return rec


def main() -> None:
    if torch.cuda.is_available():
        device, dtype = "cuda", torch.bfloat16
        sms = torch.cuda.get_device_properties(0).multi_processor_count
        print(f"GPU: {torch.cuda.get_device_name(0)}, {sms} SMs (torch's gate opens at 68)")
    else:
        device, dtype, sms = "cpu", torch.float32, 0
        print("No CUDA GPU: the SM gate does not apply on CPU; running the same code path anyway.")
    closed = ik.Knobs(min_sms=min(max(sms + 1, 69), 1024), max_autotune_gemm=True, gemm_backends="ATEN,TRITON,CPP")
    opened = ik.Knobs(min_sms=max(sms, 1), max_autotune_gemm=True, gemm_backends="ATEN,TRITON,CPP")
    compile_and_record("gate closed", closed, device, dtype)
    compile_and_record(f"force_gemm_autotune(min_sms={max(sms, 1)})", opened, device, dtype)


if __name__ == "__main__":
    main()
