"""Where ``force_gemm_autotune``'s enter/exit time goes: its ratio to ``config.patch`` with one part switched off.

    python bench/overhead_parts.py [--rounds 21]

A diagnostic for whoever makes enter/exit cheaper next, not a guarantee: each variant switches one
part of the contract off (so it is *not* a correct block) to show what that part costs, in one
interleaved run, as the median over rounds of each round's paired ratio to ``config.patch`` of the
same two keys (the unit of replication is a round, as in ``bench/overhead.py``):

- ``no gate record``: the ``is_big_gpu`` record does nothing (no wrapper, cache clears or slot);
- ``wrappers stay installed``: a permanent holder keeps the ``is_big_gpu`` wrapper and the compile
  interception installed, so blocks do not install and remove them.
"""

from __future__ import annotations

import argparse
import statistics
import time
from collections.abc import Callable
from typing import Any


def _blocks(make: Callable[[], Any], count: int = 200) -> float:
    start = time.perf_counter()
    for _ in range(count):
        with make():
            pass
    return (time.perf_counter() - start) / count * 1e6


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=21)
    args = parser.parse_args()

    import torch
    import torch._inductor.config as cfg

    import inductor_knobs as ik
    from inductor_knobs.core import gate, interception

    torch.compile(lambda x: (x @ x).relu())(torch.randn(16, 16))  # a process that has compiled
    real_apply, real_revert = gate.GateChange.apply, gate.GateChange.revert
    holder = object()

    def no_gate_record(on: bool) -> None:
        gate.GateChange.apply = (lambda self: None) if on else real_apply  # type: ignore[method-assign]
        gate.GateChange.revert = (lambda self: None) if on else real_revert  # type: ignore[method-assign]

    def wrappers_stay_installed(on: bool) -> None:
        for patch in (gate.GATE_PATCH, interception.INTERCEPTION):
            (patch.acquire if on else patch.release)(holder)

    variants: dict[str, Callable[[bool], None]] = {
        "full block": lambda on: None,
        "no gate record": no_gate_record,
        "wrappers stay installed": wrappers_stay_installed,
    }
    forced = lambda: ik.force_gemm_autotune(min_sms=40)  # noqa: E731
    baseline = lambda: cfg.patch(max_autotune_gemm=True, max_autotune_gemm_backends="ATEN,TRITON")  # noqa: E731
    ratios: dict[str, list[float]] = {name: [] for name in variants}
    for index in range(args.rounds):
        order = list(variants) if index % 2 == 0 else list(reversed(variants))
        for name in order:
            variants[name](True)
            try:
                _blocks(forced, 5)  # warm the switched path
                ratios[name].append(_blocks(forced) / _blocks(baseline))
            finally:
                variants[name](False)
    full = statistics.median(ratios["full block"])
    print(f"torch {torch.__version__}; force_gemm_autotune(min_sms=40) / config.patch of its keys, {args.rounds} rounds")
    for name, values in ratios.items():
        ratio = statistics.median(values)
        print(f"{name:26s} {ratio:.2f}x" + ("" if name == "full block" else f"  (the part costs {full - ratio:+.2f}x)"))


if __name__ == "__main__":
    main()
