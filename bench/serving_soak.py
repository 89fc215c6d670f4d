"""docs/serving.md's serving recipe served from a thread pool: are the answers right, is memory flat, are stalls real?

    python bench/serving_soak.py --out results/serving-soak          # needs a CUDA GPU and transformers
    python bench/serving_soak.py --device cpu --requests 200 --threads 1 4   # a smoke run of the flow
    python bench/serving_soak.py --gpus 0 1 2 3 --out results/serving-soak-4gpu  # one served model per GPU

Per model (``bench/serving_real.py``'s random-weight Llama and BERT-base, bf16, inference), one
process runs the recipe once: ``ik.compile(mode="max-autotune-no-cudagraphs", dynamic=True)``,
``ik.serving.warmup`` over 128..2048, its recommended buckets, ``ik.serving.capture_cuda_graphs`` (``outputs="copy"``,
the default), and ``ik.serving.no_stalls(on="record", warmup=<the buckets' warm-up>)``.  Then, for each thread
count (1, 4, 16 by default), ``--requests`` random lengths (seeded) go through a
``ThreadPoolExecutor`` of that many threads; each request reads its answer as soon as its call
returns (Llama: the argmax token at its last real position; BERT: the hidden state there) and the
answer is compared with the same request served alone, one at a time, before any threading.

Reported per model and thread count: wrong answers, the process's RSS growth (``VmRSS`` before and
after the requests), the guard's stalls by cause and unattributed ones, p50/p99/max in ms, and the
guard's memory before and after (``tracemalloc`` is not used on the GPU: it slows every allocation).

**Several GPUs** (``--gpus 0 1 2 3``): one process per GPU (``CUDA_VISIBLE_DEVICES`` set to it, its own
empty ``TORCHINDUCTOR_CACHE_DIR``), all started at once, each serving one model (``--models`` taken in
turn: llama on the first GPU, bert on the second, llama on the third, ...) to its own thread pools, as
a server with one model replica per GPU does.  The table gets a GPU column; a GPU whose process failed
is a row that says so, never a missing row.

Writes ``serving_soak.json`` and ``serving_soak.md`` under ``--out``.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
import serving_real  # the models, inputs and environment of the serving benchmark

WARM_LENGTHS = serving_real.WARM_LENGTHS
LOW, HIGH = serving_real.LOW, serving_real.HIGH


def rss_mb() -> float:
    """Resident set size of this process in MB (``/proc/self/status``)."""
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return float("nan")


def answer(model: str, out, length: int):
    """What a client reads from one response: a small tensor, copied to the CPU at once."""
    if model == "llama":
        logits = out.logits if hasattr(out, "logits") else out[0]
        return int(logits[0, length - 1].argmax())
    hidden = out.last_hidden_state if hasattr(out, "last_hidden_state") else out[0]
    return hidden[0, length - 1, :8].float().cpu()


def same(a, b) -> bool:
    import torch

    return bool(torch.equal(a, b)) if isinstance(a, torch.Tensor) else a == b


def run_model(model: str, requests: int, thread_counts: list[int]) -> dict:
    import torch

    import inductor_knobs as ik

    net = serving_real.build(model)
    started = time.perf_counter()
    with torch.no_grad():
        compiled = ik.compile(net, mode="max-autotune-no-cudagraphs", dynamic=True)
        report = ik.serving.warmup(
            compiled, shapes=list(WARM_LENGTHS), factory=lambda n: serving_real.make_inputs(model, n, None, n)
        )
        buckets = tuple(report.recommended_buckets or WARM_LENGTHS)
        padded = lambda n: serving_real.make_inputs(model, n, buckets, n)  # noqa: E731
        served = compiled
        if serving_real.DEVICE == "cuda":  # CUDA graphs need CUDA; the CPU smoke run serves the compiled model
            served = ik.serving.capture_cuda_graphs(compiled, shapes=list(buckets), factory=padded)
        warmed = ik.serving.warmup(served, shapes=list(buckets), factory=padded, probes=None)
        setup = time.perf_counter() - started
        out: dict = {"model": model, "setup_seconds": setup, "buckets": list(buckets), "runs": []}
        for threads in thread_counts:
            lengths = random.Random(threads).choices(range(LOW, HIGH + 1), k=requests)
            inputs = [serving_real.make_inputs(model, n, buckets, 10_000 + i) for i, n in enumerate(lengths)]
            alone = [answer(model, served(**x), n) for x, n in zip(inputs, lengths)]  # one at a time, no guard
            guard = ik.serving.no_stalls(
                served, on="record", warmup=warmed
            )  # one guard per thread count: its totals are that run's
            rss_before = rss_mb()

            def request(i: int, inputs=inputs, lengths=lengths, guard=guard):
                return answer(model, guard(**inputs[i]), lengths[i])

            t0 = time.perf_counter()
            with guard, ThreadPoolExecutor(threads) as pool:  # the block hears every thread's compiles
                got = list(pool.map(request, range(requests)))
            wall = time.perf_counter() - t0
            wrong = sum(not same(a, b) for a, b in zip(alone, got))
            summary = guard.report()
            out["runs"].append(
                {
                    "threads": threads,
                    "requests": requests,
                    "wrong": wrong,
                    "rss_growth_mb": rss_mb() - rss_before,
                    "wall_seconds": wall,
                    "calls": guard.calls,
                    "stalls": guard.stall_count,
                    "report": summary.to_dict(),
                }
            )
            print(json.dumps({"model": model, **out["runs"][-1], "report": None}), flush=True)
    return out


def markdown(results: list[dict], env: dict) -> str:
    lines = [
        "# Serving soak: the README recipe from a thread pool",
        "",
        f"{env['gpu']}, driver {env['driver']}, torch {env['torch']}, triton {env['triton']}, "
        f"transformers {env['transformers']}.",
        "",
        "| GPU | model | threads | requests | wrong | RSS growth MB | p50 ms | p99 ms | max ms | stalls | unattributed "
        "| by cause |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for result in results:
        gpu = result.get("gpu", "-")
        if result.get("error"):
            lines.append(f"| {gpu} | {result['model']} | - | - | failed: {result['error']} | | | | | | | |")
        for run in result.get("runs", []):
            r = run["report"]
            causes = ", ".join(f"{k} {v['stalls']}" for k, v in r["by_cause"].items()) or "-"
            lines.append(
                f"| {gpu} | {result['model']} | {run['threads']} | {run['requests']} | {run['wrong']} | "
                f"{run['rss_growth_mb']:.1f} | "
                f"{r['p50_ms']:.2f} | {r['p99_ms']:.2f} | {r['max_ms']:.2f} | {run['stalls']} | {r['unattributed']} | {causes} |"
            )
    return "\n".join(lines) + "\n"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", default="results/serving-soak")
    parser.add_argument("--models", nargs="+", default=list(serving_real.MODELS))
    parser.add_argument("--threads", nargs="+", type=int, default=[1, 4, 16])
    parser.add_argument("--requests", type=int, default=5000)
    parser.add_argument("--device", default="cuda", choices=["cuda", "cpu"])
    parser.add_argument("--gpus", nargs="+", type=int, help="one process per GPU, each serving one model (see the docstring)")
    args = parser.parse_args()
    serving_real.DEVICE = args.device
    if args.gpus:
        results = per_gpu(args)
    else:
        results = [run_model(model, args.requests, args.threads) for model in args.models]
    env = serving_real.environment()
    if args.gpus:
        env["gpus"] = len(args.gpus)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    (out / "serving_soak.json").write_text(json.dumps({"environment": env, "results": results}, indent=1, default=str))
    (out / "serving_soak.md").write_text(markdown(results, env))
    print(markdown(results, env))
    worst = max((run["wrong"] for r in results for run in r.get("runs", [])), default=0)
    return 1 if worst or any(r.get("error") for r in results) else 0


def per_gpu(args: argparse.Namespace) -> list[dict]:
    """Run one soak process per GPU at once, each serving one model, and collect their results."""
    procs = []
    with tempfile.TemporaryDirectory(prefix="soak-gpus-") as scratch:
        for i, gpu in enumerate(args.gpus):
            model = args.models[i % len(args.models)]
            out = Path(scratch, f"gpu{gpu}")
            env = {**os.environ, "CUDA_VISIBLE_DEVICES": str(gpu), "TORCHINDUCTOR_CACHE_DIR": str(out / "inductor")}
            argv = [sys.executable, __file__, "--out", str(out), "--models", model, "--requests", str(args.requests)]
            argv += ["--device", args.device, "--threads", *map(str, args.threads)]
            procs.append((gpu, model, out, subprocess.Popen(argv, env=env)))
        results = []
        for gpu, model, out, proc in procs:
            proc.wait()
            try:
                (result,) = json.loads((out / "serving_soak.json").read_text())["results"]
            except (OSError, ValueError) as err:
                result = {"model": model, "error": f"exit {proc.returncode}, no results ({type(err).__name__})"}
            results.append({**result, "gpu": gpu})
    return results


if __name__ == "__main__":
    sys.exit(main())
