"""Serving without autotune stalls, measured: the reference case of mm-autotune-per-shape.txt.

    python bench/serving.py --out results/       # needs a CUDA GPU

Model: ``Linear(3420 -> 1280, bias=False)`` in bf16, ``torch.compile(mode="max-autotune")``,
``mark_dynamic`` on the sequence dimension, as in the reference report.  Everything is measured
side by side in one run, each arm in a fresh Inductor cache (``fresh_cache``) or a fresh process:

1. first request at seq_len 560/1024/2048: cold (compile + autotune inside the request) vs after
   ``ik.serving.warmup`` over the same three lengths; ratio cold/warm per length.
2. a stream of 200 random lengths in [512, 2048]: autotune benchmarking events and Dynamo
   (re)compilations, plain ``torch.compile`` without warmup vs ``ik.compile`` after ``ik.serving.warmup``.
3. warm restart: a process with an empty Inductor cache vs one that first ran
   ``ik.serving.load_compile_cache`` of a file saved by a third process; first-request seconds and
   autotune events per length.

Writes ``serving.json`` and ``serving.md`` under ``--out``.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import random
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import torch

import inductor_knobs as ik

SEQ_LENS = (560, 1024, 2048)
MODE = "max-autotune"


def make_model() -> torch.nn.Module:
    torch.manual_seed(0)
    return torch.nn.Linear(3420, 1280, bias=False, dtype=torch.bfloat16, device="cuda")


def hidden_states(seq_len: int) -> torch.Tensor:
    x = torch.randn(seq_len, 3420, device="cuda", dtype=torch.bfloat16)
    torch._dynamo.mark_dynamic(x, 0)
    return x


def timed(fn, x) -> float:
    torch.cuda.synchronize()
    start = time.perf_counter()
    fn(x)
    torch.cuda.synchronize()
    return time.perf_counter() - start


def fresh():
    from torch._inductor import utils

    torch._dynamo.reset()
    return getattr(utils, "fresh_cache", None) or utils.fresh_inductor_cache


def first_requests(compiled) -> dict[int, dict]:
    out = {}
    for n in SEQ_LENS:
        with ik.record_autotune() as rec:
            seconds = timed(compiled, hidden_states(n))
        out[str(n)] = {"seconds": seconds, "benchmarked": len(rec.benchmarked), "compiles": real_compiles(rec.compiles)}
    return out


def real_compiles(events) -> list[str]:
    """Dynamo compilations, without CUDA graph recordings (torch reports those through the same callback)."""
    return [e.describe() for e in events if e.trigger != "cudagraph_recording"]


def grad_mode(variant: str):
    """``autograd``: parameters require grad, as in the report; ``no_grad``: inference serving."""
    return torch.no_grad() if variant == "no_grad" else contextlib.nullcontext()


def stream(compiled, lengths, guard_on: str) -> dict:
    with ik.record_autotune() as rec, ik.serving.no_autotune(on=guard_on) as guard:
        start = time.perf_counter()
        for n in lengths:
            compiled(hidden_states(n))
        torch.cuda.synchronize()
        seconds = time.perf_counter() - start
    return {
        "requests": len(lengths),
        "seconds": seconds,
        "autotune_benchmarked": len(rec.benchmarked),
        "autotuned_shapes": sorted({r.signature for r in rec.benchmarked}),
        "compiles": real_compiles(rec.compiles),
        "cudagraph_recordings": sum(e.trigger == "cudagraph_recording" for e in rec.compiles),
        "violations": len(guard.violations),
    }


def in_process(requests: int, variant: str) -> dict:
    lengths = random.Random(0).choices(range(512, 2049), k=requests)
    results: dict = {}
    with grad_mode(variant):
        with fresh()():
            results["cold_first_requests"] = first_requests(torch.compile(make_model(), mode=MODE))
        with fresh()():
            plain = torch.compile(make_model(), mode=MODE)
            results["plain_stream"] = stream(plain, lengths, guard_on="log")
        with fresh()():
            compiled = ik.compile(make_model(), mode=MODE)
            report = ik.serving.warmup(compiled, shapes=SEQ_LENS, factory=hidden_states)
            results["warmup"] = report.to_dict()
            results["warmup_table"] = report.table()
            results["warm_first_requests"] = first_requests(compiled)
            results["warm_stream"] = stream(compiled, lengths, guard_on="log")
    return results


def worker(role: str, path: str, variant: str) -> dict:
    """One process of the warm-restart measurement: save, cold, or load."""
    with grad_mode(variant):
        compiled = ik.compile(make_model(), mode=MODE)  # lazy: nothing compiles before the first call
        if role == "load":
            start = time.perf_counter()
            ik.serving.load_compile_cache(path, compiled)  # keyed on the knobs mode + options expand to
            load_seconds = time.perf_counter() - start
        firsts = first_requests(compiled)
        if role == "save":
            ik.serving.save_compile_cache(path, compiled)
    return {"first_requests": firsts, **({"load_seconds": load_seconds} if role == "load" else {})}


def run_worker(role: str, path: str, cache_root: str, variant: str) -> dict:
    env = {
        **os.environ,
        "TORCHINDUCTOR_CACHE_DIR": os.path.join(cache_root, role),
        "TRITON_CACHE_DIR": os.path.join(cache_root, role, "triton"),
    }
    out = subprocess.run(
        [sys.executable, __file__, "--role", role, "--cache-file", path, "--variant", variant],
        env=env,
        capture_output=True,
        text=True,
    )
    if out.returncode:
        raise RuntimeError(f"{role} worker failed:\n{out.stderr[-4000:]}")
    return json.loads(out.stdout.strip().splitlines()[-1])


def warm_restart(variant: str) -> dict:
    with tempfile.TemporaryDirectory() as root:
        path = os.path.join(root, "compile.cache")
        saved = run_worker("save", path, root, variant)
        cold = run_worker("cold", path, root, variant)
        loaded = run_worker("load", path, root, variant)
    return {"save": saved, "cold_process": cold, "loaded_process": loaded}


def markdown(env: dict, variant: str, results: dict) -> str:
    lines = [
        f"GPU: {env['gpu']} ({env['sms']} SMs), driver {env['driver']}, torch {env['torch']}, triton {env['triton']}; "
        f"variant: {variant}",
        "",
        "| seq_len | cold first request s | after ik.serving.warmup s | ratio "
        "| cold process s | process that loaded the cache s | ratio | autotuned (cold / loaded) |",
        "|---|---|---|---|---|---|---|---|",
    ]
    cold, warm = results["cold_first_requests"], results["warm_first_requests"]
    cp, lp = (
        results["warm_restart"]["cold_process"]["first_requests"],
        results["warm_restart"]["loaded_process"]["first_requests"],
    )
    for n in SEQ_LENS:
        key = str(n)
        c, w, pc, pl = cold[key]["seconds"], warm[key]["seconds"], cp[key]["seconds"], lp[key]["seconds"]
        lines.append(
            f"| {n} | {c:.3f} | {w:.5f} | {c / w:.0f}x | {pc:.3f} | {pl:.3f} | {pc / pl:.1f}x | "
            f"{cp[key]['benchmarked']} / {lp[key]['benchmarked']} |"
        )
    ps, ws = results["plain_stream"], results["warm_stream"]
    lines += [
        "",
        f"| {ps['requests']}-request stream, lengths in [512, 2048] "
        "| autotune benchmarking events | Dynamo (re)compilations | CUDA graph recordings | seconds |",
        "|---|---|---|---|---|",
        f"| plain torch.compile, no warmup | {ps['autotune_benchmarked']} | {len(ps['compiles'])} "
        f"| {ps['cudagraph_recordings']} | {ps['seconds']:.2f} |",
        f"| ik.compile after ik.serving.warmup(560, 1024, 2048) | {ws['autotune_benchmarked']} "
        f"| {len(ws['compiles'])} | {ws['cudagraph_recordings']} | {ws['seconds']:.2f} |",
        "",
        f"no_autotune violations: plain {ps['violations']}, after warmup {ws['violations']}",
    ]
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--out", default="bench-results")
    parser.add_argument("--requests", type=int, default=200)
    parser.add_argument("--role", choices=("save", "cold", "load"), help=argparse.SUPPRESS)
    parser.add_argument("--cache-file", help=argparse.SUPPRESS)
    parser.add_argument("--variant", choices=("autograd", "no_grad"), action="append", help="default: both")
    args = parser.parse_args()
    if args.role:
        print(json.dumps(worker(args.role, args.cache_file, args.variant[0])))
        return
    if not torch.cuda.is_available():
        sys.exit("bench/serving.py needs a CUDA GPU")
    props = torch.cuda.get_device_properties(0)
    try:
        import triton

        triton_version = triton.__version__
    except ImportError:
        triton_version = "none"
    driver = subprocess.run(
        ["nvidia-smi", "--query-gpu=driver_version", "--format=csv,noheader"], capture_output=True, text=True
    ).stdout.strip()
    env = {"gpu": props.name, "sms": props.multi_processor_count, "driver": driver, "torch": torch.__version__}
    env["triton"] = triton_version
    results: dict = {"environment": env}
    tables = []
    for variant in args.variant or ("autograd", "no_grad"):
        results[variant] = {**in_process(args.requests, variant), "warm_restart": warm_restart(variant)}
        tables.append(markdown(env, variant, results[variant]))
        print(tables[-1] + "\n" + results[variant]["warmup_table"], flush=True)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    (out / "serving.json").write_text(json.dumps(results, indent=2, default=str))
    (out / "serving.md").write_text("\n\n".join(tables) + "\n")


if __name__ == "__main__":
    main()
