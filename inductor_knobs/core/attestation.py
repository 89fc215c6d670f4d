"""The proof of what a compile compiled with: :class:`CompileAttestation`, one per graph, read inside Inductor.

Owns what blocks asked for (:class:`Asked`, by scope and rank), reading it back inside a compile
(:func:`attest`) and enforcing each value's ``on_mismatch`` policy.
"""

from __future__ import annotations

import dataclasses
import importlib
import threading
import warnings
from collections.abc import Iterable, Mapping, Sequence
from contextlib import AbstractContextManager, nullcontext
from dataclasses import dataclass
from typing import Any

from ..errors import KnobNotApplied, KnobNotAppliedWarning
from ..patches.torch_2_4 import TorchPatches
from . import events, gate
from .changes import SETTINGS, SETTINGS_MODULE, diagnose, read_setting, setting_matches
from .events import current_compile_id
from .knobs import CACHE_BYPASS_KEY, cache_rule
from .scope import Life, ScopedSlot
from .torch_compat import INDUCTOR_CONFIG


@dataclass(frozen=True)
class AttestedSetting:
    """One asked value as Inductor saw it inside a compile.

    Attributes:
        key (str): the config key (``triton.cudagraphs``; outside Inductor's config prefixed with the module).
        asked: the value inductor_knobs set.
        compiled_with: the value read inside the compile.
        source (str): who asked (``knobs``, ``env``, ``emulate_gpu``, ``mode:max-autotune`` …).
        overrode: the different value torch.compile's mode/options asked for, which lost, or None.
        cause (str | None): why ``compiled_with`` differs from ``asked``; None when it does not.
    """

    key: str
    asked: Any
    compiled_with: Any
    source: str
    overrode: Any = None
    cause: str | None = None

    @property
    def ok(self) -> bool:
        return self.cause is None

    @property
    def came_from(self) -> str:
        """Where ``compiled_with`` came from: ``source``, or the cause's kind."""
        return self.source if self.cause is None else self.cause.split(":", 1)[0]

    def to_dict(self) -> dict[str, Any]:
        return {f.name: _plain(getattr(self, f.name)) for f in dataclasses.fields(self)}


@dataclass(frozen=True)
class CompileAttestation:
    """What one Inductor graph compile (forward, backward or inference) compiled with.

    Attributes:
        compile_id (str | None): Dynamo's compile id (``"0/1"``), or None outside Dynamo.
        graph (str): ``"forward"``, ``"backward"``, ``"inference"``, or ``"cached"`` (see ``cache``).
        settings (tuple[AttestedSetting, ...]): every asked value, read inside the compile.
        gate (tuple[Verdict, ...]): the ``is_big_gpu`` verdict per CUDA device of the graph under the active
            override (empty without an override or CUDA inputs).
        gate_problem (str | None): why the override could not hold (``is_big_gpu`` replaced), or None.
        cache (str | None): which cache served it: ``"fx_graph"``, ``"aot_autograd"`` (the whole compile), or None.
            Values are read as hashed into the cache key (less ``torch/_inductor/config.py:_cache_config_ignore_prefix``).
    """

    compile_id: str | None
    graph: str
    settings: tuple[AttestedSetting, ...]
    gate: tuple[gate.Verdict, ...] = ()
    gate_problem: str | None = None
    cache: str | None = None

    @property
    def cache_hit(self) -> bool:
        """Whether a cache served this compile (see ``cache``)."""
        return self.cache is not None

    @property
    def ok(self) -> bool:
        return self.gate_problem is None and all(s.ok for s in self.settings)

    @property
    def mismatches(self) -> list[AttestedSetting]:
        return [s for s in self.settings if not s.ok]

    def value(self, key: str) -> Any:
        """The value ``key`` compiled with. Raises KeyError when it was not asked for."""
        for setting in self.settings:
            if setting.key == key:
                return setting.compiled_with
        raise KeyError(key)

    def to_dict(self) -> dict[str, Any]:
        return {
            "compile_id": self.compile_id,
            "graph": self.graph,
            "ok": self.ok,
            "settings": [s.to_dict() for s in self.settings],
            "gate": [vars(v) for v in self.gate],
            "gate_problem": self.gate_problem,
            "cache": self.cache,
        }


def _plain(value: Any) -> Any:
    return value if isinstance(value, (bool, int, float, str, type(None))) else repr(value)


def unwrap_not_applied(exc: BaseException | None) -> KnobNotApplied | None:
    """The :class:`KnobNotApplied` inside torch's wrapping of ``exc`` (BackendCompilerFailed …), or None."""
    seen = set()
    while exc is not None and id(exc) not in seen:
        if isinstance(exc, KnobNotApplied):
            return exc
        seen.add(id(exc))
        exc = getattr(exc, "inner_exception", None) or exc.__cause__ or exc.__context__
    return None


#: The "module" of an asked cache salt: ``Asked(CACHE_SALT, tag, True, source)`` asks that every
#: compile's cache keys carry ``tag``; one slot per tag, so salts compose.
CACHE_SALT = "cache_salt"
#: The "module" of an asked choices handler (``lookup_table``): ``Asked(CHOICES_HANDLER, "V.choices",
#: "LookupTableChoices", ...)``; the interception installs torch's handler inside each compile.
CHOICES_HANDLER = "torch._inductor.virtualized"

#: Precedence ranks of asked values (higher wins; equal ranks: the innermost block wins).
KNOB, EMULATION = 1, 2


@dataclass(frozen=True)
class Asked:
    """One value inductor_knobs asked for: ``key`` (dotted as torch spells it) of config ``module``, who asked
    (``source``), its ``rank`` (:data:`KNOB`, :data:`EMULATION`), ``on_mismatch`` (``"raise"``/``"warn"``), and
    the warning to issue when it overrides a different value a mode, options or a knob asked for."""

    module: str
    key: str
    value: Any
    source: str
    rank: int = KNOB
    on_mismatch: str = "raise"
    overriding_warning: type[Warning] | None = None

    @property
    def label(self) -> str:
        return self.key if self.module in (INDUCTOR_CONFIG, SETTINGS_MODULE) else f"{self.module}.{self.key}"


#: One block's asked values, by (module, key), with the block's life.
Layer = tuple[Life, Mapping[tuple[str, str], Asked]]
#: The layers of this thread's/task's blocks, innermost last (a child context keeps its copy after they exit).
SCOPED_ASKED: ScopedSlot[tuple[Layer, ...]] = ScopedSlot("inductor_knobs.core.attestation", ())
PROCESS_ASKED: dict[tuple[str, str], Asked] = {}
PROCESS_ASKED_LOCK = threading.RLock()  # an RLock only so a test can tell this thread holds it (_is_owned)


def merge_asked(base: Mapping[tuple[str, str], Asked], top: Mapping[tuple[str, str], Asked]) -> dict[tuple[str, str], Asked]:
    """``top`` over ``base``, slot by slot: the higher rank wins, ``top`` on a tie."""
    merged = dict(base)
    for slot, asked in top.items():
        if slot not in merged or asked.rank >= merged[slot].rank:
            merged[slot] = asked
    return merged


def effective_asked(patches: TorchPatches) -> dict[tuple[str, str], Asked]:
    """What applies on this thread now: the process layer (env), then blocks still alive (inner wins), by rank."""
    merged = dict(PROCESS_ASKED)
    for life, values in SCOPED_ASKED.scopes[patches.config_is_thread_local].get():
        if life.alive:
            merged = merge_asked(merged, values)
    return merged


def by_slot(asked: Iterable[Asked]) -> dict[tuple[str, str], Asked]:
    """``asked`` keyed by (module, key), as :class:`AskChange` takes it (a later one wins)."""
    return {(a.module, a.key): a for a in asked}


@dataclass
class Snapshot:
    """What was asked when Inductor started compiling one graph (for its inner compiles); ``asked`` has the
    cache salt as config values, ``requested`` what this thread asked before that (its salt as tags)."""

    patches: TorchPatches
    asked: dict[tuple[str, str], Asked]
    override: gate.Override | None
    overrode: dict[str, Any]
    #: The event scope marks at the start (a lazy backward publishes under them) and who heard the start.
    marks: frozenset[int]
    addressed: tuple[events.Subscriber, ...]
    requested: Mapping[tuple[str, str], Asked] | None = None
    attested: int = 0  # inner compiles attested so far (none when AOTAutograd's cache served the compile)


def attest_cache_hit(snapshot: Snapshot, config_patches: Mapping[str, Any], args: tuple[Any, ...]) -> None:
    """Attest, deliver and enforce a compile AOTAutograd's cache served whole, read under the
    ``config.patch(config_patches)`` that ``compile_fx`` applied when it computed the cache key."""
    cfg = importlib.import_module(INDUCTOR_CONFIG)
    with cfg.patch(dict(config_patches)), choices_for(snapshot):
        attestation = served_from_cache(dataclasses.replace(attest(snapshot, args, {}), graph="cached"), "aot_autograd")
    events.deliver(snapshot.addressed, "attestation", attestation)
    enforce(snapshot, attestation)


def served_from_cache(attestation: CompileAttestation, cache: str) -> CompileAttestation:
    """``attestation`` with ``cache`` (``"fx_graph"``, ``"aot_autograd"``) set and a cause on each ``bypass`` knob
    asked on (``trace``, ``force_disable_caches``): it acts only while Inductor generates code, which a hit skips."""
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


def choices_for(snapshot: Snapshot) -> AbstractContextManager[Any]:
    """The lookup table's choices handler for one compile on this thread, when the snapshot asks for it;
    ``KnobNotApplied`` when the thread's handler is someone's own ``InductorChoices`` subclass."""
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


def attest(snapshot: Snapshot, args: tuple[Any, ...], kwargs: dict[str, Any]) -> CompileAttestation:
    """Read every asked value and the gate's verdicts inside the compile of ``compile_fx_inner(*args, **kwargs)``."""
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


def enforce(snapshot: Snapshot, attestation: CompileAttestation) -> None:
    """Warn or raise :class:`KnobNotApplied` (by each value's policy) for what did not take effect; a compile
    about to raise publishes its attestation first, so recorders see the mismatch."""
    messages = [
        (
            next(a.on_mismatch for a in snapshot.asked.values() if a.label == s.key),
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


def banned_by_deterministic_mode(patches: Any, settings: Sequence[AttestedSetting]) -> list[AttestedSetting]:
    """``settings`` with a cause on each that took effect but asks for benchmarking (GEMM autotuning, coordinate
    descent) which ``torch._inductor.config.deterministic`` (2.10+), read inside the compile, bans."""
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
