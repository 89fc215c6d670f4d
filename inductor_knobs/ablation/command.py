"""``inductor-knobs ablate``: arguments, validation before any arm runs, and output.

Every check (workload, arms, GPUs, ``--out``, ``--plot``'s matplotlib, the files of ``--compare`` and
``--merge``) happens before the first worker starts.  SIGINT and SIGTERM stop the workers, keep the
finished runs (``results.json`` with ``"partial": true``) and exit 130 / 143 with one line.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import sys
from typing import Any

from ..emulate import EmulationSpec, spec_from_text
from ..errors import InvalidKnobValue
from . import report, runner, spec, workloads
from .runner import Interrupted, Plan, execute

DEFAULT_WORKLOAD = "reference_mlp"


def add_parser(sub: Any) -> None:
    p = sub.add_parser(
        "ablate",
        help="compare Inductor settings: isolated arms, interleaved repeats, statistics",
        description="With no arguments: the reference MLP on the best device, arms default, max-autotune, "
        "max-autotune-no-cudagraphs and force_gemm_autotune.",
    )
    p.add_argument(
        "--workload", help=f"built-in ({', '.join(workloads.BUILTIN)}) or pkg.module:factory (default {DEFAULT_WORKLOAD})"
    )
    p.add_argument("--arm", action="append", default=[], help="NAME:knob=value,... (repeatable); 'eager' for the eager baseline")
    p.add_argument("--grid", action="append", default=[], help="knob=v1,v2 or knob=v1|v2 (repeatable; cartesian product)")
    p.add_argument("--config", help="a TOML file of arms (see examples/ablation.toml)")
    p.add_argument("--baseline", help="the arm speedups are relative to (default: the first)")
    p.add_argument("--repeats", type=int, help="processes per arm, interleaved (default 3; 1 with --quick)")
    p.add_argument("--iters", type=int, help="latency samples per process (default 20; 5 with --quick)")
    p.add_argument("--quick", action="store_true", help="small inputs, few samples (CI)")
    p.add_argument("--device", choices=("cuda", "cpu"), help="default: cuda if available")
    p.add_argument(
        "--gpus",
        help="comma-separated GPU indices to spread arms over, as torch numbers them here, i.e. positions in "
        "CUDA_VISIBLE_DEVICES when it is set (default: all visible)",
    )
    p.add_argument(
        "--emulate-sms",
        metavar="N|PRESET",
        help="run every arm under ik.emulate_gpu: an SM count or a GPU preset such as T4 (CUDA, torch >= 2.11)",
    )
    p.add_argument("--timeout", type=float, default=900.0, help="seconds per arm process (default 900)")
    p.add_argument("--shard", help="i/n: run only this shard of the jobs (0-based i), e.g. one per node")
    p.add_argument("--out", help="a new or empty directory for results.json, results.csv, results.md (and results.png)")
    p.add_argument(
        "--overwrite",
        action="store_true",
        help="let --out be a directory with earlier results: results.json/.csv/.md/.png are removed before the run",
    )
    p.add_argument("--plot", action="store_true", help="also write results.png (needs pip install 'inductor-knobs[plot]')")
    p.add_argument(
        "--strict",
        action="store_true",
        help="exit 1 if any run failed or compiled with a knob not applied (default: only if all runs failed)",
    )
    p.add_argument("--compare", nargs=2, metavar=("OLD", "NEW"), help="print what changed between two results.json")
    p.add_argument("--merge", nargs="+", metavar="RESULTS", help="merge shard results.json files (with --out)")


def _positive(name: str, value: int | None, default: int) -> int:
    if value is None:
        return default
    if value < 1:
        raise InvalidKnobValue(f"--{name}={value} is invalid: allowed an int >= 1")
    return value


def _shard(text: str | None) -> tuple[int, int]:
    if text is None:
        return (0, 1)
    try:
        index, count = (int(p) for p in text.split("/"))
    except ValueError:
        index, count = -1, 0
    if not 0 <= index < count:
        raise InvalidKnobValue(f"--shard={text!r} is invalid: allowed i/n with 0 <= i < n, e.g. 0/4")
    return index, count


def _timeout(value: float) -> float:
    if not value > 0:  # also refuses nan
        raise InvalidKnobValue(f"--timeout={value} is invalid: allowed seconds > 0")
    return value


def _check_plot(plot: bool) -> None:
    """Raise InvalidKnobValue for ``--plot`` without matplotlib, before anything runs (not after
    every arm ran, when results.png is written)."""
    if plot and importlib.util.find_spec("matplotlib") is None:
        raise InvalidKnobValue(
            "--plot needs matplotlib, which is not installed: pip install 'inductor-knobs[plot]' (or leave out --plot)"
        )


def _check_out(out: str | None, overwrite: bool) -> None:
    """Raise InvalidKnobValue unless ``--out`` is new, empty, or holds earlier results and ``--overwrite``
    is given: a second run into the same directory would mix its files with the first's (an old
    results.png next to new results.json)."""
    if out is None:
        return
    if os.path.exists(out) and not os.path.isdir(out):
        raise InvalidKnobValue(f"--out {out!r} is not a directory: allowed a new or empty directory")
    names = sorted(os.listdir(out)) if os.path.isdir(out) else []
    if names and not overwrite:
        shown = ", ".join(names[:4]) + (", ..." if len(names) > 4 else "")
        raise InvalidKnobValue(
            f"--out {out!r} is not empty ({shown}): allowed a new or empty directory; add --overwrite to "
            f"replace the results written there ({', '.join(report.OUTPUT_FILES)}; other files are kept)"
        )


def _clear_out(out: str | None, overwrite: bool) -> None:
    """With ``--overwrite``, remove what an earlier run wrote into ``--out``; only after validation."""
    if out is None or not overwrite:
        return
    for name in report.OUTPUT_FILES:
        path = os.path.join(out, name)
        if os.path.isfile(path):
            os.remove(path)


def _load(path: str, option: str) -> dict[str, Any]:
    """Read one results.json named by ``--compare`` or ``--merge``.

    Raises:
        InvalidKnobValue: unreadable, not JSON, or not an ablation's results (the message names the file).
    """
    source = f"{option} {path!r}"
    try:
        with open(path, encoding="utf-8") as src:
            data = json.load(src)
    except OSError as err:
        raise InvalidKnobValue(f"{source} cannot be read: {err.strerror or err}") from err
    except ValueError as err:  # JSONDecodeError and UnicodeDecodeError
        raise InvalidKnobValue(f"{source} is not JSON ({err}): allowed a results.json written by ablate --out") from err
    return report.check(data, source)


def _emulation(text: str | None, device: str, gpus: list[int]) -> EmulationSpec | None:
    """Check ``--emulate-sms`` here, before any arm runs (the workers re-check on the GPU)."""
    if text is None:
        return None
    import torch

    emulation = spec_from_text(text, source=f"--emulate-sms={text!r}")
    if device != "cuda":
        raise InvalidKnobValue(f"--emulate-sms={text!r} needs --device cuda (emulation runs on a CUDA green context)")
    physical = min(torch.cuda.get_device_properties(g).multi_processor_count for g in gpus)
    if emulation.sms > physical:
        raise InvalidKnobValue(
            f"--emulate-sms={text!r} is not allowed: {emulation.sms} SMs; allowed 1..{physical}, the GPU's SM count"
        )
    return emulation


def build_plan(args: argparse.Namespace) -> Plan:
    """Everything validated: workload, arms, baseline, device, GPUs, shard.  Nothing runs here.

    Returns:
        The plan to execute.

    Raises:
        InvalidKnobValue, UnknownKnob: a bad option value (the message names the option).
    """
    import torch

    toml: dict[str, Any] = spec.load_toml(args.config) if args.config else {}
    workload = args.workload or toml.get("workload") or DEFAULT_WORKLOAD
    workloads.resolve(workload)
    device = args.device or ("cuda" if torch.cuda.is_available() else "cpu")
    if device == "cuda" and not torch.cuda.is_available():
        raise InvalidKnobValue(f"--device cuda: torch {torch.__version__} sees no CUDA GPU")
    visible = torch.cuda.device_count() if device == "cuda" else 0
    gpus = list(range(visible))
    if args.gpus:
        try:
            gpus = [int(g) for g in args.gpus.split(",")]
        except ValueError:
            gpus = [-1]
        missing = [g for g in gpus if not 0 <= g < visible]
        if missing:
            raise InvalidKnobValue(f"--gpus={args.gpus!r} names GPU(s) {missing} that do not exist: {visible} visible ({device})")
    for gpu in gpus if device == "cuda" else []:  # each worker's CUDA_VISIBLE_DEVICES, checked before anything runs
        runner.physical_gpu(gpu, os.environ.get("CUDA_VISIBLE_DEVICES"))
    emulate = _emulation(args.emulate_sms, device, gpus)
    arms = list(toml.get("arms", [])) + [spec.parse_arm(a) for a in args.arm] + spec.parse_grid(args.grid)
    if not (args.arm or args.grid or args.config):
        sms = torch.cuda.get_device_properties(gpus[0]).multi_processor_count if gpus else None
        arms = spec.default_arms(emulate.sms if emulate else sms)
    spec.check_names(arms)
    baseline = args.baseline or toml.get("baseline") or arms[0].name
    if baseline not in [a.name for a in arms]:
        raise InvalidKnobValue(f"--baseline={baseline!r} is not an arm; arms: {', '.join(a.name for a in arms)}")
    quick = bool(args.quick or toml.get("quick", False))
    return Plan(
        workload=workload,
        arms=arms,
        baseline=baseline,
        device=device,
        gpus=gpus,
        quick=quick,
        repeats=_positive("repeats", args.repeats if args.repeats is not None else toml.get("repeats"), 1 if quick else 3),
        iters=_positive("iters", args.iters, 5 if quick else 20),
        warmup=1 if quick else 3,
        timeout=_timeout(args.timeout),
        shard=_shard(args.shard),
        emulate=args.emulate_sms.strip() if emulate else None,
    )


def environment(plan: Plan) -> dict[str, Any]:
    import torch

    from .. import doctor

    name = (
        torch.cuda.get_device_name(plan.gpus[0])
        if plan.device == "cuda" and plan.gpus
        else f"CPU ({torch.backends.cpu.get_cpu_capability()})"
    )
    return {"torch": torch.__version__, "device_name": name, "doctor": doctor.collect()}


def run(args: argparse.Namespace) -> int:
    """Run the subcommand.

    Returns:
        The exit status: 0; 1 if every run failed (or, with ``--strict``, any failed or was NOT
        APPLIED); 128 + the signal's number (130 SIGINT, 143 SIGTERM) when interrupted.

    Raises:
        KnobsError: bad input, before any arm runs (the CLI prints it as one line).
    """
    try:
        with runner.signals_raise():
            return _run(args)
    except Interrupted as stop:  # before or after the arms ran: nothing to keep
        print(f"inductor-knobs: interrupted by {stop.name}", file=sys.stderr)
        return stop.status


def _run(args: argparse.Namespace) -> int:
    if args.compare:
        old, new = (_load(p, "--compare") for p in args.compare)
        for line in report.differences(old, new):
            print(f"warning: {line}", file=sys.stderr)
        print(report.compare(old, new))
        return 0
    _check_plot(args.plot)
    _check_out(args.out, args.overwrite)
    if args.merge:
        results = report.merge([_load(p, "--merge") for p in args.merge])
        _clear_out(args.out, args.overwrite)
    else:
        plan = build_plan(args)
        conflicts = {a.name: a.conflicts() for a in plan.arms}
        for name, items in conflicts.items():
            for item in items:  # shown before anything runs
                print(f"arm {name}: {item} (the knob wins: knob > options > mode > default)", file=sys.stderr)
        results = {
            "workload": plan.workload,
            "device": plan.device,
            "repeats": plan.repeats,
            "iters": plan.iters,
            "quick": plan.quick,
            "baseline": plan.baseline,
            "arms": [{**a.to_dict(), "overrides_mode": conflicts[a.name]} for a in plan.arms],
            "shard": list(plan.shard),
            "emulate_sms": plan.emulate,
            "environment": environment(plan),
            "runs": [],
            "partial": False,
        }
        _clear_out(args.out, args.overwrite)
        try:
            results["runs"] = execute(plan)
        except Interrupted as stop:
            with runner.signals_ignored():  # a second Ctrl-C must not lose the finished runs
                return _interrupted(args, results, stop)
    print(report.markdown(results))
    if args.out:
        for path in report.write(results, args.out, plot=args.plot):
            print(f"wrote {path}", file=sys.stderr)
    failed = [r for r in results["runs"] if not r.get("ok") or r.get("not_applied")]
    crashed = [r for r in results["runs"] if not r.get("ok")]
    return 1 if results["runs"] and (len(crashed) == len(results["runs"]) or (args.strict and failed)) else 0


def _interrupted(args: argparse.Namespace, results: dict[str, Any], stop: Interrupted) -> int:
    """Report and keep the runs that finished before ``stop``; returns its exit status."""
    results.update(runs=stop.runs, partial=True, interrupted=stop.name, planned_runs=stop.planned)
    if stop.runs:
        print(report.markdown(results))
    # No plot: whoever pressed Ctrl-C wants the prompt back, not a matplotlib import.
    paths = report.write(results, args.out) if args.out else []
    where = f"; partial results in {paths[0]}" if paths else ""
    print(
        f"inductor-knobs: interrupted by {stop.name}: {len(stop.runs)} of {stop.planned} runs finished, workers stopped{where}",
        file=sys.stderr,
    )
    return stop.status
