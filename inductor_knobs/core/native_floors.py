"""torch's own floors that the attestation names: Inductor's deterministic mode, which bans the benchmarking a knob asked for.

One function, called once by the attestation (:mod:`inductor_knobs.core.attest`): the facts are the patch module's
(``patches/_native_floors.py``: ``deterministic_bans``, with torch's file:line per release).
"""

from __future__ import annotations

import dataclasses
import importlib
from collections.abc import Sequence
from typing import Any

from .asked import INDUCTOR_CONFIG
from .attestation import AttestedSetting


def banned_by_deterministic_mode(patches: Any, settings: Sequence[AttestedSetting]) -> list[AttestedSetting]:
    """``settings`` with a cause on each one that asked for benchmarking which Inductor's deterministic mode bans.

    Read inside the compile: ``torch._inductor.config.deterministic`` (torch 2.10+, env ``TORCHINDUCTOR_DETERMINISTIC``)
    on, and a setting that took effect asks for GEMM autotuning (``max_autotune``, ``max_autotune_gemm``: torch then
    picks the first ATen choice without benchmarking, on every device) or coordinate descent (reductions and scans
    are not tuned).  Such a setting then counts as not applied: :class:`~inductor_knobs.errors.KnobNotApplied`, or a
    warning with ``on_mismatch="warn"``, naming deterministic mode.

    Args:
        patches (TorchPatches): the installed torch's patch module (its ``deterministic_bans``).
        settings (Sequence[AttestedSetting]): what the compile read.

    Returns:
        list[AttestedSetting]: the same settings, with ``cause`` set on the banned ones.
    """
    cfg = importlib.import_module(INDUCTOR_CONFIG)
    bans = patches.deterministic_bans(cfg, [(s.key, s.compiled_with) for s in settings if s.ok])
    return [
        dataclasses.replace(
            s,
            cause=f"Inductor's deterministic mode is on (torch._inductor.config.deterministic=True, env "
            f"TORCHINDUCTOR_DETERMINISTIC=1): it {bans[s.key]}; turn the mode off for this compile, or leave the knob out",
        )
        if s.key in bans and s.ok
        else s
        for s in settings
    ]
