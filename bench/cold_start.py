"""Cold start of a serving process: time to first request, plain cold vs torch's caches warm vs a serving bundle (issue 32).

    python bench/cold_start.py --out DIR                         # both models, one after the other, on one GPU
    CUDA_VISIBLE_DEVICES=0 python bench/cold_start.py --models llama --out DIR/llama &
    CUDA_VISIBLE_DEVICES=1 python bench/cold_start.py --models bert --out DIR/bert &   # two GPUs in parallel
    python bench/cold_start.py --device cpu --out /tmp/cs         # a smoke run of the whole flow, tiny models

Models: ``bench/serving_real.py``'s (random weights from configs, no downloads; its ``build`` and
``make_inputs``): the 2-layer Llama and BERT-base, bf16, inference (``torch.no_grad()``).  The recipe is
serving_real's ``warmup-fix`` arm: ``mode="max-autotune-no-cudagraphs"``, ``dynamic=True``, requests
right-padded to the 16 buckets of 128 tokens that its warm-up recommends (``ik.serving.suggest_buckets(128, 2048)``),
one CUDA graph per bucket (``ik.serving.capture_cuda_graphs``), a warm-up of what is served for the guard's
baselines, ``gc.freeze()``.  Unlike serving_real it does not first warm the unpadded lengths to find
the buckets (they are known): for BERT that would compile a second graph (no attention mask) that
nothing serves.

Arms, each in its own fresh process (the parent takes the time just before it starts the process):

- ``cold``: empty ``TORCHINDUCTOR_CACHE_DIR`` and ``TRITON_CACHE_DIR`` (fresh directories: a warm
  ``~/.triton`` or ``/tmp/torchinductor_$USER`` from an earlier run cannot help); the recipe, then the
  traffic; then it saves the serving bundle and the AOT bundle (``ik.serving.save_serving_bundle``, after the measurement);
- ``warm-caches``: the same recipe in a new process on ``cold``'s cache directories: what torch's own
  caches give on the same machine for free;
- ``bundle``: new empty cache directories, as on a new host; ``ik.serving.load_serving_bundle`` of ``cold``'s
  bundle, then the traffic;
- ``aot``: new empty cache directories; ``ik.serving.load_serving_bundle(path, None, ...)`` of the AOT bundle
  (``aot=True``: an AOTInductor package of the model, its weights included) that ``cold`` also built
  after its measurement: no model build and no model code (only ``transformers.modeling_outputs``, whose
  classes the package's output spec names), no Dynamo, no compile; then the traffic.

Measured per arm: time to first request (from the parent's spawn to the first response: interpreter,
imports, model build, compile or load, warm-up, capture, ``gc.freeze``, the request), that setup broken
down, and p50/p99 of the first ``--requests`` (200) requests (seeded random lengths in [128, 2048],
padded), each timed by ``ik.serving.no_stalls`` (CUDA synchronised).  What was compiled, autotuned,
Triton-compiled and captured: during setup from a ``ColdStartRecorder`` (``ik.serving.load_serving_bundle``'s
proof in ``bundle``; Inductor compiles by cache hit or miss from the attestations, torch's cache
counters, autotune benchmarks, Triton compiles from Triton's listener, captures), during traffic from a
second recorder and the guard's stalls by cause; and the kernel directories each arm added to its Triton
cache directory (in ``cold`` every Triton compile, in Inductor's compile workers too, which Triton's
listener in the serving process does not hear; in ``bundle`` the FX graph cache's Triton bundle writing
the cubins it carries, not compiles).

GPU budget (the lead's ~10 GPU-minutes): per model ``cold`` is the compile torch pays anyway (Llama's
plain first request took 131 s on an H100, BERT-base's 201 s), ``warm-caches`` ~20-40 s, ``bundle``
~10-20 s, plus ~5 s of imports per process: about 3 min (Llama) and 4-5 min (BERT).  Run the two models
on two GPUs of one host in parallel (each pinned to half the CPUs with ``taskset``: the ``cold`` arm's
compile workers use them): about 5 minutes of wall time.  Cheaper than serving_real: no unpadded warm-up,
no probes, no overhead cycles; the traffic is 200 requests of about a millisecond.

Writes ``cold_start.json`` and ``cold_start.md`` under ``--out`` (the bundle and caches live in a
temporary directory, removed at the end unless ``--keep``).
"""

from __future__ import annotations

import argparse
import faulthandler
import gc
import json
import os
import random
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

STARTED = time.time()  # this process's Python is up; the parent's spawn time comes in COLD_START_SPAWNED

sys.path.insert(0, str(Path(__file__).resolve().parent))
import serving_real as real  # noqa: E402 - a sibling script (its top level imports only the standard library)

ARMS = ("cold", "aot", "bundle", "warm-caches")
MODE = "max-autotune-no-cudagraphs"
#: Sequence lengths of the traffic, and the range the buckets cover: serving_real's on a GPU, tiny on a CPU.
RANGE = {"cuda": (128, 2048), "cpu": (16, 128)}
#: Setup phases, in the order a process goes through them (absent ones are 0).
PHASES = (
    "interpreter",
    "import",
    "build",
    "check",
    "restore_triton",
    "load_artifacts",
    "load_package",
    "compile",
    "warmup",
    "capture",
    "warmup_graphs",
    "gc_freeze",
)


def bucket_sizes(ik, device: str) -> tuple[int, ...]:
    low, high = RANGE[device]
    return ik.serving.suggest_buckets(low, high) if device == "cuda" else ik.serving.suggest_buckets(low, high, count=4)


def run_arm(model: str, arm: str, bundle: Path, requests: int, device: str) -> dict:
    """One arm in this (fresh) process; returns what it measured."""
    spawned = float(os.environ["COLD_START_SPAWNED"])
    phases = {"interpreter": STARTED - spawned}
    faulthandler.enable()  # a fatal signal (SIGSEGV) prints every thread's Python stack
    if arm in ("aot", "bundle"):  # seconds, not minutes: every 20 s every thread's stack to the log says where it stands
        faulthandler.dump_traceback_later(20, repeat=True)
    started = time.time()
    import torch

    # Imported here so that its import is timed with torch's.  The aot arm imports no model library: the package
    # holds the model, and the load imports the module of its output classes (transformers.modeling_outputs, which
    # registers CausalLMOutputWithPast ... with torch's pytree), which its header names.
    if arm != "aot":
        import transformers  # noqa: F401

    import inductor_knobs as ik
    from inductor_knobs.serving.cold_start import ColdStartRecorder

    phases["import"] = time.time() - started
    real.DEVICE = device
    started = time.time()
    net = real.build(model) if arm != "aot" else None
    if device == "cuda" and net is not None:
        torch.cuda.synchronize()
    phases["build"] = time.time() - started
    buckets = bucket_sizes(ik, device)

    def factory(n: int) -> dict:
        return real.make_inputs(model, n, buckets, n)

    with torch.no_grad():
        if arm in ("bundle", "aot"):
            started = time.time()
            path = aot_path(bundle) if net is None else bundle
            loaded = ik.serving.load_serving_bundle(path, net, factory=factory, on_cold="warn", on="record")
            total = time.time() - started
            served, guard, setup = loaded.served, loaded.guard, loaded.proof
            assert loaded.buckets == tuple(buckets), (loaded.buckets, buckets)
            phases.update(setup.seconds)
            phases["check"] = total - sum(setup.seconds.values())  # read, sha256s, identity, ik.compile's checks
        else:
            with ColdStartRecorder() as recorder:
                compiled = ik.compile(net, mode=MODE, dynamic=True)
                started = time.time()
                warmed = ik.serving.warmup(compiled, shapes=list(buckets), factory=factory, probes=None)
                phases["compile"] = warmed.steps[0].first_call_seconds  # Dynamo, Inductor (or its caches), autotune
                phases["warmup"] = time.time() - started - phases["compile"]
                served = compiled
                if device == "cuda":
                    started = time.time()
                    served = ik.serving.capture_cuda_graphs(compiled, shapes=list(buckets), factory=factory)
                    phases["capture"] = time.time() - started
                    started = time.time()
                    warmed = ik.serving.warmup(served, shapes=list(buckets), factory=factory, probes=None)
                    phases["warmup_graphs"] = time.time() - started
            setup = recorder.proof()
            guard = ik.serving.no_stalls(served, on="record", warmup=warmed, history=None)
        started = time.time()
        gc.collect()
        gc.freeze()
        phases["gc_freeze"] = time.time() - started
        low, high = RANGE[device]
        lengths = random.Random(21).choices(range(low, high + 1), k=requests)
        first_response = None
        with ColdStartRecorder() as traffic, guard:
            for i, n in enumerate(lengths):
                guard(**real.make_inputs(model, n, buckets, 1000 + i))
                if first_response is None:
                    first_response = time.time()
        saved = None
        if arm == "cold":
            started = time.time()
            header = ik.serving.save_serving_bundle(bundle, served, warmed, buckets=buckets)
            saved = {
                "seconds": time.time() - started,
                "bytes": bundle.stat().st_size,
                "artifacts": header["artifacts"],
                "triton_kernels": {k: v for k, v in header["serving"]["triton_kernels"].items() if k != "kernels"},
            }
            started = time.time()
            try:  # after the cold measurement: a model torch.export refuses must not lose it
                aot = ik.serving.save_serving_bundle(aot_path(bundle), served, warmed, buckets=buckets, aot=True, factory=factory)
                built = aot["serving"]["aot"]
                saved["aot"] = {"seconds": time.time() - started, "bytes": aot_path(bundle).stat().st_size}
                saved["aot"].update(steps=built.get("seconds"), pinned=built.get("pinned"), cxx=built.get("cxx"))
            except ik.errors.KnobsError as err:
                saved["aot"] = {"seconds": time.time() - started, "bytes": 0, "error": str(err)[-2000:]}
    seconds = guard.seconds
    return {
        "model": model,
        "arm": arm,
        "time_to_first_request_s": first_response - spawned,
        "phases": phases,
        "first_request_ms": 1000 * seconds[0],
        "package": os.path.dirname(ik.__file__),  # which inductor_knobs ran (--aot-tree)
        "requests": summary(seconds),
        "setup": named(setup),
        "traffic": {**named(traffic.proof()), "stalls": guard.report().to_dict()["by_cause"], "stall_count": guard.stall_count},
        "setup_proof": setup.to_dict(),
        "guard_table": guard.report().table(),
        "cuda_graphs": len(getattr(served, "shapes", ())),
        "bundle": saved,
        "tuned_kernels": tuned_kernels(),
    }


def aot_path(bundle: Path) -> Path:
    """Where the cold arm writes the AOT bundle (``aot=True``) beside the bundle of torch's caches."""
    return bundle.with_name(bundle.stem + "-aot.bundle")


def tuned_kernels() -> list[dict]:
    """Every loaded Triton kernel with more than one compiled config or a coordinate-descent result: its configs,
    its launchers' Triton cache keys and what torch's autotune cache said (which config a process compiles after
    loading a cached graph, and whether another process compiled the same binary)."""
    codecache = sys.modules.get("torch._inductor.codecache")
    found = []
    for module in list(getattr(getattr(codecache, "PyCodeCache", None), "modules", ())):
        for name, value in list(vars(module).items()):
            results = getattr(value, "compile_results", None)
            launchers = getattr(value, "launchers", None)
            if launchers is None or not hasattr(value, "autotune_cache_info"):
                continue
            coordesc = any(getattr(getattr(x, "config", None), "found_by_coordesc", False) for x in launchers)
            if len(results or ()) <= 1 and not coordesc and len(launchers) <= 1:
                continue
            found.append(
                {
                    "kernel": name,
                    "compiled_configs": [str(getattr(r, "config", r)) for r in results or ()],
                    "launchers": [
                        {
                            "config": str(x.config),
                            "found_by_coordesc": getattr(x.config, "found_by_coordesc", False),
                            "cache_hash": getattr(x, "cache_hash", None),
                        }
                        for x in launchers
                    ],
                    "autotune_cache_info": {k: str(v) for k, v in (getattr(value, "autotune_cache_info", None) or {}).items()},
                }
            )
    return found


def summary(seconds: list[float]) -> dict:
    ms = sorted(1000 * s for s in seconds)
    p99 = statistics.quantiles(ms, n=100, method="inclusive")[98] if len(ms) > 1 else ms[0]
    p50 = statistics.median(ms)
    return {"count": len(ms), "p50_ms": p50, "p99_ms": p99, "max_ms": ms[-1], "p99_over_p50": p99 / p50}


def named(proof) -> dict:
    """What a recorder heard, as counts."""
    return {
        "dynamo_compiles": len(proof.dynamo_compiles),
        "inductor_compiles": len(proof.attestations),
        "inductor_hits": proof.inductor_hits,
        "inductor_compiled": len(proof.inductor_compiled),
        "autotune_benchmarks": proof.autotune_benchmarks,
        "triton_compiled": proof.triton_compiled,
        "triton_cache_hits": None if proof.triton is None else proof.triton[1],
        "triton_loads": sum(e.kind == "triton_load" for e in proof.runtime),
        "triton_kernels_restored": proof.triton_kernels_restored,
        "captures": proof.captures,
        "cold": proof.cold(),
    }


def kernel_dirs(triton_cache: Path) -> set[str]:
    """Triton's kernel directories (one per compiled kernel; ``tmp.*`` are the bundle's writes in progress)."""
    if not triton_cache.is_dir():
        return set()
    return {p.name for p in triton_cache.rglob("*") if p.is_dir() and not p.name.startswith("tmp.") and any(p.glob("*.json"))}


def private_directory() -> Path:
    """A fresh 0700 directory whose every ancestor passes the bundle's safe-file checks (TMPDIR's, else /tmp's)."""
    from inductor_knobs.ext import unsafe_directories

    for parent in (None, "/tmp", "/var/tmp"):
        work = Path(tempfile.mkdtemp(prefix="cold-start-", dir=parent))
        if not unsafe_directories(str(work), os.geteuid(), label=str(work), error=OSError):
            return work
        work.rmdir()
    raise SystemExit(
        "no temporary directory passes ik.serving.load_serving_bundle's checks (yours or root's, not writable by others)"
    )


def host_bytecode(work: Path, extra: list[str]) -> dict:
    """Compile the bytecode of the standard library and of every installed package once, before any arm, as a
    Python installation and ``pip install`` do by default.

    Why: on the GPU host the installed packages had no bytecode Python could use, so every process compiled
    about 1,500 modules from source (``builtins.compile``: 4.4 s of a 7.4 s AOT bundle load in
    a one-off profile on an H100 host, torch 2.11, 2026-11-26), a cost a host that pip-installed torch does not
    pay, and one that would hide what a cold start costs.  The bytecode goes to a ``PYTHONPYCACHEPREFIX``
    directory under ``work`` that every arm's process uses (nothing in site-packages changes); every arm,
    ``cold`` included, gets the same.  Python reads bytecode only from that prefix while it is set, so the
    standard library's own ``__pycache__`` does not count: it is compiled there too, and so is every package of
    ``site-packages`` (transformers alone imports ``huggingface_hub``, ``httpx``, ``numpy`` ...), whatever the
    host's ``PYTHONDONTWRITEBYTECODE`` (recorded) says about writing bytecode at import.

    Returns:
        dict: the prefix, the directories compiled, the seconds compileall took, its exit status, and what
        ``inductor-knobs doctor`` says of torch's installed bytecode (``installed``: ``inductor_knobs.doctor.bytecode``,
        judged before the prefix is set).
    """
    import sysconfig

    from inductor_knobs.doctor import bytecode

    prefix = work / "pycache"
    paths = sysconfig.get_paths()
    root = Path(__file__).resolve().parents[1]  # this checkout, on PYTHONPATH
    found = [Path(paths[key]) for key in ("stdlib", "platstdlib", "purelib", "platlib")]
    found += [root / name for name in ("inductor_knobs", "patches", "bench")] + [Path(d) for d in extra]
    # Python looks bytecode up in the prefix by the path it imports from, symbolic links unresolved: each directory
    # is compiled by its own spelling, and left out only where it lies, so spelled, inside another listed one.
    spelled = {Path(os.path.abspath(d)) for d in found if d.is_dir()}
    dirs = sorted(str(d) for d in spelled if not any(d != o and d.is_relative_to(o) for o in spelled))
    installed = bytecode("torch")
    started = time.time()
    done = subprocess.run(
        [sys.executable, "-m", "compileall", "-q", "-j", "0", *dirs],
        env={**os.environ, "PYTHONPYCACHEPREFIX": str(prefix)},
        capture_output=True,
        text=True,
        check=False,
    )
    return {
        "prefix": str(prefix),
        "seconds": round(time.time() - started, 1),
        "exit": done.returncode,  # nonzero when some file of a package does not compile (test data): expected
        "dirs": dirs,
        "installed": installed,
    }


def spawn(
    model: str, arm: str, work: Path, caches: Path, out: Path, args, profiled: bool = False, tree: str | None = None
) -> dict:
    """Run one arm in a fresh process on ``caches``' Inductor and Triton directories (``profiled``: with
    ``-X importtime`` and a cProfile, written beside the results; ``tree``: a directory holding another
    ``inductor_knobs`` (and ``patches``), first on the process's ``PYTHONPATH``, and named in its arm)."""
    triton = caches / "triton"
    before = kernel_dirs(triton)
    env = {**os.environ, "TORCHINDUCTOR_CACHE_DIR": str(caches / "inductor"), "TRITON_CACHE_DIR": str(triton)}
    env.update(HF_HUB_OFFLINE="1", TRANSFORMERS_OFFLINE="1", PYTHONUNBUFFERED="1")
    if args.bytecode:
        env["PYTHONPYCACHEPREFIX"] = args.bytecode["prefix"]
    if tree is not None:
        env["PYTHONPATH"] = os.pathsep.join(p for p in (tree, env.get("PYTHONPATH")) if p)
    result_path = out / f"{model}-{arm}.json"
    result_path.unlink(missing_ok=True)
    cmd = [sys.executable, __file__, "--one", model, arm, "--bundle", str(work / f"{model}.bundle"), "--out", str(out)]
    cmd += ["--requests", str(args.requests), "--device", args.device]
    stderr = None
    if profiled:  # one more run, not timed for the table: Python's import times and a cProfile of the arm
        cmd[1:1] = ["-X", "importtime"]
        stderr = open(out / f"{model}-{arm}-importtime.txt", "w")  # closed below
        env["COLD_START_CPROFILE"] = str(out / f"{model}-{arm}-cprofile.txt")
    env["COLD_START_SPAWNED"] = repr(time.time())
    try:
        done = subprocess.run(cmd, env=env, check=False, timeout=args.timeout, stderr=stderr)
        code = done.returncode
    except subprocess.TimeoutExpired:
        code = "timeout"
    finally:
        if stderr is not None:
            stderr.close()
    named = f"{arm} ({Path(tree).name})" if tree is not None else arm
    if code != 0 or not result_path.exists():
        return {"model": model, "arm": named, "error": f"exit {code}"}
    result = json.loads(result_path.read_text())
    result["arm"] = named
    result["triton_kernel_dirs_added"] = len(kernel_dirs(triton) - before)
    # What Inductor built on this "host" besides Triton: an AOT load writes torch's CPU ISA probes (get_device_information).
    inductor = caches / "inductor"
    result["inductor_cpp_built"] = sorted(p.name for p in inductor.rglob("*.so")) if arm == "aot" and inductor.is_dir() else None
    return result


def markdown(results: list[dict], env: dict) -> str:
    lines = [
        f"{env['gpu']} ({env['sms']} SMs), driver {env['driver']}, torch {env['torch']}, triton {env['triton']}, "
        f"transformers {env['transformers']}; mode={MODE}, dynamic=True, padded buckets"
        + (", one CUDA graph per bucket" if env["sms"] else " (CPU: no CUDA graphs; C++ kernels built again from cached source)")
        + (
            "; the bytecode of the standard library and every installed package compiled once before the arms "
            f"({env['host_bytecode']['seconds']} s; torch's installed "
            f"bytecode usable: {env['host_bytecode']['installed']['usable']})"
            if env.get("host_bytecode")
            else ""
        ),
        "",
        "| model | arm | first request s | vs cold | " + " | ".join(PHASES) + " | first req ms | p50 ms | p99 ms | p99/p50 |",
        "|---|---|---|---|" + "---|" * len(PHASES) + "---|---|---|---|",
    ]
    cold = {r["model"]: r.get("time_to_first_request_s") for r in results if r["arm"] == "cold"}
    for r in results:
        if "error" in r:
            lines.append(f"| {r['model']} | {r['arm']} | {r['error']} |")
            continue
        base = cold.get(r["model"])
        ratio = f"{r['time_to_first_request_s'] / base:.3f}" if base else "-"
        phases = " | ".join(f"{r['phases'].get(p, 0.0):.2f}" for p in PHASES)
        q = r["requests"]
        lines.append(
            f"| {r['model']} | {r['arm']} | {r['time_to_first_request_s']:.2f} | {ratio} | {phases} | "
            f"{r['first_request_ms']:.2f} | {q['p50_ms']:.2f} | {q['p99_ms']:.2f} | {q['p99_over_p50']:.2f} |"
        )
    lines += [
        "",
        "What each arm compiled, autotuned and captured (setup / traffic). Triton: compiles Triton's listener heard in the "
        "serving process (None: Triton < 3.4); kernel dirs: directories the arm added to its Triton cache (in `cold` every "
        "compile, its compile workers' too; in `bundle` the kernels the bundle restored and the cubins the FX graph cache's "
        "Triton bundle wrote, not compiles); restored: Triton kernels the bundle put into the empty Triton cache.",
        "",
        "| model | arm | Dynamo traces | Inductor compiles: cache hits / cold | autotune benchmarks | Triton compiles | "
        "Triton cache hits / kernel loads | kernel dirs | restored | captures | "
        "traffic: compiles, autotune, Triton, stalls (by cause) |",
        "|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in results:
        if "error" in r:
            continue
        s, t = r["setup"], r["traffic"]
        hits = sum(s["inductor_hits"].values())
        stalls = ", ".join(f"{k} {v['stalls']}" for k, v in t["stalls"].items()) or "none"
        lines.append(
            f"| {r['model']} | {r['arm']} | {s['dynamo_compiles']} | {hits} / {s['inductor_compiled']} | "
            f"{s['autotune_benchmarks']} | {s['triton_compiled']} | {s['triton_cache_hits']} / {s['triton_loads']} | "
            f"{r.get('triton_kernel_dirs_added')} | {s.get('triton_kernels_restored', 0)} | {s['captures']} | "
            f"{t['dynamo_compiles']}, {t['autotune_benchmarks']}, "
            f"{t['triton_compiled']}, {t['stall_count']} ({stalls}) |"
        )
    lines += ["", "Goals (issue 32), per model:"]
    for r in results:
        kind = r["arm"].split(" ")[0]  # "aot (TREE)": an aot run from another tree
        if kind not in ("bundle", "aot") or "error" in r:
            continue
        base = cold.get(r["model"])
        s, t, q = r["setup"], r["traffic"], r["requests"]
        checks = {
            "time to first request <= 10% of cold": bool(base) and r["time_to_first_request_s"] <= 0.1 * base,
            "0 autotune benchmarks (setup and traffic)": s["autotune_benchmarks"] == 0 and t["autotune_benchmarks"] == 0,
            "0 Triton compiles (setup and traffic)": None
            if s["triton_compiled"] is None
            else s["triton_compiled"] == 0 and t["triton_compiled"] == 0,
            # An AOT load compiles no Inductor graph at all (it has none to hit).
            "every Inductor compile a cache hit": s["inductor_compiled"] == 0 and (s["inductor_compiles"] > 0 or kind == "aot"),
            "p99 <= 2x p50 of the first requests": q["p99_over_p50"] <= 2.0,
        }
        verdict = {True: "yes", False: "NO", None: "n/a (Triton cannot say)"}
        lines.append(f"- {r['model']} {r['arm']}: " + "; ".join(f"{k}: {verdict[ok]}" for k, ok in checks.items()))
        if r.get("bundle") is None:
            saved = next((c.get("bundle") for c in results if c["model"] == r["model"] and c["arm"] == "cold"), None)
            if saved:
                aot = saved.get("aot") or {"bytes": 0, "seconds": 0}
                lines.append(
                    f"  bundle: {saved['bytes'] / 1e6:.1f} MB, saved in {saved['seconds']:.1f} s, "
                    f"artifacts {saved['artifacts']}, Triton kernels {saved.get('triton_kernels')}"
                    if r["arm"] == "bundle"
                    else f"  AOT bundle: {aot['bytes'] / 1e6:.1f} MB (weights included), built in {aot['seconds']:.1f} s "
                    f"after the warm-up (steps {aot.get('steps')}; {aot.get('pinned')} GEMM lookup keys pinned from the warm-up)"
                )
    for r in results:
        if "error" not in r:
            lines += [
                "",
                f"### {r['model']} / {r['arm']}: guard over the first {r['requests']['count']} requests",
                "```",
                r["guard_table"],
                "```",
            ]
    return "\n".join(lines) + "\n"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--out", required=True)
    parser.add_argument("--models", nargs="+", default=list(real.MODELS), choices=real.MODELS)
    parser.add_argument(
        "--arms", nargs="+", default=list(ARMS), choices=ARMS, help="cold runs first always: it builds the bundles"
    )
    parser.add_argument("--requests", type=int, default=200)
    parser.add_argument("--device", default="cuda", choices=("cuda", "cpu"))
    parser.add_argument("--timeout", type=int, default=1200, help="seconds per arm's process")
    parser.add_argument("--keep", action="store_true", help="keep the bundles and cache directories (printed)")
    parser.add_argument(
        "--no-host-bytecode", action="store_true", help="do not compile the packages' bytecode before the arms (host_bytecode)"
    )
    parser.add_argument("--aot-runs", type=int, default=1, help="aot arm processes, each on new empty caches")
    parser.add_argument("--profile-aot", action="store_true", help="then one more aot process with -X importtime and cProfile")
    parser.add_argument(
        "--aot-tree",
        help="a directory holding another inductor_knobs: each aot run also runs from it, this checkout first in even runs, "
        "the other tree first in odd ones (balanced for an even --aot-runs)",
    )
    parser.add_argument("--one", nargs=2, metavar=("MODEL", "ARM"), help=argparse.SUPPRESS)  # a worker process
    parser.add_argument("--bundle", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.aot_tree and not (Path(args.aot_tree) / "inductor_knobs").is_dir():
        raise SystemExit(f"--aot-tree {args.aot_tree}: no inductor_knobs directory there")
    if args.aot_tree:
        args.aot_tree = str(Path(args.aot_tree).absolute())
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    if args.one:
        profile = os.environ.get("COLD_START_CPROFILE")
        if profile:
            import cProfile
            import io
            import pstats

            profiler = cProfile.Profile()
            result = profiler.runcall(run_arm, args.one[0], args.one[1], Path(args.bundle), args.requests, args.device)
            text = io.StringIO()
            pstats.Stats(profiler, stream=text).sort_stats("cumulative").print_stats(80)
            Path(profile).write_text(text.getvalue())
        else:
            result = run_arm(args.one[0], args.one[1], Path(args.bundle), args.requests, args.device)
        (out / f"{args.one[0]}-{args.one[1]}.json").write_text(json.dumps(result, indent=1, default=str))
        return 0
    real.DEVICE = args.device
    env = real.environment()
    work = private_directory()
    results = []
    args.bytecode = None
    try:
        if not args.one and not args.no_host_bytecode:
            args.bytecode = env["host_bytecode"] = host_bytecode(work, [args.aot_tree] if args.aot_tree else [])
            print(f"host bytecode: {args.bytecode}", flush=True)
        for model in args.models:
            caches = {
                "cold": work / f"{model}-host-a",
                "warm-caches": work / f"{model}-host-a",
                "bundle": work / f"{model}-host-b",
                "aot": work / f"{model}-host-c",
            }
            for arm in ("cold", *(a for a in ARMS if a in args.arms and a != "cold")):
                if arm != "cold" and "error" in results[-1] and results[-1]["arm"] == "cold":
                    results.append({"model": model, "arm": arm, "error": "skipped: the cold arm failed"})
                    continue
                runs = args.aot_runs if arm == "aot" else 1
                for run in range(runs + (arm == "aot" and args.profile_aot)):
                    profiled = run == runs
                    trees = [None, args.aot_tree] if arm == "aot" and args.aot_tree and not profiled else [None]
                    for tree in trees[:: 1 if run % 2 == 0 else -1]:  # each tree first in every other pair
                        started = time.time()
                        cache = (
                            caches[arm].with_name(f"{caches[arm].name}-{run}{'-tree' if tree else ''}")
                            if arm == "aot"
                            else caches[arm]
                        )
                        result = spawn(model, arm, work, cache, out, args, profiled, tree)
                        first = result.get("time_to_first_request_s")
                        name = f"{result['arm']} (profiled)" if profiled else result["arm"]
                        print(f"{model} {name}: {time.time() - started:.0f} s, first request at {first} s", flush=True)
                        if profiled:
                            (out / f"{model}-{arm}-profiled.json").write_text(json.dumps(result, indent=1, default=str))
                        else:
                            results.append(result)
    finally:
        if args.keep:
            print(f"kept {work}")
        else:
            shutil.rmtree(work, ignore_errors=True)
    (out / "cold_start.json").write_text(json.dumps({"environment": env, "arms": results}, indent=1, default=str))
    text = markdown(results, env)
    (out / "cold_start.md").write_text(text)
    print(text.split("\n### ")[0])
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
