"""Per-bucket tuning: kernel time per bucket of a graph per bucket against the better of a static and a dynamic compile.

    python bench/per_bucket.py --out results/per-bucket                 # needs a CUDA GPU and triton
    python bench/per_bucket.py --out results/per-bucket --model llama   # also needs transformers
    python bench/per_bucket.py --out results/pb-bert --model bert --sizes 128,512,2048 --requests 2000
    python bench/per_bucket.py --out results/pb-bert --model bert --sizes 128,512 --requests 0 --kernels-at 128  # kernels per arm
    python bench/per_bucket.py --out /tmp/pb --smoke                    # CPU, tiny sizes, seconds

Workload (issue 48): ``Linear(3420 -> 1280)``, bf16, no bias, rows M = 128, 560, 1024, 2048, 4096, 8192,
``mode="max-autotune-no-cudagraphs"``; with ``--model llama|bert`` the models of ``bench/serving_real.py``
(its ``build`` and ``make_inputs``) at sequence lengths 128-2048 instead.  Per size, time per call
(``triton.testing.do_bench``, ms; without triton the median of 50 timed calls) of:

Kernel time is timed by replaying the call from a CUDA graph (``--timer cudagraph``, the default), as a
served bucket's CUDA graph runs it; ``--timer events`` times eager calls with CUDA events instead.  Every arm is
timed after all of them have compiled, side by side: ``--rounds`` rounds (5) of every arm at every size, the order
reversed every other round, and the median of each kept (one replay of an arm measured alone moved by up to 12%
between runs on an H200, with the same kernels).

- (a) ``static``: ``torch.compile(..., dynamic=False)`` called only at that size;
- (b) ``dynamic``: one ``torch.compile(..., dynamic=True)``, first called at the second size (560);
- (c) ``per-bucket``: ``ik.serving.warmup(torch.compile(...), shapes=sizes, per_bucket="auto")`` (``--per-bucket
  true``: a graph for every size), then its ``serving_fn`` called.

Then traffic: ``--requests`` calls of (c) at sizes drawn (seeded) from the warmed ones, under
``ik.serving.no_stalls(on="record")`` (its per-call latency, CUDA synchronised: p50/p99 overall and per size)
with ``ik.record_compiles()`` and, on torch 2.5+, ``ik.record_autotune()`` counting what traffic compiled and
autotuned.

Each arm compiles its own copy of the module (Dynamo counts a frame's graphs per module object, so the
arms do not share a recompile limit).  Prints a markdown table with each arm's ratio to min(a, b) and
writes ``per_bucket.json`` (with the warm-up's per-bucket rows) under ``--out``.
"""

from __future__ import annotations

import argparse
import contextlib
import copy
import json
import random
import statistics
import sys
import time
from pathlib import Path

LAYER_SIZES = (128, 560, 1024, 2048, 4096, 8192)
MODEL_SIZES = (128, 256, 512, 1024, 2048)
MODE = "max-autotune-no-cudagraphs"


def workload(model: str, smoke: bool, device: str, sizes: tuple[int, ...] | None = None):
    """``(module, factory(size) -> kwargs-or-args, sizes)``."""
    import torch

    if model == "layer":
        k, n, default = (64, 32, (4, 8, 16)) if smoke else (3420, 1280, LAYER_SIZES)
        sizes = sizes or default
        dtype = torch.float32 if device == "cpu" else torch.bfloat16
        module = torch.nn.Linear(k, n, bias=False).to(device, dtype).eval()
        return module, (lambda m: (torch.randn(m, k, device=device, dtype=dtype),)), sizes
    sys.path.insert(0, str(Path(__file__).parent))
    import serving_real

    serving_real.DEVICE = device
    sizes = sizes or ((8, 16, 32) if smoke else MODEL_SIZES)
    return serving_real.build(model), (lambda n: serving_real.make_inputs(model, n, None, seed=n)), sizes


def timer(device: str, how: str = "cudagraph"):
    """ms per call of ``fn()``: on CUDA triton's ``do_bench_cudagraph`` (the calls replayed from one CUDA graph:
    kernel time without the host's launch cost, as a served bucket's CUDA graph runs) or ``do_bench`` (CUDA
    events around eager calls: launch-bound models measure their host path); else the median of 50 timed calls."""
    if device == "cuda":
        from triton.testing import do_bench, do_bench_cudagraph

        return do_bench_cudagraph if how == "cudagraph" else do_bench

    def median_ms(fn):
        fn()
        times = []
        for _ in range(50):
            start = time.perf_counter()
            fn()
            times.append(1000 * (time.perf_counter() - start))
        return statistics.median(times)

    return median_ms


def traffic_quantiles(seconds: list[float]) -> dict:
    """p50 and p99 (ms) of the traffic's calls, and their ratio; None without calls."""
    if len(seconds) < 2:
        return {"p50_ms": None, "p99_ms": None, "p99_over_p50": None}
    cuts = statistics.quantiles([1000 * x for x in seconds], n=100, method="inclusive")
    return {"p50_ms": cuts[49], "p99_ms": cuts[98], "p99_over_p50": cuts[98] / cuts[49]}


def gpu_kernels(fn, item, calls: int = 20) -> list[list]:
    """``[name, calls, total µs per call]`` of every GPU kernel that ``calls`` calls of ``fn`` ran, slowest first."""
    import torch
    from torch.profiler import ProfilerActivity, profile

    call(fn, item)
    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        for _ in range(calls):
            call(fn, item)
        torch.cuda.synchronize()
    rows = [
        [e.key, e.count // calls, e.device_time_total / calls]
        for e in prof.key_averages()
        if e.device_time_total > 0 and not e.key.startswith(("cudaDeviceSynchronize", "Activity Buffer"))
    ]
    return sorted(rows, key=lambda r: -r[2])


def call(fn, item):
    return fn(**item) if isinstance(item, dict) else fn(*item)


def run(
    model: str,
    smoke: bool,
    device: str,
    mode: str | None,
    sizes: tuple[int, ...] | None,
    requests: int,
    how: str,
    per_bucket: bool | str = "auto",
    kernels_at: int | None = None,
    rounds: int = 5,
) -> dict:
    import torch

    import inductor_knobs as ik

    module, factory, sizes = workload(model, smoke, device, sizes)
    if kernels_at is not None and kernels_at not in sizes:
        raise SystemExit(f"--kernels-at {kernels_at}: not one of the sizes {sizes}")
    bench = timer(device, how)
    inputs = {m: factory(m) for m in sizes}
    rows = {m: {"size": m} for m in sizes}
    with torch.no_grad():
        statics = {}
        for m in sizes:  # (a) a static compile per size
            statics[m] = torch.compile(copy.deepcopy(module), mode=mode, dynamic=False)
            call(statics[m], inputs[m])
            print(f"static {m}: compiled", flush=True)  # a run cut short says how far it got
        dynamic = torch.compile(copy.deepcopy(module), mode=mode, dynamic=True)  # (b) first called at sizes[1]
        for m in (sizes[1], *sizes):
            call(dynamic, inputs[m])
        print("dynamic: compiled", flush=True)
        served = torch.compile(copy.deepcopy(module), mode=mode)  # (c) a graph per bucket
        report = ik.serving.warmup(
            served, shapes=sizes, factory=lambda m: inputs[m], per_bucket=per_bucket, dynamic_fn=dynamic, probes=None
        )
        served = report.serving_fn or served
        print("per-bucket: warmed", flush=True)
        with ik.serving.no_stalls(on="raise"), ik.record_compiles() as traffic:  # traffic compiles nothing
            for m in sizes:
                call(served, inputs[m])
        drawn = random.Random(48).choices(sizes, k=requests)
        seconds: dict[int, list[float]] = {m: [] for m in sizes}
        tuned = ik.record_autotune() if ik.ext.can_record_autotune() else contextlib.nullcontext(None)
        guard = ik.serving.no_stalls(on="record")
        with guard, ik.record_compiles() as served_traffic, tuned as autotuned:
            for m in drawn:
                started = time.perf_counter()
                guard.call(call, served, inputs[m])  # the guard synchronises CUDA at the call's end
                seconds[m].append(time.perf_counter() - started)
        # Side by side: every arm at every size in each round (the order reversed every other round), the median of
        # the rounds kept; timed outside the guard and the recorders, after everything has compiled.
        arms = {"static": lambda m: statics[m], "dynamic": lambda m: dynamic, "per_bucket": lambda m: served}
        for turn in range(rounds):
            for m in sizes:
                for arm in list(arms) if turn % 2 == 0 else list(arms)[::-1]:
                    fn = arms[arm](m)
                    rows[m].setdefault(f"{arm}_rounds_ms", []).append(bench(lambda f=fn, x=inputs[m]: call(f, x)))
            print(
                f"round {turn + 1}/{rounds}: "
                + ", ".join(f"{m}: " + " / ".join(f"{rows[m][f'{arm}_rounds_ms'][-1]:.4f}" for arm in arms) for m in sizes),
                flush=True,
            )
        for m in sizes:
            for arm in arms:
                rows[m][f"{arm}_ms"] = statistics.median(rows[m][f"{arm}_rounds_ms"])
        profiled = {}
        if device == "cuda" and kernels_at is not None:  # after the traffic: which GPU kernels each arm runs there
            x = inputs[kernels_at]
            profiled = {name: gpu_kernels(pick(kernels_at), x) for name, pick in arms.items()}
    stall_report = guard.report()
    for m in sizes:
        row = rows[m]
        best = min(row["static_ms"], row["dynamic_ms"])
        row.update({f"{arm}_ratio": row[f"{arm}_ms"] / best for arm in ("static", "dynamic", "per_bucket")})
    for m in sizes:
        rows[m].update(traffic_quantiles(seconds[m]))
    return {
        "model": model,
        "mode": mode,
        "timer": how if device == "cuda" else "median of 50 calls",
        "rounds": rounds,
        "per_bucket": per_bucket,
        "requests": requests,
        "traffic": {
            **traffic_quantiles([x for xs in seconds.values() for x in xs]),
            "guard_p50_ms": stall_report.percentile_ms(50),
            "guard_p99_ms": stall_report.percentile_ms(99),
            "stalls": stall_report.stall_count if hasattr(stall_report, "stall_count") else len(stall_report.stalls),
            "compiles": len(served_traffic.compiles),
            "graphs": len(served_traffic.attestations),
            "autotunes": None if autotuned is None else len(autotuned.records),
        },
        "rows": list(rows.values()),
        "warmup": [r.to_dict() for r in report.buckets],
        "traffic_compiles": len(traffic.compiles) + len(served_traffic.compiles),
        "kernels_at": kernels_at,
        "kernels": profiled,
        "traffic_graphs": len(traffic.attestations) + len(served_traffic.attestations),
    }


def markdown(result: dict, env: dict) -> str:
    lines = [
        f"{result['model']}, mode={result['mode']!r}, per_bucket={result['per_bucket']!r}, timer {result['timer']}; "
        f"{env['device']}, torch {env['torch']}, triton {env['triton']}",
        "",
        "| size | (a) static ms | (b) dynamic ms (first call at the 2nd size) | (c) per-bucket ms | compile s (c) | (c) serves |",
        "|---|---|---|---|---|---|",
    ]
    for row, tuning in zip(result["rows"], result["warmup"]):
        lines.append(
            f"| {row['size']} | {row['static_ms']:.4f} ({row['static_ratio']:.2f}x) | "
            f"{row['dynamic_ms']:.4f} ({row['dynamic_ratio']:.2f}x) | {row['per_bucket_ms']:.4f} "
            f"({row['per_bucket_ratio']:.2f}x) | {tuning['compile_seconds']:.2f} | "
            f"{'its own graph' if tuning['kept'] else 'the dynamic graph'} |"
        )
    lines.append("")
    lines.append(
        f"each ms is the median of {result['rounds']} rounds in which every arm was timed at every size (side by side, "
        "the order reversed every other round); ratios are to min(a, b) at that size; traffic over the warmed sizes "
        f"compiled {result['traffic_compiles']} times ({result['traffic_graphs']} Inductor graphs)"
    )
    if result["kernels"]:
        lines += ["", f"GPU kernels at {result['kernels_at']} (torch.profiler, eager calls; µs per call):", ""]
        lines += [
            f"- {arm}: {len(rows)} kernels, {sum(r[1] for r in rows)} launches, {sum(r[2] for r in rows):.1f} µs"
            for arm, rows in result["kernels"].items()
        ]
    traffic = result["traffic"]
    if result["requests"] and traffic["p50_ms"] is not None:
        lines += [
            "",
            f"{result['requests']} requests at sizes drawn from the warmed ones (seed 48), each synchronised: "
            f"p50 {traffic['p50_ms']:.3f} ms, p99 {traffic['p99_ms']:.3f} ms (p99/p50 {traffic['p99_over_p50']:.2f}); "
            f"compiles {traffic['compiles']}, autotunes {traffic['autotunes']}, stalls {traffic['stalls']}",
            "",
            "| size | requests p50 ms | p99 ms | p99/p50 |",
            "|---|---|---|---|",
        ]
        lines += [
            f"| {row['size']} | {row['p50_ms']:.3f} | {row['p99_ms']:.3f} | {row['p99_over_p50']:.2f} |"
            for row in result["rows"]
            if row["p50_ms"] is not None
        ]
    return "\n".join(lines)


def environment(device: str) -> dict:
    import torch

    try:
        import triton

        triton_version = triton.__version__
    except ImportError:
        triton_version = None
    name = torch.cuda.get_device_name() if device == "cuda" else "cpu"
    driver = None
    if device == "cuda":
        import subprocess

        driver = subprocess.run(
            ["nvidia-smi", "--query-gpu=driver_version", "--format=csv,noheader"], capture_output=True, text=True
        ).stdout.strip()
    return {"device": name, "driver": driver, "torch": torch.__version__, "triton": triton_version}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--out", required=True)
    parser.add_argument("--model", default="layer", choices=("layer", "llama", "bert"))
    parser.add_argument("--smoke", action="store_true", help="CPU, tiny sizes, the default mode: checks the flow")
    parser.add_argument("--sizes", default=None, help="comma-separated sizes (rows or tokens) instead of the defaults")
    parser.add_argument("--per-bucket", default="auto", choices=("auto", "true"), help="warmup(per_bucket=...)")
    parser.add_argument("--timer", default="cudagraph", choices=("cudagraph", "events"), help="kernel time on CUDA")
    parser.add_argument("--requests", type=int, default=None, help="traffic calls after the warm-up (2000; smoke 50)")
    parser.add_argument("--kernels-at", type=int, default=None, help="CUDA: profile each arm's GPU kernels at this size")
    parser.add_argument("--rounds", type=int, default=5, help="timing rounds, every arm at every size in each (median)")
    args = parser.parse_args()
    sizes = tuple(int(x) for x in args.sizes.split(",")) if args.sizes else None
    requests = args.requests if args.requests is not None else (50 if args.smoke else 2000)
    device = "cpu" if args.smoke else "cuda"
    mode = None if args.smoke else MODE
    env = environment(device)
    per_bucket = True if args.per_bucket == "true" else "auto"
    result = run(
        args.model, args.smoke, device, mode, sizes, requests, args.timer, per_bucket, args.kernels_at, max(1, args.rounds)
    )
    text = markdown(result, env)
    print(text)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    (out / "per_bucket.json").write_text(json.dumps({"environment": env, **result}, indent=1))
    return 1 if result["traffic_compiles"] or result["traffic"]["autotunes"] else 0


if __name__ == "__main__":
    sys.exit(main())
