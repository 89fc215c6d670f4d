"""``ik.serving.warmup(cudnn_sdpa_trial=...)``: measure cuDNN attention's avoid-recompile on this model, both ways.

torch reads ``TORCH_CUDNN_SDPA_AVOID_RECOMPILE`` once per process, at its first dense cuDNN attention call
(2.9+: :mod:`inductor_knobs.patches.features`), so one process cannot measure both settings: the trial
runs the model in two fresh processes (``python -m inductor_knobs.serving.sdpa_trial``), one with the
variable ``0`` and one with ``1``, each warming the same shapes and then calling the probe shapes it did
not warm.  Per arm it reports the steady call (median of the last call at each warmed shape) and the
per-shape cost (median over probes of the first call less the second).  :func:`decide` recommends the
variable only where it cut the per-shape cost on this model, and names its steady-state cost beside the
gain: with a bias (a compiled graph that passes the causal mask as one), or q/k/v that are not BSHD, torch
falls back to a plan per shape and the trial measures no gain.

The model comes from a builder, ``"module:function"``, importable in a fresh process, whose function returns
``(fn, factory)`` as :func:`~inductor_knobs.serving.warm_up.warmup` takes them (``factory(shape)`` gives a
call's inputs).  Shapes and probes must be JSON values (ints, usually).
"""

from __future__ import annotations

import importlib
import json
import os
import statistics
import subprocess
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from ..errors import InvalidKnobValue, torch_version
from ..ext import CUDNN_SDPA_AVOID_RECOMPILE_VAR

#: The line prefix the child prints its result after (everything else on stdout is the model's).
RESULT = "inductor_knobs.sdpa_trial "
#: The gain must be at least this many ms and this share of the per-shape cost without the variable.
MIN_GAIN_MS = 1.0
MIN_GAIN_SHARE = 0.2


@dataclass(frozen=True)
class TrialArm:
    """One fresh process's measurement.

    Attributes:
        avoid_recompile: the value of ``TORCH_CUDNN_SDPA_AVOID_RECOMPILE`` it ran with.
        steady_ms: median over warmed shapes of the last call's ms.
        new_shape_ms: median over probes of (first call - second call) ms at a shape it had not warmed.
        probes: how many probe shapes it called.
        torch_said: torch's warnings that name the variable (``"... only works without bias ..."``: the
            path was not taken), which prove the process read it.
    """

    avoid_recompile: bool
    steady_ms: float
    new_shape_ms: float
    probes: int
    torch_said: tuple[str, ...] = ()


@dataclass(frozen=True)
class TrialVerdict:
    """What the two arms say about ``TORCH_CUDNN_SDPA_AVOID_RECOMPILE=1`` on this model.

    Attributes:
        fix: the knob (``cudnn_sdpa_avoid_recompile``).
        off: the arm with the variable ``0``.
        on: the arm with ``1``.
        gain_ms: per-shape cost saved at a new shape (off - on), ms.
        cost_ms: steady-state cost per call (on - off), ms (negative: faster).
        recommended: whether the gain clears :data:`MIN_GAIN_MS` and :data:`MIN_GAIN_SHARE`.
        text: one sentence with both measurements.
    """

    fix: str
    off: TrialArm
    on: TrialArm
    gain_ms: float
    cost_ms: float
    recommended: bool
    text: str


def decide(
    off: TrialArm, on: TrialArm, *, min_gain_ms: float = MIN_GAIN_MS, min_gain_share: float = MIN_GAIN_SHARE
) -> TrialVerdict:
    """Recommend the variable only where it measured a gain at new shapes; say its steady-state cost either way.

    Args:
        off: the arm with the variable ``0``.
        on: the arm with ``1``.
        min_gain_ms: the least per-shape saving (ms) that counts as a gain.
        min_gain_share: the least saving as a share of ``off.new_shape_ms``.

    Returns:
        TrialVerdict: the gain, the cost, whether it is recommended, and the sentence for the report.
    """
    gain = off.new_shape_ms - on.new_shape_ms
    cost = on.steady_ms - off.steady_ms
    recommended = gain >= min_gain_ms and gain >= min_gain_share * max(off.new_shape_ms, 0.0)
    change = 100 * cost / off.steady_ms if off.steady_ms > 0 else 0.0
    measured = (
        f"a first call at a new shape paid {off.new_shape_ms:.1f} ms more than its second call without it and "
        f"{on.new_shape_ms:.1f} ms with it (measured over {on.probes} probes in fresh processes); the steady call "
        f"went from {off.steady_ms:.2f} ms to {on.steady_ms:.2f} ms ({change:+.0f}%)"
    )
    said = "; ".join(dict.fromkeys(on.torch_said))
    if said:
        measured += f"; torch said: {said}"
    if recommended:
        text = (
            f"{CUDNN_SDPA_AVOID_RECOMPILE_VAR}=1 (ik.knobs(cudnn_sdpa_avoid_recompile=True) entered before CUDA starts, "
            f"or INDUCTOR_KNOBS_CUDNN_SDPA_AVOID_RECOMPILE=1): {measured}"
        )
    else:
        text = f"{CUDNN_SDPA_AVOID_RECOMPILE_VAR}=1 measured no gain on this model, so it is not recommended: {measured}"
    return TrialVerdict("cudnn_sdpa_avoid_recompile", off, on, gain, cost, recommended, text)


def measure(
    builder: str, shapes: Sequence[Any], probes: Sequence[Any], *, timeout_s: float = 1800.0
) -> tuple[TrialArm, TrialArm]:
    """Run the model twice in fresh processes, with the variable ``0`` and ``1``; return (off, on).

    Args:
        builder: ``"module:function"``; the function returns ``(fn, factory)``.
        shapes: the shapes to warm (JSON values).
        probes: shapes not warmed, called after (JSON values, at least one).
        timeout_s: seconds each process may take.

    Returns:
        tuple[TrialArm, TrialArm]: the arm without, then with, the variable.

    Raises:
        InvalidKnobValue: a builder not spelled ``module:function``, no shapes, no probes, or shapes that are not JSON.
        RuntimeError: a process failed or printed no result (its stderr's tail is in the message).
    """
    if not isinstance(builder, str) or builder.count(":") != 1 or not all(builder.split(":")):
        raise InvalidKnobValue(f"cudnn_sdpa_trial={builder!r} is invalid on torch {torch_version()}: allowed 'module:function'")
    if not shapes:
        raise InvalidKnobValue(f"cudnn_sdpa_trial needs shapes to warm (none given) on torch {torch_version()}")
    if not probes:
        raise InvalidKnobValue(f"cudnn_sdpa_trial needs probe shapes (shapes not warmed) on torch {torch_version()}")
    try:
        spec = json.dumps({"builder": builder, "shapes": list(shapes), "probes": list(probes)})
    except TypeError as err:
        raise InvalidKnobValue(f"cudnn_sdpa_trial needs shapes and probes that are JSON values ({err})") from None
    return _arm(spec, False, timeout_s), _arm(spec, True, timeout_s)


def _arm(spec: str, on: bool, timeout_s: float) -> TrialArm:
    env = {**os.environ, CUDNN_SDPA_AVOID_RECOMPILE_VAR: "1" if on else "0"}
    env.pop("INDUCTOR_KNOBS_CUDNN_SDPA_AVOID_RECOMPILE", None)  # the arm's value is the variable's
    done = subprocess.run(
        [sys.executable, "-m", __name__, spec], env=env, capture_output=True, text=True, timeout=timeout_s, check=False
    )
    lines = [line[len(RESULT) :] for line in done.stdout.splitlines() if line.startswith(RESULT)]
    if done.returncode != 0 or not lines:
        raise RuntimeError(f"the cuDNN SDPA trial ({CUDNN_SDPA_AVOID_RECOMPILE_VAR}={int(on)}) failed: {done.stderr[-2000:]}")
    found = json.loads(lines[-1])
    return TrialArm(**{**found, "torch_said": tuple(found.get("torch_said", ()))})


def run_arm(fn: Callable[..., Any], factory: Callable[[Any], Any], shapes: Sequence[Any], probes: Sequence[Any]) -> TrialArm:
    """One arm, in this process: warm ``shapes`` (two calls each), then call each probe twice; CUDA synchronised."""
    import warnings

    from .signature import as_call

    def timed(item: Any) -> float:
        import torch

        args, kwargs = as_call(item)
        start = time.perf_counter()
        fn(*args, **kwargs)
        if torch.cuda.is_available():
            torch.cuda.synchronize()
        return 1000 * (time.perf_counter() - start)

    steady, paid = [], []
    with warnings.catch_warnings(record=True) as caught:  # torch's TORCH_WARN_ONCE arrive as UserWarning
        warnings.simplefilter("always")
        for shape in shapes:
            item = factory(shape)
            timed(item)
            steady.append(timed(item))
        for shape in probes:
            item = factory(shape)
            first = timed(item)
            paid.append(first - timed(item))
    said = tuple(dict.fromkeys(str(w.message) for w in caught if CUDNN_SDPA_AVOID_RECOMPILE_VAR in str(w.message)))
    on = os.environ.get(CUDNN_SDPA_AVOID_RECOMPILE_VAR) == "1"
    return TrialArm(on, statistics.median(steady), statistics.median(paid), len(paid), said)


def main(argv: Sequence[str]) -> int:
    """The child: build the model from the spec's builder, run one arm, print its result line."""
    spec = json.loads(argv[0])
    module, _, function = spec["builder"].partition(":")
    fn, factory = getattr(importlib.import_module(module), function)()
    arm = run_arm(fn, factory, spec["shapes"], spec["probes"])
    print(RESULT + json.dumps({**vars(arm), "torch_said": list(arm.torch_said)}), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
