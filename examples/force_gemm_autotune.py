"""Compile the MLP of the "mm autotune per shape" report with max-autotune, with the SM gate
closed and with it forced open, and print which GEMM choices autotuning considered.

    python examples/force_gemm_autotune.py            # CUDA if present, else CPU

Model: Linear(3420 -> 1280, bias=False), bf16 on GPU (fp32 on CPU), seq lens 560/1024/2048
with a dynamic first dimension.  On a GPU below torch's 68-SM gate, "gate closed" is what
torch does by default; on a bigger GPU the example closes the gate with min_sms above the
GPU's SM count so you can see the difference there too.  Without a CUDA GPU there is nothing
to autotune (see ``CPU_NOTE``): the example compiles the forced arm on CPU and prints what
Inductor compiled with, read inside the compile (``ik.knobs_report``).
"""

from __future__ import annotations

import contextlib

import torch

import inductor_knobs as ik

SEQ_LENS = (560, 1024, 2048)
BACKENDS = "ATEN,TRITON,CPP"
# torch: the gate (``_use_template_for_gpu``) and ``use_triton_template`` want a GPU layout (or a Triton CPU
# backend); ``use_cpp_gemm_template`` wants a constant weight (``mat2.is_module_buffer()``: ``freezing=True``
# under no_grad).  2.13 ``_inductor/utils.py`` :2024, :2066, :2780.
CPU_NOTE = (
    "No CUDA GPU, so nothing is autotuned here: the SM gate and the Triton GEMM templates it opens need a CUDA GPU, "
    "and Inductor's C++ GEMM template needs frozen weights (freezing=True under no_grad), which this model does not use. "
    "On a GPU this prints, per arm, the GEMM candidates autotuning timed: ATen alone with the gate closed, "
    "ATen and Triton templates with it forced open."
)


def compile_and_run(
    knobs: ik.Knobs, device: str, dtype: torch.dtype, record: bool = True
) -> tuple[torch.nn.Module, ik.record_autotune | None]:
    """Compile the model under ``knobs`` and run it at every length; returns it and what autotuning recorded."""
    torch._dynamo.reset()
    model = torch.nn.Linear(3420, 1280, bias=False, device=device, dtype=dtype)
    compiled = ik.compile(model, knobs, mode="max-autotune-no-cudagraphs")
    # Autotune records need torch 2.5+ (add_feedback_saver); the CPU path does not read them.
    with ik.record_autotune() if record else contextlib.nullcontext() as rec:
        for seq_len in SEQ_LENS:
            x = torch.randn(seq_len, 3420, device=device, dtype=dtype)
            torch._dynamo.mark_dynamic(x, 0)
            compiled(x)
    return compiled, rec


def main() -> None:
    if not torch.cuda.is_available():
        print(CPU_NOTE)
        knobs = ik.Knobs(min_sms=1, max_autotune_gemm=True, gemm_backends=BACKENDS)
        compiled, _ = compile_and_run(knobs, "cpu", torch.float32, record=False)
        print("\n== force_gemm_autotune(min_sms=1) on CPU: what Inductor compiled with, read inside the compile")
        print(ik.knobs_report(compiled))
        return
    sms = torch.cuda.get_device_properties(0).multi_processor_count
    print(f"GPU: {torch.cuda.get_device_name(0)}, {sms} SMs (torch's gate opens at 68)")
    closed = ik.Knobs(min_sms=min(max(sms + 1, 69), 1024), max_autotune_gemm=True, gemm_backends=BACKENDS)
    opened = ik.Knobs(min_sms=sms, max_autotune_gemm=True, gemm_backends=BACKENDS)
    for arm, knobs in (("gate closed", closed), (f"force_gemm_autotune(min_sms={sms})", opened)):
        _, rec = compile_and_run(knobs, "cuda", torch.bfloat16)
        print(f"\n== {arm}: {len(rec.records)} GEMM(s) autotuned")
        print(rec.table(top=5))


if __name__ == "__main__":
    main()
