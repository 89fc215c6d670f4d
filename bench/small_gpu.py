"""What opening the SM gate is worth on small GPUs, emulated on a big one; and what the toolkit costs.

    python bench/small_gpu.py --out bench/results/small-gpu     # CUDA, torch >= 2.11

Parts (``--parts``, default all), each written to ``small_gpu-<part>.json`` and, together, to
``small_gpu.md``:

- ``check``: is the emulation real?  For each SM count: how many distinct SMs a 4224-program
  Triton kernel ran on (``%smid``), a 4096³ bf16 GEMM eager, compiled with a forced Triton
  template, and compiled with ``mode="max-autotune"`` (CUDA graphs asked for and kept: captured
  inside the green context); what Inductor sees (``is_big_gpu`` under torch's own 68-SM threshold,
  ``DeviceProperties``, ``get_max_num_sms``); and that everything reads the real GPU after exit.
- ``gemms``: the small-GPU table.  For N SMs emulated (and the full GPU): the GEMMs of the
  reference MLP (``Linear(3420→1280)`` at 560/1024/2048 tokens) and of a Llama-style MLP (hidden
  4096, intermediate 11008/14336; up and down projections), compiled three ways: ``gated``
  (``mode="max-autotune-no-cudagraphs"`` with torch's own gate, i.e. ATen below 68 SMs),
  ``forced`` (the same inside ``ik.force_gemm_autotune(min_sms=N)``) and ``eager``.  Median and
  IQR latency (``triton.testing.do_bench``), forced/gated speedup, compile and autotune seconds,
  the winning kernel.
- ``block``: a transformer block (``inductor_knobs.ablation.workloads.transformer_block``) end
  to end, the same three ways.
- ``overhead``: the toolkit's own cost, each a ratio measured side by side (interleaved) in this
  run: entering+leaving ``force_gemm_autotune`` vs ``torch._inductor.config.patch`` of the same
  keys; interpreter start-up with the startup ``.pth`` vs without; steady-state latency of a
  model compiled under the knobs vs the same kernels compiled without the package loaded; the
  first compile with the gate override vs a hand-written ``is_big_gpu = lambda ...: True``.

Everything runs inference (``torch.no_grad``), bf16, one process per part except where a fresh
process is the point.  Read the numbers as what an emulator gives: SM count (and, where a preset
sets it, shared memory per block) are the small GPU's; memory bandwidth, L2, clocks and the
instruction set stay the big GPU's.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
import timeit
import warnings
from pathlib import Path
from typing import Any

import torch
import triton
import triton.language as tl
from triton.testing import do_bench

import inductor_knobs as ik
from inductor_knobs.emulation.sm_view import physical_properties

MODE = "max-autotune-no-cudagraphs"
REFERENCE_TOKENS = (560, 1024, 2048)
LLAMA_TOKENS = (1, 256, 4096)


# -- helpers ---------------------------------------------------------------------------------------


def emulated(sms: int, physical: int) -> Any:
    """``ik.emulate_gpu(sms=…)``, or nothing for the full GPU."""
    return ik.emulate_gpu(sms=sms) if sms < physical else contextlib.nullcontext()


def bench_ms(fn: Any) -> dict[str, float]:
    samples = sorted(do_bench(fn, warmup=5, rep=40, return_mode="all"))
    q1, median, q3 = statistics.quantiles(samples, n=4) if len(samples) > 1 else (samples[0],) * 3
    return {"median_ms": median, "q1_ms": q1, "q3_ms": q3, "n": len(samples)}


def timed_call(fn: Any, *args: Any) -> float:
    torch.cuda.synchronize()
    start = time.perf_counter()
    with torch.no_grad():
        fn(*args)
    torch.cuda.synchronize()
    return time.perf_counter() - start


def fresh_dynamo() -> None:
    torch._dynamo.reset()
    for name in ("cache_size_limit", "recompile_limit"):
        if hasattr(torch._dynamo.config, name):
            setattr(torch._dynamo.config, name, 64)


def winner_of(records: list[Any]) -> tuple[str, float]:
    """The winning kernel (name and the template parameters that matter) and autotune seconds."""
    if not records:
        return "ATen (no autotune)", 0.0
    rec = records[-1]
    best = next((c for c in rec.choices if c.name == rec.winner), None)
    params = best.params if best else {}
    keys = ("BLOCK_M", "BLOCK_N", "BLOCK_K", "num_stages", "num_warps")
    detail = "/".join(str(params[k]) for k in keys if k in params)
    seconds = sum((r.benchmark_seconds or 0.0) + (r.precompile_seconds or 0.0) for r in records)
    return f"{rec.winner}{' ' + detail if detail else ''}", seconds


# -- check: is the emulation real? ---------------------------------------------------------------------


@triton.jit
def _smid_kernel(out_ptr, ITERS: tl.constexpr):
    pid = tl.program_id(0)
    smid = tl.inline_asm_elementwise("mov.u32 $0, %smid;", "=r,r", [pid], dtype=tl.int32, is_pure=False, pack=1)
    acc = pid
    for _ in range(ITERS):  # keep each program busy so the work spreads over every SM it may use
        acc = acc * 1664525 + 1013904223
    tl.store(out_ptr + pid, smid + (acc & 0))


def distinct_sms(physical: int) -> int:
    programs = physical * 32
    out = torch.empty(programs, dtype=torch.int32, device="cuda")
    _smid_kernel[(programs,)](out, ITERS=20000, num_warps=1)
    torch.cuda.current_stream().synchronize()
    return int(torch.unique(out).numel())


def part_check(sms_list: list[int], physical: int) -> dict[str, Any]:
    from torch._inductor import utils
    from torch._inductor.runtime.hints import DeviceProperties

    a = torch.randn(4096, 4096, device="cuda", dtype=torch.bfloat16)
    b = torch.randn(4096, 4096, device="cuda", dtype=torch.bfloat16)
    rows = []
    for sms in sms_list:
        fresh_dynamo()
        with emulated(sms, physical) as emu, warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            row: dict[str, Any] = {
                "sms": sms,
                "granted_sms": getattr(emu, "granted_sms", physical),
                "distinct_sms_used": distinct_sms(physical),
                "is_big_gpu_torch_threshold": bool(utils.is_big_gpu(0)),
                "inductor_device_properties_sms": DeviceProperties.create(torch.device("cuda", 0)).multi_processor_count,
                "inductor_get_max_num_sms": utils.get_max_num_sms(),
            }
            row["eager_ms"] = bench_ms(lambda: a @ b)["median_ms"]
            with ik.force_gemm_autotune(min_sms=1, backends="TRITON"):
                triton_mm = torch.compile(lambda x, y: x @ y, mode=MODE)
                triton_mm(a, b)
            row["compiled_triton_ms"] = bench_ms(lambda f=triton_mm: f(a, b))["median_ms"]
            graphs_mm = torch.compile(lambda x, y: (x @ y) * 2, mode="max-autotune")
            for _ in range(3):
                graphs_mm(a, b)
            row["compiled_max_autotune_mode_ms"] = bench_ms(lambda f=graphs_mm: f(a, b))["median_ms"]
            row["warnings"] = sorted({type(w.message).__name__ for w in caught})
        rows.append(row)
        print(row, flush=True)
    fresh_dynamo()
    after = {
        "get_device_properties_sms": torch.cuda.get_device_properties(0).multi_processor_count,
        "is_big_gpu": bool(utils.is_big_gpu(0)),
        "inductor_get_max_num_sms": utils.get_max_num_sms(),
        "current_stream_is_default": torch.cuda.current_stream() == torch.cuda.default_stream(),
    }
    return {"rows": rows, "after_exit": after}


# -- gemms and block: the small-GPU table ---------------------------------------------------------------


def gemm_shapes() -> list[tuple[str, int, int, int]]:
    shapes = [("reference MLP", m, 3420, 1280) for m in REFERENCE_TOKENS]
    for inter in (11008, 14336):
        shapes += [(f"Llama up {inter}", t, 4096, inter) for t in LLAMA_TOKENS]
        shapes += [(f"Llama down {inter}", t, inter, 4096) for t in LLAMA_TOKENS]
    return shapes


def run_arms(sms: int, physical: int, calls: list[tuple[str, Any, tuple[Any, ...]]], make: Any) -> list[dict[str, Any]]:
    """For each arm, compile ``make()`` and time each call; one row per (arm, call)."""
    rows = []
    with emulated(sms, physical), warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for arm in ("eager", "gated", "forced"):
            fresh_dynamo()
            fn = make() if arm == "eager" else torch.compile(make(), mode=MODE, dynamic=False)
            knobs = ik.force_gemm_autotune(min_sms=sms) if arm == "forced" else contextlib.nullcontext()
            firsts = []
            with ik.record_autotune() as rec, knobs:
                for _, _, args in calls:
                    before = len(rec.records)
                    seconds = timed_call(fn, *args)
                    firsts.append((seconds, rec.records[before:]))
            with torch.no_grad():
                for (label, shape, args), (seconds, records) in zip(calls, firsts):
                    kernel, autotune_s = winner_of(records) if arm != "eager" else ("eager", 0.0)
                    row = {"sms": sms, "arm": arm, "what": label, "shape": shape, "first_call_s": seconds}
                    row |= {"autotune_s": autotune_s, "kernel": kernel, **bench_ms(lambda f=fn, a=args: f(*a))}
                    rows.append(row)
                    print({k: row[k] for k in ("sms", "arm", "what", "shape", "median_ms", "kernel")}, flush=True)
    return rows


def part_gemms(sms_list: list[int], physical: int) -> dict[str, Any]:
    tensors = []
    for label, m, k, n in gemm_shapes():
        a = torch.randn(m, k, device="cuda", dtype=torch.bfloat16)
        b = torch.randn(k, n, device="cuda", dtype=torch.bfloat16) / k**0.5
        tensors.append((label, f"{m}x{k}x{n}", (a, b)))
    rows = []
    for sms in sms_list:
        rows += run_arms(sms, physical, tensors, lambda: lambda x, w: x @ w)
    return {"rows": rows}


def part_block(sms_list: list[int], physical: int) -> dict[str, Any]:
    from inductor_knobs.ablation import workloads

    workload = workloads.build("transformer_block", "cuda", False)
    calls = [("transformer block", "x".join(map(str, workload.inputs[0][0].shape)), workload.inputs[0])]
    rows = []
    for sms in sms_list:
        rows += run_arms(sms, physical, calls, lambda: workload.model)
    return {"rows": rows}


# -- overhead: what the toolkit costs ----------------------------------------------------------------------

# One child process: compile the reference MLP (560 tokens) with the gate opened either by the
# toolkit or by hand, report the first-compile seconds, the steady-state latency and the winner.
CHILD = r"""
import json, sys, time, torch
from triton.testing import do_bench
how = sys.argv[1]
keys = {"max_autotune_gemm": True, "max_autotune_gemm_backends": "ATEN,TRITON"}
winners = []
from torch._inductor import select_algorithm
select_algorithm.add_feedback_saver(lambda timings, name, *a: winners.append(min(timings, key=timings.get).name))
if how == "knobs":
    import inductor_knobs as ik
    ctx = ik.force_gemm_autotune(min_sms=1, backends="ATEN,TRITON")
else:
    import torch._inductor.utils as utils
    utils.is_big_gpu = lambda index_or_device=0: True
    ctx = torch._inductor.config.patch(keys)
model = torch.nn.Linear(3420, 1280, bias=False, device="cuda", dtype=torch.bfloat16)
x = torch.randn(560, 3420, device="cuda", dtype=torch.bfloat16)
compiled = torch.compile(model, mode="max-autotune-no-cudagraphs")
with torch.no_grad():
    torch.cuda.synchronize(); start = time.perf_counter()
    with ctx:
        compiled(x)
    torch.cuda.synchronize(); first = time.perf_counter() - start
    ms = do_bench(lambda: compiled(x), warmup=25, rep=200, return_mode="median")
print(json.dumps({"how": how, "first_compile_s": first, "steady_ms": ms, "winners": winners,
                  "package_loaded": "inductor_knobs" in sys.modules}))
"""


def child(how: str, cache_dir: str) -> dict[str, Any]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("INDUCTOR_KNOBS_")}
    env |= {"TORCHINDUCTOR_CACHE_DIR": os.path.join(cache_dir, "inductor"), "TRITON_CACHE_DIR": os.path.join(cache_dir, "triton")}
    if how != "knobs":  # the package must not even be importable (cwd="/" keeps the checkout off sys.path)
        env.pop("PYTHONPATH", None)
    out = subprocess.run([sys.executable, "-c", CHILD, how], env=env, capture_output=True, text=True, check=False, cwd="/")
    if out.returncode:
        raise RuntimeError(out.stderr[-3000:])
    return json.loads(out.stdout.strip().splitlines()[-1])


def ratio(numerator: list[float], denominator: list[float]) -> dict[str, Any]:
    a, b = statistics.median(numerator), statistics.median(denominator)
    return {"ratio": a / b, "median_a": a, "median_b": b, "n": len(numerator)}


def part_overhead(rounds: int) -> dict[str, Any]:
    from torch._inductor import config

    result: dict[str, Any] = {}
    # 1. enter+leave: the toolkit (validation, undo records, gate wrapper) vs torch's config.patch
    keys = {"max_autotune_gemm": True, "max_autotune_gemm_backends": "ATEN,TRITON"}
    knobs = ik.force_gemm_autotune(min_sms=1, backends="ATEN,TRITON")

    def enter_leave_knobs() -> None:
        with knobs:
            pass

    def enter_leave_patch() -> None:
        with config.patch(keys):
            pass

    ik_us, patch_us = [], []
    for _ in range(15):
        ik_us.append(min(timeit.repeat(enter_leave_knobs, number=200, repeat=3)) / 200 * 1e6)
        patch_us.append(min(timeit.repeat(enter_leave_patch, number=200, repeat=3)) / 200 * 1e6)
    result["enter_leave_us"] = ratio(ik_us, patch_us) | {"a": "force_gemm_autotune", "b": "config.patch (same keys)"}

    # 2. start-up: an interpreter whose site dir holds the startup .pth vs one whose does not
    pth = Path(__file__).resolve().parents[1] / "inductor_knobs_startup.pth"
    with tempfile.TemporaryDirectory() as with_pth, tempfile.TemporaryDirectory() as without:
        (Path(with_pth) / pth.name).write_text(pth.read_text())
        env = {k: v for k, v in os.environ.items() if not k.startswith("INDUCTOR_KNOBS_")}
        code = "import site, sys; site.addsitedir(sys.argv[1])"
        starts: dict[str, list[float]] = {"with": [], "without": []}
        for _ in range(40):
            for key, site_dir in (("with", with_pth), ("without", without)):
                t0 = time.perf_counter()
                subprocess.run([sys.executable, "-S", "-c", code, site_dir], env=env, check=True)
                starts[key].append((time.perf_counter() - t0) * 1e3)
    line = pth.read_text()
    per_start_us = min(timeit.repeat(lambda: exec(line, {}), number=2000, repeat=5)) / 2000 * 1e6
    result["startup_ms"] = ratio(starts["with"], starts["without"]) | {
        "a": "interpreter start, .pth present",
        "b": "without",
        "pth_line_us_in_process": per_start_us,
    }

    # 3 and 4: fresh processes, interleaved: knobs (cold cache) / lambda (cold cache) / lambda
    # reusing the knobs process's autotune cache (same kernels, package never loaded)
    runs: dict[str, list[dict[str, Any]]] = {"knobs": [], "lambda_cold": [], "lambda_same_kernels": []}
    for _ in range(rounds):
        with tempfile.TemporaryDirectory() as shared, tempfile.TemporaryDirectory() as own:
            runs["knobs"].append(child("knobs", shared))
            runs["lambda_cold"].append(child("lambda", own))
            runs["lambda_same_kernels"].append(child("lambda", shared))
        print({k: v[-1] for k, v in runs.items()}, flush=True)
    result["first_compile_s"] = ratio(
        [r["first_compile_s"] for r in runs["knobs"]], [r["first_compile_s"] for r in runs["lambda_cold"]]
    ) | {"a": "force_gemm_autotune", "b": "is_big_gpu = lambda: True + config.patch"}
    result["steady_state_ms"] = ratio(
        [r["steady_ms"] for r in runs["knobs"]], [r["steady_ms"] for r in runs["lambda_same_kernels"]]
    ) | {"a": "compiled under force_gemm_autotune", "b": "same kernels, package not loaded"}
    result["children"] = runs
    return result


# -- report -------------------------------------------------------------------------------------------------


def table(rows: list[dict[str, Any]]) -> str:
    """One line per (what, shape, SMs): eager/gated/forced medians with IQR, speedup, compile, kernel."""
    by_key: dict[tuple[Any, ...], dict[str, dict[str, Any]]] = {}
    for row in rows:
        by_key.setdefault((row["what"], row["shape"], row["sms"]), {})[row["arm"]] = row
    lines = [
        "| workload | M×K×N | SMs | eager ms | gated ms (IQR) | forced ms (IQR) | forced vs gated | "
        "compile s gated / forced | autotune s | gated kernel | forced kernel |",
        "|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for (what, shape, sms), arms in by_key.items():
        if not {"eager", "gated", "forced"} <= set(arms):
            continue
        e, g, f = arms["eager"], arms["gated"], arms["forced"]

        def iqr(r: dict[str, Any]) -> str:
            return f"{r['median_ms']:.4f} ({r['q1_ms']:.4f}–{r['q3_ms']:.4f})"

        overlap = not (f["q3_ms"] < g["q1_ms"] or g["q3_ms"] < f["q1_ms"])
        lines.append(
            f"| {what} | {shape} | {sms} | {e['median_ms']:.4f} | {iqr(g)} | {iqr(f)} | "
            f"{g['median_ms'] / f['median_ms']:.2f}x{' ~' if overlap else ''} | "
            f"{g['first_call_s']:.2f} / {f['first_call_s']:.2f} | {f['autotune_s']:.2f} | {g['kernel']} | {f['kernel']} |"
        )
    return "\n".join(lines)


def markdown(results: dict[str, Any]) -> str:
    env = results["environment"]
    out = [
        f"# Small-GPU emulation on {env['gpu']} ({env['sms']} SMs)",
        "",
        f"torch {env['torch']}, triton {env['triton']}, driver {env['driver']}, CUDA {env['cuda']}.",
        "",
    ]
    if "check" in results:
        out += [
            "## Is the emulation real?",
            "",
            "| SMs asked | SMs granted | distinct SMs used | is_big_gpu (68) | "
            "Inductor sees | eager 4096³ ms | Triton 4096³ ms | mode=max-autotune ms |",
            "|---|---|---|---|---|---|---|---|",
        ]
        for r in results["check"]["rows"]:
            out.append(
                f"| {r['sms']} | {r['granted_sms']} | {r['distinct_sms_used']} | {r['is_big_gpu_torch_threshold']} | "
                f"{r['inductor_device_properties_sms']} / {r['inductor_get_max_num_sms']} | {r['eager_ms']:.3f} | "
                f"{r['compiled_triton_ms']:.3f} | {r['compiled_max_autotune_mode_ms']:.3f} |"
            )
        out += ["", f"After exit: {results['check']['after_exit']}", ""]
    for part, title in (("gemms", "GEMMs"), ("block", "Transformer block end to end")):
        if part in results:
            out += [f"## {title}", "", table(results[part]["rows"]), ""]
    if "overhead" in results:
        o = results["overhead"]
        out += [
            "## What the toolkit costs (ratios a/b, medians, interleaved)",
            "",
            "| what | a | b | a | b | a/b |",
            "|---|---|---|---|---|---|",
        ]
        for key, unit in (("enter_leave_us", "µs"), ("startup_ms", "ms"), ("first_compile_s", "s"), ("steady_state_ms", "ms")):
            r = o[key]
            out.append(
                f"| {key} | {r['a']} | {r['b']} | {r['median_a']:.4g} {unit} | {r['median_b']:.4g} {unit} | {r['ratio']:.3f} |"
            )
        out += [
            "",
            f"The .pth line itself: {o['startup_ms']['pth_line_us_in_process']:.2f} µs per start (in-process timeit).",
            "",
        ]
    return "\n".join(out)


def environment() -> dict[str, Any]:
    props = physical_properties(0)
    driver = "unknown"
    with contextlib.suppress(Exception):
        driver = subprocess.run(
            ["nvidia-smi", "--query-gpu=driver_version", "--format=csv,noheader"], capture_output=True, text=True, check=True
        ).stdout.strip()
    return {
        "gpu": props.name,
        "sms": props.multi_processor_count,
        "torch": torch.__version__,
        "triton": triton.__version__,
        "cuda": torch.version.cuda,
        "driver": driver,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--out", default="small-gpu")
    parser.add_argument("--parts", default="check,gemms,block,overhead")
    parser.add_argument("--sms", default="24,40,46,58", help="SM counts to emulate (the full GPU is always added)")
    parser.add_argument("--rounds", type=int, default=3, help="fresh-process rounds for the overhead part")
    parser.add_argument("--no-full", action="store_true", help="leave out the full-GPU column (when splitting a run)")
    parser.add_argument("--tag", default="", help="suffix of the JSON file names (when splitting a run)")
    parser.add_argument("--report", action="store_true", help="only rebuild small_gpu.md from the JSON files in --out")
    args = parser.parse_args()
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    parts = [p for p in args.parts.split(",") if p]
    if not args.report:
        physical = physical_properties(0).multi_processor_count
        sms_list = [int(s) for s in args.sms.split(",") if s]
        columns = sms_list if args.no_full else [*sms_list, physical]
        runners = {
            "check": lambda: part_check(columns, physical),
            "gemms": lambda: part_gemms(columns, physical),
            "block": lambda: part_block(columns, physical),
            "overhead": lambda: part_overhead(args.rounds),
        }
        for part in parts:
            started = time.perf_counter()
            data = {"environment": environment(), part: runners[part](), "seconds": time.perf_counter() - started}
            (out / f"small_gpu-{part}{args.tag}.json").write_text(json.dumps(data, indent=1, default=str))
    merged: dict[str, Any] = {}
    for path in sorted(out.glob("small_gpu-*.json")):
        data = json.loads(path.read_text())
        for key in ("gemms", "block"):  # a run split by --sms/--tag: put the rows together
            if key in data and key in merged:
                data[key]["rows"] = merged[key]["rows"] + data[key]["rows"]
        merged |= data
    (out / "small_gpu.md").write_text(markdown(merged))
    print(markdown(merged))


if __name__ == "__main__":
    with torch.no_grad():
        main()
