"""Arms of an ablation: parsed from ``--arm``, ``--grid`` or a TOML file, validated before anything runs.

An arm is a set of knobs (any :class:`~inductor_knobs.core.knobs.Knobs` field, applied in the arm's
own process by env activation, i.e. as ``INDUCTOR_KNOBS_<KNOB>`` variables), plus the
``torch.compile`` arguments ``mode``, ``dynamic`` and ``fullgraph``; or ``eager`` (no compile).

Syntax:
- ``--arm NAME:knob=value,knob=value``; a value may itself hold commas
  (``--arm both:gemm_backends=ATEN,TRITON,min_sms=40``).  Bare names: ``--arm eager`` is the eager
  baseline, ``--arm default`` compiles with no knobs; any other bare name is an error (a typo of
  ``eager`` must not silently become a compiled arm), and ``--arm NAME:`` compiles with no knobs
  under another name.  An ``--arm`` name holds no whitespace and no ``=`` (``--arm 'x min_sms=40'``
  is a mistyped ``x:min_sms=40``).
- ``--grid knob=v1,v2`` (repeatable; the cartesian product of all grids); use ``|`` between values
  that hold commas: ``--grid 'gemm_backends=ATEN|ATEN,TRITON'``.
- TOML: top-level ``workload``, ``repeats``, ``baseline``, ``quick``, ``executor`` (``local`` or
  ``slurm``); ``[[arm]]`` tables with ``name`` and knobs; a ``[grid]`` table of lists; a ``[slurm]``
  table of Slurm job options (see :func:`.slurm_options.make_options`).
"""

from __future__ import annotations

import difflib
import itertools
import json
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from .. import PRESETS, Knobs
from ..errors import InvalidKnobValue, KnobsError, UnknownKnob, torch_version
from ..ext import ENV_PREFIX, KNOBS, plan
from ..ext import unknown_message as _unknown_message

COMPILE_ARGS = ("mode", "dynamic", "fullgraph")

#: ``--arm`` names that need no settings: the eager baseline and the compiled arm with no knobs.
BARE_ARMS = ("eager", "default")

ARM_SYNTAX = (
    "Arms are NAME:knob=value,... (e.g. --arm 'ma:mode=max-autotune'); bare names: 'eager' (not compiled) "
    "and 'default' (compiled, no knobs); NAME: compiles with no knobs"
)


@dataclass(frozen=True)
class Arm:
    """One configuration to measure.

    Attributes:
        name: its label in tables.
        knobs: knob name -> value as text (what ``INDUCTOR_KNOBS_<KNOB>`` would hold).
        compile_args: ``mode``, ``dynamic``, ``fullgraph`` for ``torch.compile``.
        eager: run the model uncompiled.
        emulate: run this arm under ``INDUCTOR_KNOBS_EMULATE_SMS`` (an SM count or GPU preset),
            whatever ``--emulate-sms`` says; None: as the ablation runs.
    """

    name: str
    knobs: dict[str, str] = field(default_factory=dict)
    compile_args: dict[str, Any] = field(default_factory=dict)
    eager: bool = False
    emulate: str | None = None

    def env(self) -> dict[str, str]:
        """The ``INDUCTOR_KNOBS_*`` variables that apply this arm's knobs in its process.

        Returns:
            dict[str, str]: ``INDUCTOR_KNOBS_<KNOB>`` -> value, one per knob.
        """
        return {ENV_PREFIX + k.upper(): v for k, v in self.knobs.items()}

    def to_dict(self) -> dict[str, Any]:
        """The arm as results.json and the worker's job hold it (``emulate`` only when set, so that
        files of arms without it keep their earlier form).

        Returns:
            dict[str, Any]: ``name``, ``knobs``, ``compile_args``, ``eager`` (and ``emulate``).
        """
        out = {"name": self.name, "knobs": self.knobs, "compile_args": self.compile_args, "eager": self.eager}
        if self.emulate:
            out["emulate"] = self.emulate
        return out

    def conflicts(self) -> list[str]:
        """Keys where this arm's knobs override its ``mode`` (the knob wins: knob > options > mode).

        Returns:
            list[str]: one sentence per overridden key, e.g. ``coordinate_descent_tuning=False overrides
            mode max-autotune-no-cudagraphs's True``.
        """
        mode = self.compile_args.get("mode")
        if self.eager or not mode:
            return []
        from ..ext import config_values, mode_options

        theirs = mode_options(mode, self.compile_args.get("dynamic"))
        ours = config_values(Knobs.from_env(self.env()))
        return [
            f"{key}={ours[key]!r} overrides mode {mode}'s {value!r}"
            for key, value in theirs.items()
            if key in ours and ours[key] != value
        ]


#: The knobs of the main job's ``gated`` arm: GEMM autotuning asked for (ATen and Triton candidates)
#: with torch's SM gate as it is, and Inductor's CUDA graphs (``triton.cudagraphs``) as
#: ``mode="max-autotune"`` has them (:data:`GRAPH_KNOBS`, the same in both arms, so the A/A control
#: stays A/A); ``force_gemm_autotune`` is the same plus ``min_sms``.
GRAPH_KNOBS = {"cudagraphs": "1"}
GATED_KNOBS = {"max_autotune_gemm": "1", "gemm_backends": "ATEN,TRITON", **GRAPH_KNOBS}


def gate_arms(sms: int, emulate: str | None = None, suffix: str = "") -> list[Arm]:
    """The main job's arms on a GPU: ``gated`` (GEMM autotuning asked for, torch's SM gate as it is:
    below the gate GEMMs stay with ATen) and ``force_gemm_autotune`` (the same knobs, the gate lowered
    to this GPU's SM count, so Triton GEMM templates are autotuned too).  Above the gate the two compile
    with the same effective settings: an A/A control.

    Both arms run Inductor's CUDA graphs (knob ``cudagraphs``, identically, so the A/A control stays A/A):
    a graph replay launches the whole iteration at once, so latency follows the kernels, as on a real
    GPU under ``mode="max-autotune"``; under SM emulation the captures go to the emulated partition
    (:mod:`inductor_knobs.emulation`).  ``max-autotune``'s pointwise tuning stays out: it does not change
    which GEMM kernel runs, and the question the main job answers is the gate's.

    Args:
        sms (int): the (emulated) GPU's SM count, the ``min_sms`` that opens the gate on it.
        emulate (str | None): SM emulation for these arms (``"T4"``), or None.
        suffix (str): appended to every name (``"@T4"``), so that two sections' arms stay distinct.

    Returns:
        list[Arm]: ``gated`` and ``force_gemm_autotune`` (with ``suffix``).
    """
    return [
        Arm("gated" + suffix, knobs=dict(GATED_KNOBS), emulate=emulate),
        Arm(
            "force_gemm_autotune" + suffix,
            knobs={"preset": "force_gemm_autotune", "min_sms": str(min(max(sms, 1), 1024)), **GRAPH_KNOBS},
            emulate=emulate,
        ),
    ]


def cpu_arms() -> list[Arm]:
    """The main job's arms on CPU, where there is no SM gate to test: ``default`` and
    ``max-autotune-no-cudagraphs`` (compile cost, and whether the GEMM kernels change).

    Returns:
        list[Arm]: the two arms.
    """
    return [Arm("default"), Arm("max-autotune-no-cudagraphs", compile_args={"mode": "max-autotune-no-cudagraphs"})]


def _text(value: Any) -> str:
    if isinstance(value, bool):
        return "1" if value else "0"
    if isinstance(value, Mapping):
        return json.dumps(dict(value))
    if isinstance(value, (list, tuple)):
        return ",".join(str(v) for v in value)
    return str(value)


def make_arm(name: str, settings: Mapping[str, Any], where: str | None = None) -> Arm:
    """Build and validate one arm from ``{key: value}`` (knobs, compile args, ``eager``).

    Each knob's value is checked by its row of the knob table (``Knob.parse`` then ``Knob.check``, what
    ``Knobs.from_env`` runs for an ``INDUCTOR_KNOBS_*`` variable), under the name the user wrote, then all
    of them together by :func:`~inductor_knobs.core.plan.plan` against the installed torch.

    Args:
        name (str): the arm's name.
        settings (Mapping[str, Any]): knob, ``preset``, ``mode``/``dynamic``/``fullgraph`` and ``eager``
            values (text or TOML values).
        where (str | None): how the user wrote the arm, to begin an error with (``"--arm x:"``,
            ``"[[arm]] 'x' in --config 'a.toml':"``); default ``"arm 'NAME':"``.

    Returns:
        Arm: the arm, checked against the installed torch.

    Raises:
        UnknownKnob: a key that is neither a knob, ``preset``, a compile argument nor ``eager``,
            an unknown preset or an unknown mode.
        InvalidKnobValue: a bad value; the message begins with ``where``, then ``knob='value'``, what is
            allowed and the torch version (``--arm x: gemm_backends='ATEN,FOO' is invalid on torch 2.13.0: allowed ...``).
    """
    if not name:
        raise InvalidKnobValue("an ablation arm needs a name (--arm NAME:knob=value,...)")
    where = where or f"arm {name!r}:"
    knobs: dict[str, str] = {}
    compile_args: dict[str, Any] = {}
    eager = name == "eager" and not settings
    allowed = [*Knobs.fields(), "preset", *COMPILE_ARGS, "eager"]
    for key, value in settings.items():
        if key == "eager":
            eager = _bool(where, key, value)
        elif key in COMPILE_ARGS:
            compile_args[key] = _compile_arg(where, key, value)
        elif key == "preset":
            knobs[key] = _text(value).strip()
            if knobs[key] not in PRESETS:
                raise UnknownKnob(f"{where} " + _unknown_message("preset", knobs[key], PRESETS))
        elif key in allowed:
            knobs[key] = _text(value)
            row = KNOBS[key]
            row.check(f"{where} {key}", row.parse(f"{where} {key}", knobs[key]))
        else:
            raise UnknownKnob(f"{where} " + _unknown_message("knob", key, allowed))
    arm = Arm(name, knobs, compile_args, eager)
    try:
        plan(Knobs.from_env(arm.env()))  # every check against the live torch; plan changes nothing
    except KnobsError as err:
        raise type(err)(f"{where} {err}") from None
    return arm


def _bool(where: str, key: str, value: Any) -> bool:
    if isinstance(value, bool):
        return value
    text = str(value).strip().lower()
    if text in ("1", "true", "yes", "on"):
        return True
    if text in ("0", "false", "no", "off"):
        return False
    raise InvalidKnobValue(f"{where} {key}={value!r} is invalid on torch {torch_version()}: allowed true or false")


def _compile_arg(where: str, key: str, value: Any) -> Any:
    if key == "fullgraph":
        return _bool(where, key, value)
    if key == "dynamic":
        return None if str(value).strip().lower() in ("none", "") else _bool(where, key, value)
    from ..ext import mode_options

    try:
        mode_options(str(value))
    except UnknownKnob as err:
        raise UnknownKnob(f"{where} {err}") from None
    return str(value)


def _check_name(text: str, name: str, bare: bool) -> None:
    # Only --arm names are checked: grid arms are named "knob=value knob=value" on purpose, and a
    # TOML table's name is a label, never parsed.
    if any(c.isspace() for c in name) or "=" in name:
        tokens = name.split()
        if "=" in tokens[0]:  # settings without a name
            meant = "NAME:" + ",".join(tokens)
        elif all("=" in t for t in tokens[1:]):  # a space where the ':' belongs
            meant = tokens[0] + ":" + ",".join(tokens[1:])
        else:
            meant = "x:min_sms=40"
        raise InvalidKnobValue(
            f"--arm {text!r}: the arm name {name!r} may not hold whitespace or '='; "
            f"expected NAME:knob=value,knob=value, e.g. --arm '{meant}'"
        )
    if bare and name and name not in BARE_ARMS:
        close = difflib.get_close_matches(name, BARE_ARMS, n=1)
        hint = f"; did you mean {close[0]!r}?" if close else "."
        raise UnknownKnob(f"--arm {text!r}: unknown arm {name!r}{hint} {ARM_SYNTAX}")


def parse_arm(text: str) -> Arm:
    """Parse one ``--arm``: ``NAME:knob=value,knob=value`` (values may hold commas), ``NAME:``
    (compiled, no knobs), or a bare ``eager`` or ``default``.

    Args:
        text (str): the option's value.

    Returns:
        Arm: the arm.

    Raises:
        InvalidKnobValue: a name with whitespace or ``=``, a setting without ``=``, or a bad value.
        UnknownKnob: another bare name (with the closest bare name, if any), or an unknown key.
    """
    name, colon, body = text.partition(":")
    _check_name(text, name.strip(), bare=not colon)
    pairs: list[list[str]] = []
    for token in body.split(",") if body else []:
        if "=" in token:
            key, _, value = token.partition("=")
            pairs.append([key.strip(), value.strip()])
        elif pairs:
            pairs[-1][1] += "," + token.strip()  # gemm_backends=ATEN,TRITON
        else:
            raise InvalidKnobValue(f"--arm {text!r}: expected NAME:knob=value,knob=value")
    return make_arm(name.strip(), dict(pairs), f"--arm {name.strip()}:")


def parse_grid(items: Iterable[str]) -> list[Arm]:
    """The cartesian product of ``knob=v1,v2`` (or ``knob=v1|v2``) items, one arm per combination.

    Args:
        items (Iterable[str]): the ``--grid`` values.

    Returns:
        list[Arm]: one arm per combination (none without items).

    Raises:
        InvalidKnobValue: an item without ``=`` or without values.
    """
    axes: list[tuple[str, list[str]]] = []
    for item in items:
        key, sep, values = item.partition("=")
        choices = [v.strip() for v in values.split("|" if "|" in values else ",")] if sep else []
        if not key.strip() or not [c for c in choices if c]:
            raise InvalidKnobValue(f"--grid {item!r}: expected knob=value1,value2 with at least one value")
        axes.append((key.strip(), [c for c in choices if c]))
    return grid_arms(dict(axes), "--grid")


def grid_arms(axes: Mapping[str, list[Any]], where: str = "grid") -> list[Arm]:
    """One arm per combination of ``axes``, named ``knob=value knob=value``.

    Args:
        axes (Mapping[str, list[Any]]): knob -> its values.
        where (str): how the user wrote the grid, to begin an error with (``"--grid"``, ``"[grid] in --config 'a.toml':"``).

    Returns:
        list[Arm]: the arms (none without axes).

    Raises:
        InvalidKnobValue: an axis without values, or a bad value.
        UnknownKnob: an unknown knob.
    """
    if not axes:
        return []
    for key, values in axes.items():
        if not values:
            raise InvalidKnobValue(f"grid {key!r} is empty: give at least one value")
    keys = list(axes)
    arms = []
    for combo in itertools.product(*(axes[k] for k in keys)):
        settings = dict(zip(keys, combo))  # both as long as ``keys``
        arms.append(make_arm(" ".join(f"{k}={_text(v)}" for k, v in settings.items()), settings, where))
    return arms


def load_toml(path: str) -> dict[str, Any]:
    """Read an ablation TOML file: ``{"arms": [Arm...], "workload"?, "repeats"?, "baseline"?, "quick"?,
    "executor"?, "slurm"?}`` (``slurm``: the ``[slurm]`` table as it is; the command validates it).

    Args:
        path (str): the file (``--config``).

    Returns:
        dict[str, Any]: the arms and the file's other keys.

    Raises:
        InvalidKnobValue: unreadable or invalid TOML, an arm without a name, or no TOML reader
            (Python < 3.11 without tomli).
    """
    # Imported here, not at the top: tomllib is Python >= 3.11, and the whole CLI imports this module.
    try:
        import tomllib  # novermin - Python 3.11+, tomli below
    except ModuleNotFoundError:
        try:
            import tomli as tomllib  # type: ignore[no-redef]
        except ModuleNotFoundError:
            raise InvalidKnobValue(f"--config {path!r} needs a TOML reader: Python >= 3.11, or pip install tomli") from None
    try:
        with open(path, "rb") as src:
            data = tomllib.load(src)
    except (OSError, tomllib.TOMLDecodeError) as err:
        raise InvalidKnobValue(f"ablation file {path!r} cannot be read: {err}") from err
    arms = []
    for table in data.pop("arm", []):
        table = dict(table)
        name = str(table.pop("name", ""))
        arms.append(make_arm(name, table, f"[[arm]] {name!r} in --config {path!r}:"))
    arms += grid_arms(data.pop("grid", {}), f"[grid] in --config {path!r}:")
    unknown = set(data) - {"workload", "repeats", "baseline", "quick", "executor", "slurm"}
    if unknown:
        raise InvalidKnobValue(
            f"ablation file {path!r}: unknown keys {sorted(unknown)}; allowed workload, repeats, baseline, quick, "
            "executor, arm, grid, slurm"
        )
    if "slurm" in data and not isinstance(data["slurm"], dict):
        raise InvalidKnobValue(f"ablation file {path!r}: slurm = {data['slurm']!r} is invalid: allowed a [slurm] table")
    return {"arms": arms, **data}


def check_names(arms: list[Arm]) -> None:
    """Refuse an empty arm list and duplicate names.

    Args:
        arms (list[Arm]): the ablation's arms.

    Raises:
        InvalidKnobValue: no arms, or a name twice.
    """
    if not arms:
        raise InvalidKnobValue("the ablation has no arms (an empty grid?)")
    names = [a.name for a in arms]
    duplicates = sorted({n for n in names if names.count(n) > 1})
    if duplicates:
        raise InvalidKnobValue(f"arm names must be unique; repeated: {', '.join(duplicates)}")
