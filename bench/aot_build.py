"""Where an AOT bundle's build spends its time after the serving warm-up, and which of the warm-up's caches it hits.

    python bench/aot_build.py --out DIR                    # the Llama on a GPU
    python bench/aot_build.py --out DIR --device cpu       # a smoke run of the flow, tiny sizes
    python bench/aot_build.py --out DIR --build-option coordinate_descent_tuning=False   # the builds without it
    python bench/aot_build.py --out DIR --builds 1 --build-option coordinate_descent_tuning=False \
        --also-build coordinate_descent_tuning=True     # then one more bundle with it, all timed side by side

One process on fresh, empty cache directories (``TORCHINDUCTOR_CACHE_DIR`` and ``TRITON_CACHE_DIR``): the recipe of
``bench/cold_start.py`` for the model (``ik.compile(..., mode="max-autotune-no-cudagraphs", dynamic=True)``, the
warm-up over its buckets, one CUDA graph per bucket, their warm-up), then ``ik.serving.save_serving_bundle(...,
aot=True)`` twice (``--builds 1``: once): the first build is the one a serving recipe pays; the second, on the
caches the first filled, is what the build costs when every kernel it generates is in the caches.  For each build:

- its wall time and the bundle's own steps (the header's ``serving.aot.seconds``: export, compile, load check);
- torch's own phases (``dynamo_timed``: ``torch._dynamo.utils.compilation_time_metrics``) added during it, summed;
- what an ``ik.serving.ColdStartRecorder`` heard during it (run-time benchmarks, coordinate-descent searches, Triton
  compiles and cache hits);
- the kernel sources (wrapper modules left out) and autotune results (run-time tuning's ``.best_config`` files, GEMM
  choices under ``cache/``) it added to Inductor's cache directory: a source the warm-up did not generate is one whose
  run-time tuning and Triton compile the warm-up's caches cannot serve;
- cProfile's top functions by cumulative time: every thread of this process on Python 3.12+ (whose cProfile uses
  ``sys.monitoring``), this thread only before (other threads then show as waits); Inductor's compile workers are other
  processes;
- every child process it started from any thread (C++ compiles and links, the CPU ISA probes, Triton's launcher
  builds, the load check): the program, its output file and its seconds, from ``subprocess.Popen`` start to reaping,
  the thread that started it and when;
- the packages it imported first, in order, with the thread that imported each and when.

``--build-option KEY=VALUE`` (repeatable; the value read as a Python literal) sets an Inductor config key for the
builds only (``save_serving_bundle(..., aot_options={KEY: VALUE})``), while the warm-up compiled without it.  After
the builds the last bundle is loaded in this process (``ik.serving.load_serving_bundle``) and timed against the
warm-up's served model at the smallest, a middle and the largest bucket, side by side (``--rounds`` rounds, each
timing ``triton.testing.do_bench`` of a call, the order reversed every other round, the median kept): what the
build's own tuning, or its absence, costs the served kernels.  ``--also-build KEY=VALUE`` (repeatable) then builds
one more bundle in the same process with those options instead of ``--build-option``'s (on the caches the builds
before it filled: its build time is not a first build's), and it joins the timing as ``also``: two builds' kernels
against one warm-up, side by side.  ``--without-descent-fix`` leaves out the package's fix that keeps a compile
worker's cached coordinate-descent winner (``patches/fixes.py``): its second build then tunes again what the first
cached.  ``--keep-sources`` copies every kernel source the warm-up and the first build generated under ``sources/``.

Writes ``aot_build.json``, ``aot_build-profile-<n>.txt`` (with the callers of the waits on child processes and
locks), ``aot_build-<n>.prof`` (``pstats``) and, under ``new-kernels/``, up to 20 kernel sources that the
first build added, each beside the warm-up's source of the kernel of the same name as a unified diff.
"""

from __future__ import annotations

import argparse
import cProfile
import difflib
import io
import json
import os
import pstats
import re
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import cold_start  # sibling scripts (their top levels import only the standard library)
import serving_real as real

KERNEL_NAME = re.compile(r"^def (triton_\w+)\(", re.MULTILINE)


def sources(cache: Path) -> dict[str, Path]:
    """Inductor's generated Python modules in ``cache`` (kernels and wrappers), by file name."""
    return {p.name: p for p in cache.rglob("*.py")} if cache.is_dir() else {}


def best_configs(cache: Path) -> set[str]:
    return {p.name for p in cache.rglob("*.best_config")} if cache.is_dir() else set()


def kernel_names(path: Path) -> list[str]:
    """The Triton kernels a generated module defines; none for a wrapper module (it embeds every kernel it calls)."""
    try:
        text = path.read_text(errors="replace")
    except OSError:
        return []
    return [] if "async_compile" in text or "\ndef call(" in text else KERNEL_NAME.findall(text)


def autotune_entries(cache: Path) -> set[str]:
    """Inductor's on-disk autotune results: run-time tuning (``*.best_config``) and GEMM choices (``cache/``)."""
    gemm = cache / "cache"
    return best_configs(cache) | ({f"cache/{p.name}" for p in gemm.rglob("*") if p.is_file()} if gemm.is_dir() else set())


def phases(before: dict[str, int]) -> dict[str, float]:
    """Seconds per ``dynamo_timed`` key added since ``before`` (counts per key)."""
    from torch._dynamo.utils import compilation_time_metrics

    added = {key: sum(values[before.get(key, 0) :]) for key, values in compilation_time_metrics.items()}
    return {key: round(value, 3) for key, value in sorted(added.items(), key=lambda kv: -kv[1]) if value > 0}


class FirstImports:
    """Every module asked for while active that was not imported yet, from any thread: its name, the thread and the
    seconds since the block began (a ``sys.meta_path`` finder that finds nothing and only notes who asked first; an
    optional import that then fails is noted too)."""

    def __init__(self) -> None:
        self.rows: list[dict] = []
        self._started = time.perf_counter()

    def find_spec(self, fullname, path=None, target=None):
        if fullname not in sys.modules:
            at = round(time.perf_counter() - self._started, 3)
            self.rows.append({"module": fullname, "thread": threading.current_thread().name, "at_s": at})
        return None

    def __enter__(self) -> FirstImports:
        self._started = time.perf_counter()
        sys.meta_path.insert(0, self)
        return self

    def __exit__(self, *exc) -> None:
        sys.meta_path.remove(self)

    def summary(self) -> list[dict]:
        """The first imports in order, one row per top-level package (each ``torch.*`` module its own row)."""
        seen, kept = set(), []
        for row in self.rows:
            name = row["module"]
            key = name if name.startswith("torch.") else name.split(".")[0]
            if key not in seen:
                seen.add(key)
                kept.append({**row, "module": key})
        return kept


class ChildProcesses:
    """Every ``subprocess.Popen`` started while active, from any thread: program, output file, seconds to reaping, the
    thread that started it and when (seconds since the block began)."""

    def __init__(self) -> None:
        self.rows: list[dict] = []
        self._lock = threading.Lock()
        self._started = time.perf_counter()

    def __enter__(self) -> ChildProcesses:
        self._init, self._wait = subprocess.Popen.__init__, subprocess.Popen.wait
        self._started = time.perf_counter()
        log = self

        def init(popen, args, *rest, **kwargs):
            popen._bench_started = time.perf_counter()
            popen._bench_thread = threading.current_thread().name
            log._init(popen, args, *rest, **kwargs)

        def wait(popen, timeout=None):
            code = log._wait(popen, timeout)
            started = popen.__dict__.pop("_bench_started", None)
            if started is not None:
                seconds, at = round(time.perf_counter() - started, 3), round(started - log._started, 3)
                thread = popen.__dict__.pop("_bench_thread", "?")
                with log._lock:
                    log.rows.append({"seconds": seconds, "at_s": at, "thread": thread, **describe(popen.args)})
            return code

        subprocess.Popen.__init__, subprocess.Popen.wait = init, wait
        return self

    def __exit__(self, *exc) -> None:
        subprocess.Popen.__init__, subprocess.Popen.wait = self._init, self._wait

    def summary(self, top: int = 25) -> dict:
        by_program: dict[str, list[float]] = {}
        for row in self.rows:
            by_program.setdefault(row["program"], []).append(row["seconds"])
        return {
            "by_program": {name: {"count": len(s), "seconds": round(sum(s), 3)} for name, s in by_program.items()},
            "slowest": sorted(self.rows, key=lambda row: -row["seconds"])[:top],
            "in_order": sorted(self.rows, key=lambda row: row["at_s"]),
        }


def describe(args) -> dict:
    """A child's program, output file (``-o``) and optimisation level, from its argument list or shell string."""
    words = args.split() if isinstance(args, str) else [str(word) for word in args]
    if isinstance(args, str) and words:  # a shell command: torch's cpp_builder runs one string
        words = [word.strip("'\"") for word in words]
    output = next((words[i + 1] for i, word in enumerate(words[:-1]) if word == "-o"), words[-1] if words else "")
    levels = [word for word in words if re.fullmatch(r"-O[0-3s]", word)]
    return {"program": Path(words[0]).name if words else "?", "output": Path(output).name, "opt": " ".join(levels)}


def build_once(
    ik, served, warmed, buckets, factory, bundle: Path, out: Path, n: int, caches: tuple[Path, Path], options: dict
) -> dict:
    inductor_cache, triton_cache = caches
    from torch._dynamo.utils import compilation_time_metrics

    from inductor_knobs.serving.cold_start import ColdStartRecorder

    counts = {key: len(values) for key, values in compilation_time_metrics.items()}
    had_sources, had_configs = sources(inductor_cache), autotune_entries(inductor_cache)
    had_kernels = cold_start.kernel_dirs(triton_cache)
    profile = cProfile.Profile()
    started = time.perf_counter()
    with ColdStartRecorder() as recorder, ChildProcesses() as children, FirstImports() as imports:
        profile.enable()
        try:
            header = ik.serving.save_serving_bundle(
                bundle, served, warmed, buckets=buckets, aot=True, factory=factory, aot_options=options or None
            )
        finally:
            profile.disable()
    wall = time.perf_counter() - started
    text = io.StringIO()
    stats = pstats.Stats(profile, stream=text)
    stats.sort_stats("cumulative").print_stats(60)
    # Who waits on child processes (C++ compiles, Triton's, the load check) and on locks: the callers, two levels up.
    stats.print_callers(r"\(check_call\)|\(run\)|\(communicate\)|\(wait\)|__enter__|compile_file")
    profile.dump_stats(str(out / f"aot_build-{n}.prof"))
    (out / f"aot_build-profile-{n}.txt").write_text(text.getvalue())
    now = sources(inductor_cache)
    new_sources = sorted(set(now) - set(had_sources))
    built = header["serving"]["aot"]
    return {
        "wall_s": round(wall, 3),
        "steps": built.get("seconds"),
        "pinned": built.get("pinned"),
        "cxx": built.get("cxx"),
        "torch_phases_s": phases(counts),
        "recorder": cold_start.named(recorder.proof()),
        "child_processes": children.summary(),
        "first_imports": imports.summary(),
        "new_sources": len(new_sources),
        "new_kernel_sources": sum(bool(kernel_names(now[name])) for name in new_sources),
        "new_autotune_entries": len(autotune_entries(inductor_cache) - had_configs),
        "new_triton_kernel_dirs": len(cold_start.kernel_dirs(triton_cache) - had_kernels),
        "_new_sources": new_sources,
        "_had_sources": sorted(had_sources),
    }


def write_diffs(inductor_cache: Path, old: list[str], new: list[str], out: Path, limit: int = 20) -> list[dict]:
    """For each new kernel source (up to ``limit``), the warm-up's source of the kernel of the same name, diffed."""
    every = sources(inductor_cache)
    by_name: dict[str, Path] = {}
    for name in old:
        for kernel in kernel_names(every[name]):
            by_name.setdefault(kernel, every[name])
    folder = out / "new-kernels"
    folder.mkdir(parents=True, exist_ok=True)
    found = []
    for name in new:
        path = every[name]
        kernels = kernel_names(path)
        if not kernels:
            continue
        match = by_name.get(kernels[0])
        entry = {"source": name, "kernel": kernels[0], "warm_up_source": match.name if match else None}
        if len(found) < limit:
            (folder / name).write_text(path.read_text(errors="replace"))
            if match is not None:
                old_text = match.read_text(errors="replace").splitlines()
                new_text = path.read_text(errors="replace").splitlines()
                diff = difflib.unified_diff(old_text, new_text, "warm-up", "aot", lineterm="")
                (folder / f"{name}.diff").write_text("\n".join(diff) + "\n")
        found.append(entry)
    return found


def literal(text: str):
    """``KEY=VALUE`` -> ``(KEY, VALUE)``, the value a Python literal (``False``, ``3``, ``'O0'``), else the string."""
    import ast

    key, sep, value = text.partition("=")
    if not sep or not key:
        raise SystemExit(f"--build-option/--also-build {text!r}: give KEY=VALUE")
    try:
        return key, ast.literal_eval(value)
    except (ValueError, SyntaxError):
        return key, value


def time_side_by_side(arms: dict, calls: dict, rounds: int) -> dict:
    """Median ms of ``do_bench`` per (arm, size) over ``rounds`` rounds, every arm at every size in each round."""
    import statistics

    from triton.testing import do_bench

    times: dict = {}
    for turn in range(rounds):
        order = list(arms) if turn % 2 == 0 else list(arms)[::-1]
        for size, inputs in calls.items():
            for arm in order:
                fn = arms[arm]
                times.setdefault(f"{arm}@{size}", []).append(float(do_bench(lambda f=fn, x=inputs: f(**x))))
    return {key: round(statistics.median(values), 4) for key, values in times.items()}


def probe_isas() -> None:
    """Inductor's CPU vector-ISA probes (cached for the process), under the package's torch fixes."""
    from torch._inductor.cpu_vec_isa import valid_vec_isa_list

    from inductor_knobs.serving.torch_fixes import torch_fixes

    with torch_fixes():
        valid_vec_isa_list()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--out", required=True)
    parser.add_argument("--model", default="llama", choices=real.MODELS)
    parser.add_argument("--device", default="cuda", choices=("cuda", "cpu"))
    parser.add_argument("--build-option", action="append", default=[], help="KEY=VALUE: an Inductor config key for the builds")
    parser.add_argument("--rounds", type=int, default=5, help="rounds of the bundle-against-warm-up timing (CUDA)")
    parser.add_argument("--builds", type=int, default=2, choices=(1, 2), help="builds in the process (the last is timed)")
    parser.add_argument(
        "--also-build", action="append", default=[], help="KEY=VALUE: one more build with these options, timed beside"
    )
    parser.add_argument(
        "--without-descent-fix",
        action="store_true",
        help="leave out the package's fix that keeps a compile worker's cached coordinate-descent winner",
    )
    parser.add_argument(
        "--keep-sources",
        action="store_true",
        help="copy every kernel source the warm-up and the first build generated under sources/ (warm-up/, build/)",
    )
    parser.add_argument(
        "--probe-isa-beside",
        action="store_true",
        help="probe the CPU's vector ISAs on a thread beside the first build (what starting them early could save)",
    )
    args = parser.parse_args()
    options = dict(literal(text) for text in args.build_option)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    work = Path(tempfile.mkdtemp(prefix="aot-build-"))
    inductor_cache, triton_cache = work / "inductor", work / "triton"
    os.environ["TORCHINDUCTOR_CACHE_DIR"] = str(inductor_cache)
    os.environ["TRITON_CACHE_DIR"] = str(triton_cache)
    import torch

    import inductor_knobs as ik

    if args.without_descent_fix:  # the A/B arm: the package's other torch fixes stay
        from inductor_knobs.core import torch_compat

        type(torch_compat.installed()).coordesc_pickle_fix_by_release = {"2.0": False}
        result_note = "without the fix that keeps cached coordinate-descent winners"
    else:
        result_note = "as the package builds"
    real.DEVICE = args.device
    net = real.build(args.model)
    buckets = cold_start.bucket_sizes(ik, args.device)

    def factory(n: int) -> dict:
        return real.make_inputs(args.model, n, buckets, n)

    result: dict = {"model": args.model, "device": args.device, "torch": torch.__version__, "buckets": list(buckets)}
    result["arm"] = result_note
    result["build_options"] = {key: repr(value) for key, value in options.items()}
    also = dict(literal(text) for text in args.also_build) if args.also_build else None
    if also is not None:
        result["also_build_options"] = {key: repr(value) for key, value in also.items()}
    with torch.no_grad():
        started = time.perf_counter()
        compiled = ik.compile(net, mode=cold_start.MODE, dynamic=True)
        warmed = ik.serving.warmup(compiled, shapes=list(buckets), factory=factory, probes=None)
        served = compiled
        if args.device == "cuda":
            served = ik.serving.capture_cuda_graphs(compiled, shapes=list(buckets), factory=factory)
            warmed = ik.serving.warmup(served, shapes=list(buckets), factory=factory, probes=None)
        result["warm_up_s"] = round(time.perf_counter() - started, 3)
        result["warm_up_sources"] = len(sources(inductor_cache))
        result["warm_up_autotune_entries"] = len(autotune_entries(inductor_cache))
        builds = []
        if args.probe_isa_beside:
            threading.Thread(target=probe_isas, daemon=True).start()
        for n in range(1, args.builds + 1):
            bundle = work / f"model-{n}.bundle"
            caches = (inductor_cache, triton_cache)
            builds.append(build_once(ik, served, warmed, buckets, factory, bundle, out, n, caches, options))
            print(f"build {n}: {builds[-1]['wall_s']} s", flush=True)
        if also is not None:
            caches = (inductor_cache, triton_cache)
            result["also_build"] = build_once(ik, served, warmed, buckets, factory, work / "also.bundle", out, 0, caches, also)
            del result["also_build"]["_new_sources"], result["also_build"]["_had_sources"]
            print(f"also-build: {result['also_build']['wall_s']} s", flush=True)
        if args.device == "cuda":  # the bundle against the warm-up's served model, side by side
            try:
                path = work / f"model-{args.builds}.bundle"
                loaded = ik.serving.load_serving_bundle(path, None, factory=factory, on_cold="warn", on="record")
                sizes = sorted({buckets[0], buckets[len(buckets) // 2], buckets[-1]})
                calls = {n: factory(n) for n in sizes}
                arms = {"warm_up": served, "bundle": loaded.served}
                if also is not None:
                    path = work / "also.bundle"
                    arms["also"] = ik.serving.load_serving_bundle(path, None, factory=factory, on_cold="warn", on="record").served
                result["bundle_vs_warm_up_ms"] = time_side_by_side(arms, calls, args.rounds)
            except Exception as err:  # noqa: BLE001 - the builds' numbers are kept either way
                result["bundle_vs_warm_up_ms"] = {"error": f"{type(err).__name__}: {err}"}
            print(json.dumps(result["bundle_vs_warm_up_ms"]), flush=True)
    result["new_kernels"] = write_diffs(inductor_cache, builds[0]["_had_sources"], builds[0]["_new_sources"], out)
    if args.keep_sources:  # every kernel module (wrappers left out), the warm-up's and the first build's apart
        every = sources(inductor_cache)
        for folder, names in (("warm-up", builds[0]["_had_sources"]), ("build", builds[0]["_new_sources"])):
            (out / "sources" / folder).mkdir(parents=True, exist_ok=True)
            for name in names:
                if kernel_names(every[name]):
                    (out / "sources" / folder / name).write_text(every[name].read_text(errors="replace"))
    for build in builds:
        del build["_new_sources"], build["_had_sources"]
    result["builds"] = builds
    (out / "aot_build.json").write_text(json.dumps(result, indent=1) + "\n")
    print(json.dumps({k: v for k, v in result.items() if k != "new_kernels"}, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
