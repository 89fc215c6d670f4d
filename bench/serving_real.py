"""Serving real models at random sequence lengths: what each request costs, and why the slow ones are slow.

    python bench/serving_real.py --out results/serving-real      # needs a CUDA GPU and transformers

Models (random weights from configs, no downloads), bf16, inference (``torch.no_grad``),
``mode="max-autotune-no-cudagraphs"``, ``dynamic=True``:

- ``llama``: HF ``LlamaForCausalLM``, hidden 1024, intermediate 2816, 2 layers, 8 heads, 4 KV heads,
  ``use_cache=False`` (the case of issue 21);
- ``bert``: HF ``BertModel`` with BERT-base's config (12 layers, hidden 768).

Arms, each in its own process (the cuDNN SDPA plan cache is per process), all serving the same 200
random lengths in [128, 2048] (seeded) through ``ik.serving.no_stalls(on="record")``, which times every
request and names each stall's causes:

1. ``plain``: ``torch.compile``, no warmup;
2. ``warmup-guard``: ``ik.compile``, ``ik.serving.warmup`` over 128, 512, 1024, 2048 (its probes at unseen
   lengths measure what is still cold), then traffic with the warmup's steady state as baseline;
3. ``warmup-fix``: the same warmup, then the fixes its reports recommend: padding to its
   ``recommended_buckets``, which are warmed; where that warm-up finds the steady call host-bound
   (``host_share`` >= 0.8), one CUDA graph per bucket (``ik.serving.capture_cuda_graphs``), warmed again
   for its steady state; ``gc.freeze()`` where a collection paused warm-up; then traffic.

Arms of one model share an Inductor cache directory, the first arm filling it (compile time is not
what this measures; the per-process costs after the compile are).  The ``warmup-fix`` process also
measures the guard's overhead per call at a warm shape, side by side (see :func:`overhead`): 1,000
cycles of one plain call of what is served (``f(x); torch.cuda.synchronize()``), one plain call with
the C synchronize the guard uses, and one guarded call, in a random order per cycle; the median over cycles of each
difference, with a 95% percentile-bootstrap interval (``scipy.stats.bootstrap``; the cycle is the
unit of replication); the installed hooks' cost from rounds outside vs inside the guard's block;
a cProfile of plain and guarded calls; and the guard's own Python on this host, without a GPU (a
no-op callable, no synchronize: guarded minus plain per call, median of 7 rounds of 20,000 calls).

Writes ``serving_real.json`` and ``serving_real.md`` under ``--out``.
"""

from __future__ import annotations

import argparse
import cProfile
import gc
import io
import json
import os
import pstats
import random
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

MODELS = ("llama", "bert")
ARMS = ("plain", "warmup-guard", "warmup-fix")
WARM_LENGTHS = (128, 512, 1024, 2048)
LOW, HIGH = 128, 2048
DEVICE = "cuda"  # --device cpu: a smoke run of the whole flow on a machine without a GPU (fp32, tiny models)


def build(model: str):
    import torch
    from transformers import BertConfig, BertModel, LlamaConfig, LlamaForCausalLM

    torch.manual_seed(0)
    tiny = DEVICE == "cpu"
    if model == "llama":
        config = LlamaConfig(
            hidden_size=64 if tiny else 1024,
            intermediate_size=176 if tiny else 2816,
            num_hidden_layers=2,
            num_attention_heads=8,
            num_key_value_heads=4,
            vocab_size=32000,
            use_cache=False,
        )
    else:
        size = {"hidden_size": 64, "num_hidden_layers": 2, "num_attention_heads": 4, "intermediate_size": 128} if tiny else {}
        config = BertConfig(max_position_embeddings=HIGH, **size)  # 512 by default
    # Weights are made where they serve (as a server loads a checkpoint straight onto its GPU): a random
    # initialisation on the CPU took 2-3 s of a 20 s cold start on an H200 host.
    with torch.device(DEVICE):
        net = LlamaForCausalLM(config) if model == "llama" else BertModel(config, add_pooling_layer=False)
    return net.to(DEVICE, torch.float32 if tiny else torch.bfloat16).eval()


def make_inputs(model: str, length: int, buckets: tuple[int, ...] | None, seed: int) -> dict:
    """Token ids (and, padded, an attention mask hiding the padding) for one request of ``length`` tokens."""
    import torch

    import inductor_knobs as ik

    generator = torch.Generator().manual_seed(seed)
    ids = torch.randint(1, 30000, (1, length), generator=generator).to(DEVICE)
    if buckets is None:
        return {"input_ids": ids}
    mask = torch.ones_like(ids)
    # Right-padding: exact for the causal Llama; BERT needs the mask to hide the padded positions.
    inputs = {
        "input_ids": ik.serving.pad_to_bucket(ids, buckets, dim=1),
        "attention_mask": ik.serving.pad_to_bucket(mask, buckets, dim=1),
    }
    if model == "llama":
        inputs.pop("attention_mask")
    return inputs


def run_arm(model: str, arm: str, requests: int) -> dict:
    import torch

    import inductor_knobs as ik

    net = build(model)
    lengths = random.Random(21).choices(range(LOW, HIGH + 1), k=requests)
    started = time.perf_counter()
    report = warmed = None
    buckets = None
    gc_frozen = False
    graphs = 0  # CUDA graphs captured (one per bucket), 0: the compiled model serves
    host_share = None  # the bucket warm-up's host share of a steady call
    with torch.no_grad():
        if arm == "plain":
            compiled = torch.compile(net, mode="max-autotune-no-cudagraphs", dynamic=True)
            baseline = None
        else:
            compiled = ik.compile(net, mode="max-autotune-no-cudagraphs", dynamic=True)
            report = ik.serving.warmup(compiled, shapes=list(WARM_LENGTHS), factory=lambda n: make_inputs(model, n, None, n))
            warmed = report
            if arm == "warmup-fix" and report.recommended_buckets:
                buckets = report.recommended_buckets
                padded = lambda n: make_inputs(model, n, buckets, n)  # noqa: E731
                warmed = ik.serving.warmup(compiled, shapes=list(buckets), factory=padded, probes=None)
                host_share = warmed.host_share
                if any("capture_cuda_graphs" in fix for fix in warmed.fixes):
                    compiled = ik.serving.capture_cuda_graphs(compiled, shapes=list(buckets), factory=padded)
                    graphs = len(compiled.shapes)
                    warmed = ik.serving.warmup(compiled, shapes=list(buckets), factory=padded, probes=None)
            if arm == "warmup-fix" and any("gc.freeze()" in fix for fix in report.fixes + warmed.fixes):
                gc_frozen = True
                gc.collect()
                gc.freeze()
            baseline = warmed.steady_state_ms
        setup_seconds = time.perf_counter() - started
        # Seeded with the warm-up's shapes and steady state: the sampled profiler skips warmed shapes.
        guard = ik.serving.no_stalls(compiled, on="record", warmup=warmed if arm != "plain" else None, history=None)
        with guard:
            for i, n in enumerate(lengths):
                guard(**make_inputs(model, n, buckets, 1000 + i))
        out = {
            "model": model,
            "arm": arm,
            "setup_seconds": setup_seconds,
            "lengths": lengths,
            "buckets": list(buckets) if buckets else None,
            "gc_frozen": gc_frozen,
            "cuda_graphs": graphs,
            "host_share_before_graphs": host_share,
            "replays": getattr(compiled, "replays", None),
            "misses": getattr(compiled, "misses", None),
            "baseline_ms": baseline,
            "guard": guard.report().to_dict(),
            "seconds": guard.seconds,  # every request's wall seconds, in order (lengths above)
            "bucket_warmup": warmed.to_dict() if warmed is not report else None,
            "guard_table": guard.report().table(),
            "warmup": report.to_dict() if report is not None else None,
            "warmup_table": report.table() if report is not None else None,
        }
        if buckets:
            out["own_shape_ratio"] = own_shape_ratio(lengths, guard.seconds, buckets)
        if arm == "warmup-fix":
            out["overhead"] = overhead(compiled, make_inputs(model, WARM_LENGTHS[1], buckets, 7))
    return out


def own_shape_ratio(lengths: list[int], seconds: list[float], buckets: tuple[int, ...]) -> dict:
    """p50/p99/max of each request's time over the median time of its bucket in this run.

    A model whose cost grows with the length (BERT at 2048 tokens takes twice its time at 1,100) has
    a p99/p50 near 2 with no stall at all; this ratio compares each request with its own shape's steady time.
    """
    import bisect

    per_bucket: dict[int, list[float]] = {}
    owner = [buckets[bisect.bisect_left(buckets, n)] for n in lengths]
    for bucket, value in zip(owner, seconds):
        per_bucket.setdefault(bucket, []).append(value)
    medians = {bucket: statistics.median(values) for bucket, values in per_bucket.items()}
    ratios = sorted(value / medians[bucket] for bucket, value in zip(owner, seconds))
    cuts = statistics.quantiles(ratios, n=100, method="inclusive")
    return {"p50": statistics.median(ratios), "p99": cuts[98], "max": ratios[-1]}


def overhead(compiled, inputs: dict, cycles: int = 1000, rounds: int = 41, calls: int = 20) -> dict:
    """The guard's cost per call at a warm shape, side by side in one process.

    Per call: ``cycles`` cycles inside ``with guard:``, each one call of every arm in a random order;
    per arm the median over cycles of (arm - plain) with a 95% percentile-bootstrap interval (the
    cycle is the unit of replication).  Arms: ``plain`` (``f(x); torch.cuda.synchronize()``, what a
    user writes), ``plain-c-sync`` (``f(x)`` and the C synchronize the guard calls, which skips
    ``torch.cuda.synchronize``'s Python) and ``guarded`` (``guard(x)``).  The hooks: ``rounds``
    alternating rounds of ``calls`` plain calls outside and inside the guard's block (installing the
    hooks is not per call, so they are compared round by round; the round is the unit).
    """
    import torch

    import inductor_knobs as ik

    c_sync = getattr(torch._C, "_cuda_synchronize", None) if DEVICE == "cuda" else None

    # Every arm holds the output until its clock stops, as a server that then reads it does: freeing
    # a model's output (a logits tensor, its ModelOutput) costs microseconds too, and an arm that freed
    # it before synchronising would hide that cost under the GPU's work while the guard's arm pays it.
    def plain() -> float:
        start = time.perf_counter()
        out = compiled(**inputs)
        if DEVICE == "cuda":
            torch.cuda.synchronize()
        seconds = time.perf_counter() - start
        del out
        return seconds

    def plain_c_sync() -> float:
        start = time.perf_counter()
        out = compiled(**inputs)
        if c_sync is not None:
            c_sync()
        seconds = time.perf_counter() - start
        del out
        return seconds

    guard = ik.serving.no_stalls(compiled, on="record")
    own: list[float] = []  # per guarded call: its wall time less what the guard timed (paired, same call)

    def guarded() -> float:
        start = time.perf_counter()
        out = guard(**inputs)
        outer = time.perf_counter() - start
        del out
        own.append(outer - guard.seconds[-1])
        return outer

    arms = {"plain": plain, "plain-c-sync": plain_c_sync, "guarded": guarded}
    times: dict[str, list[float]] = {name: [] for name in arms}
    order = random.Random(0)
    with guard:
        for _ in range(50):  # the guard learns the shape (and profiles its first call) before the cycles
            guarded()
        own.clear()
        for _ in range(cycles):
            names = list(arms)
            order.shuffle(names)
            for name in names:
                times[name].append(arms[name]())
    stalls_during = len(guard.stalls)
    outside, inside = [], []
    for r in range(rounds):
        for where in ("outside", "inside") if r % 2 == 0 else ("inside", "outside"):
            if where == "inside":
                with guard:
                    inside.append(statistics.median(plain() for _ in range(calls)))
            else:
                outside.append(statistics.median(plain() for _ in range(calls)))
    profiles = {}
    for name, fn in (("plain", plain), ("guarded", guarded)):
        profiler = cProfile.Profile()
        with guard:
            profiler.runcall(lambda fn=fn: [fn() for _ in range(200)])
        text = io.StringIO()
        pstats.Stats(profiler, stream=text).sort_stats("tottime").print_stats(12)
        profiles[name] = text.getvalue()
    out = {
        "cycles": cycles,
        "plain_ms_median": 1000 * statistics.median(times["plain"]),
        "plain_c_sync_ms_median": 1000 * statistics.median(times["plain-c-sync"]),
        "guarded_ms_median": 1000 * statistics.median(times["guarded"]),
        # The guard's Python around the call (signature, clocks, bookkeeping), measured on the same call.
        "guard_own_us_median": 1e6 * statistics.median(own),
        "stalls_during": stalls_during,
        "hooks_rounds": rounds,
        "hooks_calls_per_round": calls,
        "cprofile_200_calls": profiles,  # where the time went, plain and guarded (tottime order)
        "guard_own_noop_us": _guard_on_a_noop(inputs),
    }
    pairs = (("guarded", "plain"), ("guarded", "plain-c-sync"), ("plain-c-sync", "plain"))
    for name, reference in pairs:
        diffs = [1e6 * (a - b) for a, b in zip(times[name], times[reference])]
        key = f"{name}_vs_{reference}".replace("-", "_")
        out[f"{key}_us_median"] = statistics.median(diffs)
        out[f"{key}_us_ci95"] = _interval(diffs)
    hooks = [1e6 * (a - b) for a, b in zip(inside, outside)]
    out["hooks_us_median"] = statistics.median(hooks)
    out["hooks_us_ci95"] = _interval(hooks)
    return out


def _guard_on_a_noop(inputs: dict, rounds: int = 7, calls: int = 20_000) -> float:
    """The guard's own Python per call on this host: guarded minus plain calls of a no-op (no GPU, no synchronize)."""
    import inductor_knobs as ik

    def noop(**kwargs):
        return None

    guard = ik.serving.no_stalls(noop, on="record", synchronize=False, profile="off")

    def per_call(fn) -> float:
        start = time.perf_counter()
        for _ in range(calls):
            fn(**inputs)
        return (time.perf_counter() - start) / calls

    with guard:
        for _ in range(100):
            guard(**inputs)
        return 1e6 * statistics.median(per_call(guard) - per_call(noop) for _ in range(rounds))


def _interval(values: list[float]) -> list[float]:
    """95% percentile-bootstrap interval of the median (scipy); NaNs without scipy."""
    try:
        from scipy import stats
    except ImportError:  # the interval needs scipy; the medians do not, so a run without it keeps them
        return [float("nan"), float("nan")]
    ci = stats.bootstrap((values,), statistics.median, confidence_level=0.95, method="percentile", random_state=0)
    return [float(ci.confidence_interval.low), float(ci.confidence_interval.high)]


def environment() -> dict:
    import torch
    import transformers

    try:
        import triton

        triton_version = triton.__version__
    except ImportError:
        triton_version = None
    try:
        driver = subprocess.run(
            ["nvidia-smi", "--query-gpu=driver_version", "--format=csv,noheader"], capture_output=True, text=True, check=False
        ).stdout.strip()
    except OSError:
        driver = None
    return {
        "gpu": torch.cuda.get_device_name() if DEVICE == "cuda" else "CPU (smoke run)",
        "sms": torch.cuda.get_device_properties(0).multi_processor_count if DEVICE == "cuda" else None,
        "driver": driver,
        "torch": torch.__version__,
        "triton": triton_version,
        "transformers": transformers.__version__,
        "cudnn": torch.backends.cudnn.version(),
    }


def markdown(results: list[dict], env: dict) -> str:
    lines = [
        f"{env['gpu']} ({env['sms']} SMs), driver {env['driver']}, torch {env['torch']}, triton {env['triton']}, "
        f"transformers {env['transformers']}, cuDNN {env['cudnn']}",
        "",
        "| model | arm | p50 ms | p99 ms | max ms | p99/p50 | max/p50 | stalls | unattributed | causes (stalls, total ms) |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in results:
        g = r["guard"]
        causes = ", ".join(f"{k} ({v['stalls']}, {1000 * v['seconds']:.0f})" for k, v in g["by_cause"].items()) or "-"
        lines.append(
            f"| {r['model']} | {r['arm']} | {g['p50_ms']:.2f} | {g['p99_ms']:.2f} | {g['max_ms']:.2f} | "
            f"{g['p99_ms'] / g['p50_ms']:.2f} | {g['max_ms'] / g['p50_ms']:.2f} | {len(g['stalls'])} | "
            f"{g['unattributed']} | {causes} |"
        )
    for r in results:
        if r.get("own_shape_ratio"):
            ratio = r["own_shape_ratio"]
            graphs = f"{r['cuda_graphs']} CUDA graphs, one per bucket" if r.get("cuda_graphs") else "no CUDA graphs"
            share = r.get("host_share_before_graphs")
            share_text = f", host share of a steady call before them {share:.2f}" if share is not None else ""
            lines.append(
                f"\n{r['model']} / {r['arm']}: {graphs}{share_text}; each request over its own bucket's median: "
                f"p99 {ratio['p99']:.2f}x, max {ratio['max']:.2f}x"
            )
    for r in results:
        o = r.get("overhead")
        if o:
            ci = {k: f"[{o[k][0]:.1f}, {o[k][1]:.1f}]" for k in o if k.endswith("_ci95")}
            lines.append(
                f"\nGuard overhead ({r['model']}, warm shape, {o['cycles']} cycles of one call per arm in random order, "
                f"median of per-cycle differences, 95% bootstrap interval): plain {o['plain_ms_median']:.3f} ms; "
                f"guarded - plain {o['guarded_vs_plain_us_median']:.1f} us {ci['guarded_vs_plain_us_ci95']} "
                f"({100 * o['guarded_vs_plain_us_median'] / (1000 * o['plain_ms_median']):.2f}% of the plain call); "
                f"guarded - plain with the C synchronize {o['guarded_vs_plain_c_sync_us_median']:.1f} us "
                f"{ci['guarded_vs_plain_c_sync_us_ci95']} (the guard's own cost); the guard's Python on a no-op callable "
                f"(this host's CPU, no GPU) {o['guard_own_noop_us']:.1f} us; the C synchronize - "
                f"torch.cuda.synchronize() {o['plain_c_sync_vs_plain_us_median']:.1f} us {ci['plain_c_sync_vs_plain_us_ci95']}; "
                f"the guard's Python around each call {o['guard_own_us_median']:.1f} us (paired); hooks installed "
                f"(plain calls inside vs outside the block, {o['hooks_rounds']} rounds of {o['hooks_calls_per_round']}) "
                f"{o['hooks_us_median']:.1f} us {ci['hooks_us_ci95']}; {o['stalls_during']} stalls during the cycles"
            )
    for r in results:
        if r.get("warmup_table"):
            lines += ["", f"### {r['model']} / {r['arm']}: ik.serving.warmup report", "```", r["warmup_table"], "```"]
        lines += ["", f"### {r['model']} / {r['arm']}: guard", "```", r["guard_table"], "```"]
    return "\n".join(lines) + "\n"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--out", required=True)
    parser.add_argument("--models", nargs="+", default=list(MODELS), choices=MODELS)
    parser.add_argument("--arms", nargs="+", default=list(ARMS), choices=ARMS)
    parser.add_argument("--requests", type=int, default=200)
    parser.add_argument("--device", default="cuda", choices=("cuda", "cpu"))
    parser.add_argument("--one", nargs=2, metavar=("MODEL", "ARM"), help=argparse.SUPPRESS)  # a worker process
    args = parser.parse_args()
    global DEVICE
    DEVICE = args.device
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    if args.one:
        result = run_arm(args.one[0], args.one[1], args.requests)
        (out / f"{args.one[0]}-{args.one[1]}.json").write_text(json.dumps(result, indent=1, default=str))
        return 0
    env = environment()
    results = []
    for model in args.models:
        cache = tempfile.mkdtemp(prefix=f"serving-real-{model}-")
        for arm in args.arms:
            started = time.perf_counter()
            worker_env = {**os.environ, "TORCHINDUCTOR_CACHE_DIR": cache, "PYTHONUNBUFFERED": "1"}
            cmd = [sys.executable, __file__, "--out", str(out), "--requests", str(args.requests), "--device", DEVICE]
            cmd += ["--one", model, arm]
            done = subprocess.run(cmd, env=worker_env, check=False)
            print(f"{model} {arm}: exit {done.returncode}, {time.perf_counter() - started:.0f} s", flush=True)
            path = out / f"{model}-{arm}.json"
            if done.returncode == 0 and path.exists():
                results.append(json.loads(path.read_text()))
    (out / "serving_real.json").write_text(json.dumps({"environment": env, "arms": results}, indent=1, default=str))
    text = markdown(results, env)
    (out / "serving_real.md").write_text(text)
    print(text.split("\n### ")[0])
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
