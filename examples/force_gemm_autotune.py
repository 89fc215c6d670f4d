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


def choice_kind(choice: object) -> str:
    name = type(choice).__name__
    return "aten" if "Extern" in name else "triton" if "Triton" in name else name


def compile_and_record(arm: str, context: ik.KnobsContext, device: str, dtype: torch.dtype) -> list[tuple]:
    from torch._inductor import select_algorithm

    records: list[tuple] = []

    def saver(timings, name, input_nodes, choices, *rest):  # arity differs by torch release
        shapes = [tuple(n.get_size()) for n in input_nodes]
        records.append((name, shapes, sorted((ms, c.name, choice_kind(c)) for c, ms in timings.items())))

    select_algorithm.add_feedback_saver(saver)
    torch._dynamo.reset()
    model = torch.nn.Linear(3420, 1280, bias=False, device=device, dtype=dtype)
    with context:
        compiled = torch.compile(model, mode="max-autotune-no-cudagraphs")
        for seq_len in SEQ_LENS:
            x = torch.randn(seq_len, 3420, device=device, dtype=dtype)
            torch._dynamo.mark_dynamic(x, 0)
            compiled(x)
    print(f"\n== {arm}: {len(records)} GEMM(s) autotuned")
    for name, shapes, rows in records:
        kinds = sorted({kind for _, _, kind in rows})
        print(f"  {name}{shapes}: {len(rows)} choices ({', '.join(kinds)})")
        for ms, choice, kind in rows[:5]:
            print(f"    {choice:24} {kind:7} {ms:.4f} ms")
    _remove_saver(select_algorithm, saver)
    return records


def _remove_saver(select_algorithm, saver) -> None:
    cache = getattr(select_algorithm, "_ALGORITHM_SELECTOR_CACHE", None)
    if cache is not None and saver in getattr(cache, "feedback_saver_fns", []):
        cache.feedback_saver_fns.remove(saver)


def main() -> None:
    if torch.cuda.is_available():
        device, dtype = "cuda", torch.bfloat16
        sms = torch.cuda.get_device_properties(0).multi_processor_count
        print(f"GPU: {torch.cuda.get_device_name(0)}, {sms} SMs (torch's gate opens at 68)")
    else:
        device, dtype, sms = "cpu", torch.float32, 0
        print("No CUDA GPU: the SM gate does not apply on CPU; running the same code path anyway.")
    closed = ik.knobs(min_sms=min(max(sms + 1, 69), 1024), max_autotune_gemm=True, gemm_backends="ATEN,TRITON,CPP")
    opened = ik.force_gemm_autotune(min_sms=max(sms, 1), backends="ATEN,TRITON,CPP")
    compile_and_record("gate closed", closed, device, dtype)
    compile_and_record(f"force_gemm_autotune(min_sms={max(sms, 1)})", opened, device, dtype)


if __name__ == "__main__":
    main()
