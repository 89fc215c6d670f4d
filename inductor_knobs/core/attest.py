"""Inside a compile: read what was asked and the gate verdict (the :class:`CompileAttestation`), and enforce it.

The compile interception (:mod:`inductor_knobs.core.interception`) keeps a :class:`_Snapshot` of what
was asked when Inductor started compiling a graph; here every asked key is read *inside* the compile
(Inductor config through the patch module's ``read_value``, process-global settings through
:mod:`inductor_knobs.core.torch_settings`), with the cause of any mismatch
(:mod:`inductor_knobs.core.why_not_applied`), and the ``is_big_gpu`` verdict per CUDA device of the
graph's inputs.  The attestation is delivered to the consumers that heard the compile start, then
:func:`_enforce` warns or raises :class:`~inductor_knobs.errors.KnobNotApplied` by each value's policy.
A compile that AOTAutograd's cache served whole is attested under the same ``config.patch`` that
``compile_fx`` computed its cache key under.
"""

from __future__ import annotations

import dataclasses
import importlib
import inspect
import warnings
from collections.abc import Mapping
from contextlib import AbstractContextManager, nullcontext
from dataclasses import dataclass, field
from typing import Any

from ..errors import KnobNotApplied, KnobNotAppliedWarning
from ..patches.torch_2_4 import TorchPatches
from . import events, gate
from .asked import CHOICES_HANDLER, INDUCTOR_CONFIG, Asked
from .attestation import AttestedSetting, CompileAttestation
from .knobs import CACHE_BYPASS_KEY, cache_rule
from .native_floors import banned_by_deterministic_mode
from .records import current_compile_id
from .torch_settings import SETTINGS, SETTINGS_MODULE, read_setting, setting_matches
from .why_not_applied import diagnose


@dataclass
class _Snapshot:
    """What was asked when Inductor started compiling one graph (for its inner compiles).

    ``asked`` has the cache salt as config values (:func:`~inductor_knobs.core.interception._with_salt`);
    ``requested`` is what this thread asked before that (its salt as tags), to tell whether a later
    inner compile is still under the same blocks.
    """

    patches: TorchPatches
    asked: dict[tuple[str, str], Asked]
    override: gate.Override | None
    overrode: dict[str, Any]
    #: The compile-event scope marks when the compile started: its lazily compiled backward publishes
    #: under them, and its attestations go to the consumers that heard the start (``addressed``).
    marks: frozenset[int]
    addressed: tuple[events.Subscriber, ...]
    signature: inspect.Signature | None = field(default=None)
    requested: Mapping[tuple[str, str], Asked] | None = field(default=None)
    #: Inner compiles attested so far (none when AOTAutograd's cache served the compile).
    attested: int = 0


def _attest_cache_hit(snapshot: _Snapshot, config_patches: Mapping[str, Any], args: tuple[Any, ...]) -> None:
    """Attest a compile that AOTAutograd's cache served whole (no inner compile ran).

    The values are read under the same ``config.patch(config_patches)`` that ``compile_fx`` applied
    when it computed the cache key, so they are what the cached artifact was built with.
    """
    cfg = importlib.import_module(INDUCTOR_CONFIG)
    with cfg.patch(dict(config_patches)), choices_for(snapshot):
        attestation = served_from_cache(dataclasses.replace(_attest(snapshot, args, {}), graph="cached"), "aot_autograd")
    _deliver(snapshot, attestation)


def served_from_cache(attestation: CompileAttestation, cache: str) -> CompileAttestation:
    """``attestation`` of a compile that torch's ``cache`` served, each knob read by its row's cache rule.

    A hit was built under the same cache key, so a ``keyed`` or ``salted`` value holds for it and a ``runtime``
    one acts when the code runs; a ``bypass`` knob (``trace``) acts only while Inductor generates code, which a hit
    skips, so it is attested as not applied (its bypass of the caches, ``force_disable_caches``, did not hold).  A
    bypass knob asked off (``trace=False``) and ``force_disable_caches=False`` turn nothing off, so a hit holds them.

    Args:
        attestation (CompileAttestation): what was read inside the compile.
        cache (str): ``"fx_graph"`` or ``"aot_autograd"``.

    Returns:
        CompileAttestation: with ``cache`` set and a cause on each ``bypass`` setting.
    """
    settings = tuple(
        dataclasses.replace(
            s,
            cause=f"torch's {cache} cache served this compile, and {s.key} acts only while Inductor "
            "generates code (the compile ran with the caches on although the knob turns them off: something set "
            f"{CACHE_BYPASS_KEY} back)",
        )
        if s.ok and s.asked and (cache_rule(s.key) == "bypass" or s.key == CACHE_BYPASS_KEY)
        else s
        for s in attestation.settings
    )
    return dataclasses.replace(attestation, settings=settings, cache=cache)


def choices_for(snapshot: _Snapshot) -> AbstractContextManager[Any]:
    """The lookup table's choices handler for one compile on this thread, when the snapshot asks for it.

    Raises:
        KnobNotApplied: the thread's handler is someone's own ``InductorChoices`` subclass, which the
            knob does not replace (torch's ``LookupTableChoices`` is the one that reads the table).
    """
    if not any(module == CHOICES_HANDLER for module, _ in snapshot.asked):
        return nullcontext()
    try:
        return snapshot.patches.lookup_handler()
    except TypeError as err:
        raise KnobNotApplied(
            f"lookup_table needs torch's LookupTableChoices as Inductor's choices handler, but this thread's handler "
            f"is {err} (config.inductor_choices_class or V.set_choices_handler); make it subclass "
            "torch._inductor.lookup_table.LookupTableChoices, or leave the knob out. Nothing was compiled"
        ) from None


def _attest(snapshot: _Snapshot, args: tuple[Any, ...], kwargs: dict[str, Any]) -> CompileAttestation:
    patches = snapshot.patches
    settings = []
    for (module, key), asked in sorted(snapshot.asked.items()):
        if module == SETTINGS_MODULE:  # a process-global torch setting (SDPA backends, TunableOp, an env var)
            seen = read_setting(patches, key)
            matched = setting_matches(patches, key, seen, asked.value)
            cause = None if matched else f"other code set it after the knobs did ({SETTINGS[key].what})"
        elif module == CHOICES_HANDLER:  # the lookup table's handler, installed by the interception for this compile
            seen = type(patches.choices_handler()).__name__
            cause = None if seen == asked.value else f"Inductor's choices handler on this thread is a {seen}"
        else:
            cfg = importlib.import_module(module)
            seen = patches.read_value(cfg, key)
            cause = None if _same(seen, asked.value) else diagnose(patches, cfg, key)
        settings.append(AttestedSetting(asked.label, asked.value, seen, asked.source, snapshot.overrode.get(key), cause))
    settings = banned_by_deterministic_mode(patches, settings)
    verdicts: list[gate.Verdict] = []
    problem = None
    if snapshot.override is not None:
        problem = _gate_problem()
        if problem is None:
            verdicts = [gate.verdict(d, snapshot.override) for d in _cuda_devices(args, kwargs)]
    graph = "backward" if kwargs.get("is_backward") else "inference" if kwargs.get("is_inference") else "forward"
    return CompileAttestation(current_compile_id(), graph, tuple(settings), tuple(verdicts), problem)


def _same(a: Any, b: Any) -> bool:
    return (type(a) is type(b) and a == b) or (isinstance(a, (int, float)) and not isinstance(a, bool) and a == b)


def _deliver(snapshot: _Snapshot, attestation: CompileAttestation) -> None:
    """Publish ``attestation`` to the consumers the compile addressed, then enforce it."""
    events.deliver(snapshot.addressed, "attestation", attestation)
    _enforce(snapshot, attestation)


def _enforce(snapshot: _Snapshot, attestation: CompileAttestation) -> None:
    """Warn or raise :class:`KnobNotApplied` (by each value's policy) for what did not take effect.

    A compile about to raise still publishes its attestation first, so recorders see the mismatch.
    """
    messages = [
        (
            snapshot.asked[_slot(snapshot, s.key)].on_mismatch,
            f"{s.key}={s.asked!r} (from {s.source}) did not take effect: Inductor compiled this {attestation.graph} graph "
            f"with {s.key}={s.compiled_with!r}, because {s.cause}",
        )
        for s in attestation.mismatches
    ]
    if attestation.gate_problem is not None:
        messages.append(("raise", f"the is_big_gpu override did not take effect: {attestation.gate_problem}"))
    for policy, message in messages:
        if policy == "warn":
            warnings.warn(message, KnobNotAppliedWarning, stacklevel=3)
    errors = [m for p, m in messages if p == "raise"]
    if errors:
        if attestation.cache is None:
            events.deliver(snapshot.addressed, "attestation", attestation)
        raise KnobNotApplied("; ".join(errors) + ". Fix the cause, leave the knob out, or pass on_mismatch='warn'")


def _slot(snapshot: _Snapshot, label: str) -> tuple[str, str]:
    return next(slot for slot, a in snapshot.asked.items() if a.label == label)


def _gate_problem() -> str | None:
    utils = importlib.import_module(gate.GATE_MODULE)
    found = getattr(utils, gate.GATE_NAME, None)
    wrapper = gate.installed_wrapper()
    if wrapper is None or found is wrapper:
        return None
    return f"{gate.GATE_MODULE}.{gate.GATE_NAME} is {found!r}, not inductor_knobs' wrapper (something replaced it)"


def _cuda_devices(args: tuple[Any, ...], kwargs: dict[str, Any]) -> list[Any]:
    import torch

    inputs = args[1] if len(args) > 1 else kwargs.get("example_inputs", ())
    devices = {t.device for t in inputs or () if isinstance(t, torch.Tensor) and t.device.type == "cuda"}
    return sorted(devices, key=str)
