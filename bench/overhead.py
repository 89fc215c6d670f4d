"""What the toolkit costs, as ratios measured side by side in one interleaved run.

    python bench/overhead.py [--out bench/results/overhead-cpu] [--rounds 41] [--starts 30]

- **enter + exit**, in four process states, each in a child process of its own: a process that has
  compiled (thousands of modules loaded) or has only imported torch and the package, each with
  Python's garbage collector on (the default) and off (``gc.disable()``, as some servers run):
  ``ik.knobs(coordinate_descent_tuning=True)`` against ``torch._inductor.config.patch`` of the same
  key, and ``ik.force_gemm_autotune(min_sms=40)`` against ``config.patch`` of the keys it sets
  (``max_autotune_gemm``, ``max_autotune_gemm_backends``).  Every variant makes its context
  object inside the loop, as ``with ik.knobs(...):`` and ``with config.patch(...):`` do (torch's
  ``patch`` builds a class per call).  Rounds alternate the variants' order; each round times a loop
  of blocks of each with ``time.perf_counter``; a ratio is the median over rounds of that round's
  ratio (paired: a machine that speeds up or slows down between rounds moves both sides), with a 95%
  percentile-bootstrap interval (``scipy.stats.bootstrap`` through the ablation's ``median_interval``;
  the unit of replication is a round), and the µs figures are medians over rounds of the per-block time.
- **interpreter start** with an ``INDUCTOR_KNOBS_*`` variable set, against a bare ``python -c pass``
  (the installed startup ``.pth`` present in both), and **``import inductor_knobs``** against a
  bare start: CPU seconds (user + system, ``RUSAGE_CHILDREN``) of each child, starts alternated;
  the median over starts.
- ``inductor-knobs --help`` and ``--version`` must not import torch (checked).

Writes ``overhead.json`` and ``overhead.md``.  The goals of the "costs nothing" issue are printed
beside the ratios.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any, Callable


def _blocks(make: Callable[[], Any], count: int) -> float:
    start = time.perf_counter()
    for _ in range(count):
        with make():
            pass
    return (time.perf_counter() - start) / count


#: (label, compiled, garbage collector on) of each state enter + exit is measured in.
STATES = (
    ("compiled, GC on", True, True),
    ("compiled, GC off", True, False),
    ("not compiled, GC on", False, True),
    ("not compiled, GC off", False, False),
)


def enter_exit(rounds: int, count: int, compiled: bool = True, gc_on: bool = True) -> dict[str, Any]:
    import gc

    import torch
    import torch._inductor.config as cfg

    import inductor_knobs as ik
    from inductor_knobs.ablation.stats import median_interval

    if compiled:
        torch.compile(lambda x: (x @ x).relu())(torch.randn(16, 16))  # a process that has compiled
    if not gc_on:
        gc.disable()
    variants: dict[str, Callable[[], Any]] = {
        "knobs(coordinate_descent_tuning=True)": lambda: ik.knobs(coordinate_descent_tuning=True),
        "config.patch(coordinate_descent_tuning=True)": lambda: cfg.patch(coordinate_descent_tuning=True),
        "force_gemm_autotune(min_sms=40)": lambda: ik.force_gemm_autotune(min_sms=40),
        "config.patch(max_autotune_gemm, backends)": lambda: cfg.patch(
            max_autotune_gemm=True, max_autotune_gemm_backends="ATEN,TRITON"
        ),
    }
    times: dict[str, list[float]] = {name: [] for name in variants}
    for make in variants.values():  # warm every path once
        _blocks(make, 5)
    for index in range(rounds):
        order = list(variants) if index % 2 == 0 else list(reversed(variants))
        for name in order:
            times[name].append(_blocks(variants[name], count))
    med = {name: statistics.median(values) * 1e6 for name, values in times.items()}

    def paired(variant: str, baseline: str) -> dict[str, Any]:
        # Each round's ratio: a round times both side by side, so a machine that speeds up or slows
        # down between rounds moves both.  The median over rounds, with a 95% percentile-bootstrap
        # interval whose unit of replication is a round (the ablation's own statistics).
        ratios = [v / b for v, b in zip(times[variant], times[baseline])]
        interval = median_interval(ratios)
        if interval is None:
            raise SystemExit(f"--rounds {rounds} is too few for an interval; use at least 5")
        return {"estimate": interval.estimate, "low": interval.low, "high": interval.high, "per_round": ratios}

    return {
        "modules_loaded": len(sys.modules),
        "median_us": med,
        "ratio_config_only": paired("knobs(coordinate_descent_tuning=True)", "config.patch(coordinate_descent_tuning=True)"),
        "ratio_force_gemm_autotune": paired("force_gemm_autotune(min_sms=40)", "config.patch(max_autotune_gemm, backends)"),
    }


def _child_cpu(args: list[str], env: dict[str, str]) -> float:
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    subprocess.run(args, env=env, check=True, capture_output=True)
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    return (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)


def starts(count: int) -> dict[str, Any]:
    # Bytecode caches as an installed package has them (pip compiles at install): children may write
    # them, and one warm-up start of each variant comes first.
    clean = {k: v for k, v in os.environ.items() if not k.startswith("INDUCTOR_KNOBS_") and k != "PYTHONDONTWRITEBYTECODE"}
    variants = {
        "python -c pass": ([sys.executable, "-c", "pass"], clean),
        "python -c pass, INDUCTOR_KNOBS_MIN_SMS=40": ([sys.executable, "-c", "pass"], {**clean, "INDUCTOR_KNOBS_MIN_SMS": "40"}),
        "python -c 'import inductor_knobs'": ([sys.executable, "-c", "import inductor_knobs"], clean),
    }
    seconds: dict[str, list[float]] = {name: [] for name in variants}
    for args, env in variants.values():
        _child_cpu(args, env)
    for index in range(count):
        order = list(variants) if index % 2 == 0 else list(reversed(variants))
        for name in order:
            seconds[name].append(_child_cpu(*variants[name]))
    med = {name: statistics.median(values) * 1e3 for name, values in seconds.items()}
    bare = med["python -c pass"]
    return {
        "median_cpu_ms": med,
        "ratio_start_with_variable": med["python -c pass, INDUCTOR_KNOBS_MIN_SMS=40"] / bare,
        "ratio_import_package": med["python -c 'import inductor_knobs'"] / bare,
    }


def cli_imports_no_torch() -> dict[str, bool]:
    out = {}
    for flag in ("--help", "--version"):
        code = (
            f"import sys\nfrom inductor_knobs import cli\ntry:\n    cli.main([{flag!r}])\nexcept SystemExit:\n    pass\n"
            "print('torch' in sys.modules, file=sys.stderr)"
        )
        done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
        out[flag] = done.stderr.strip().splitlines()[-1] == "False"
    return out


def _with_interval(ratio: dict[str, Any]) -> str:
    return f"{ratio['estimate']:.2f}x [{ratio['low']:.2f}–{ratio['high']:.2f}]"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", default="bench/results/overhead-cpu")
    parser.add_argument("--rounds", type=int, default=41)
    parser.add_argument("--blocks", type=int, default=100)
    parser.add_argument("--starts", type=int, default=30)
    parser.add_argument("--state", help=argparse.SUPPRESS)  # a child: "compiled,gc_on" as 0/1, prints JSON
    args = parser.parse_args()
    if args.state:
        compiled, gc_on = (flag == "1" for flag in args.state.split(","))
        print(json.dumps(enter_exit(args.rounds, args.blocks, compiled, gc_on)))
        return
    import torch

    states = {}
    for label, compiled, gc_on in STATES:  # one child per state: a fresh process each
        cmd = [sys.executable, __file__, "--rounds", str(args.rounds), "--blocks", str(args.blocks)]
        done = subprocess.run([*cmd, "--state", f"{int(compiled)},{int(gc_on)}"], capture_output=True, text=True, check=True)
        states[label] = json.loads(done.stdout.strip().splitlines()[-1])
    result = {
        "python": sys.version.split()[0],
        "torch": torch.__version__,
        "cpus": os.cpu_count(),
        "enter_exit": states,
        "starts": starts(args.starts),
        "cli_without_torch": cli_imports_no_torch(),
    }
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    (out / "overhead.json").write_text(json.dumps(result, indent=2))
    st = result["starts"]
    rows = []
    for label, ee in states.items():
        config_only, forced = _with_interval(ee["ratio_config_only"]), _with_interval(ee["ratio_force_gemm_autotune"])
        rows.append((f"enter + exit, config-only knob vs config.patch ({label})", config_only, 1.2))
        rows.append((f"enter + exit, force_gemm_autotune vs config.patch ({label})", forced, 1.5))
    rows.append(("interpreter start with INDUCTOR_KNOBS_MIN_SMS=40 vs bare", f"{st['ratio_start_with_variable']:.2f}x", 1.1))
    rows.append(("import inductor_knobs vs bare start", f"{st['ratio_import_package']:.2f}x", 1.5))
    lines = [
        f"torch {result['torch']}, Python {result['python']}, {result['cpus']} CPUs; {args.rounds} interleaved rounds "
        f"of {args.blocks} blocks per state (modules loaded: "
        + ", ".join(f"{label} {ee['modules_loaded']}" for label, ee in states.items())
        + f"); {args.starts} interleaved starts",
        "",
        "| what | ratio | goal |",
        "|---|---|---|",
        *[f"| {what} | {ratio} | {goal}x |" for what, ratio, goal in rows],
        "",
        "| variant | median |",
        "|---|---|",
        *[f"| {name} ({label}) | {value:.1f} µs |" for label, ee in states.items() for name, value in ee["median_us"].items()],
        *[f"| {name} | {value:.1f} ms CPU |" for name, value in st["median_cpu_ms"].items()],
        "",
        f"`inductor-knobs --help` / `--version` import torch: {'no' if all(result['cli_without_torch'].values()) else 'YES'}",
        "",
        "Enter/exit ratios: median over rounds of each round's paired ratio [95% percentile-bootstrap interval, "
        "unit of replication a round]; start-up ratios: ratio of median CPU times over starts.",
    ]
    (out / "overhead.md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
