"""Why do emulated arms re-benchmark every GEMM?  (In the main job, run r: 1,989 choices benchmarked under an
emulated T4 against 104-146 on the full GPU, for the same 96 autotuned ops.)

    python bench/probe_emulated_autotune_cache.py [--emulate T4] > out.json

Compiles a 4-layer random-weight BERT-base under ``mode="max-autotune-no-cudagraphs"`` and
``force_gemm_autotune``, optionally inside ``ik.emulate_gpu``, with a private Inductor cache, and logs
every autotune-cache lookup (``PersistentCache.lookup``): the op, the inputs key, the choices' hash
keys, whether torch's local cache file held them, and whether it benchmarked.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import tempfile

os.environ.setdefault("TORCHINDUCTOR_CACHE_DIR", tempfile.mkdtemp(prefix="probe-ind-"))

import wrapt

import inductor_knobs as ik


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--emulate", default=None)
    args = parser.parse_args()
    import torch._inductor.codecache  # the module the wrapper patches

    calls: list[dict] = []
    writes: list[dict] = []
    started = [0]

    def entries(cache: dict) -> int:
        return sum(len(per) for keys in cache.values() for per in keys.values())

    @wrapt.patch_function_wrapper("torch._inductor.codecache", "CacheBase.update_local_cache")
    def update(wrapped, instance, a, kw):  # type: ignore[no-untyped-def]
        import threading

        before = entries(instance.get_local_cache())
        out = wrapped(*a, **kw)
        writes.append(
            {
                "thread": threading.current_thread().name,
                "before": before,
                "written": entries(a[0]),
                "after": entries(instance.get_local_cache()),
            }
        )
        return out

    @wrapt.patch_function_wrapper("torch._inductor.codecache", "PersistentCache.lookup")
    def lookup(wrapped, instance, a, kw):  # type: ignore[no-untyped-def]
        import threading

        started[0] += 1
        seq = started[0]
        choices, op, inputs = a[0], a[1], a[2]
        benchmark = a[3] if len(a) > 3 else kw.get("benchmark")
        path = str(instance.get_local_cache_path())
        before = instance.get_local_cache()
        held = before.get(op, {}).get(inputs, {})
        hashes = [c.hash_key() for c in choices]
        flat = {h for per in held.values() for h in per}
        ran: list[bool] = []
        if benchmark is not None:

            def inner(cs):  # type: ignore[no-untyped-def]
                ran.append(True)
                return benchmark(cs)

            if len(a) > 3:
                a = (*a[:3], inner, *a[4:])
            else:
                kw = {**kw, "benchmark": inner}
        out = wrapped(*a, **kw)
        calls.append(
            {
                "seq": seq,
                "thread": threading.current_thread().name,
                "entries_after": entries(instance.get_local_cache()),
                "op": op,
                "inputs": inputs[:120],
                "n": len(choices),
                "path": path,
                "precisions_held": sorted(held),
                "missing": [h for h in hashes if h not in flat][:5],
                "system": instance.system.get("hash", "")[:12],
                "benchmark_given": benchmark is not None,
                "benchmarked": bool(ran),
            }
        )
        return out

    from transformers import BertConfig, BertModel

    config = BertConfig(num_hidden_layers=4)
    with torch.device("cuda"):
        model = BertModel(config, add_pooling_layer=False).to(torch.bfloat16).eval()
    ids = torch.randint(0, config.vocab_size, (8, 128), device="cuda")
    emulate = ik.emulate_gpu(args.emulate) if args.emulate else contextlib.nullcontext()
    with emulate, ik.force_gemm_autotune(min_sms=1), torch.no_grad():
        fn = torch.compile(model, mode="max-autotune-no-cudagraphs")
        fn(input_ids=ids)
    print(
        json.dumps(
            {
                "emulate": args.emulate,
                "lookups": len(calls),
                "benchmarked": sum(c["benchmarked"] for c in calls),
                "unique_keys": len({(c["op"], c["inputs"]) for c in calls}),
                "paths": sorted({c["path"] for c in calls}),
                "systems": sorted({c["system"] for c in calls}),
                "calls": calls,
                "writes": writes,
            },
            indent=1,
        )
    )


if __name__ == "__main__":
    main()
