"""``inductor-knobs doctor``: what this machine, torch and environment mean for the knobs.

:func:`collect` gathers a JSON-ready dict, :func:`render` turns it into text; a missing GPU or optional piece is
reported, never raised.
"""

from __future__ import annotations

import importlib.util
import os
import platform
import shlex
import shutil
import sys
import sysconfig
from importlib import metadata
from typing import Any

from .core import torch_compat
from .core.changes import foreign_setattr
from .core.cutlass import describe as describe_cutlass
from .core.gate import original_gate
from .core.knobs import ENV_PREFIX, KNOBS, Config, Knobs, knob_config
from .env import (
    DISABLE_HINT,
    activation_disabled,
    activation_plan,
    active_env_knobs,
    emulation_from_env,
    env_requests_knobs,
    knobs_to_apply,
)
from .errors import KnobsError

MODES = ("default", "reduce-overhead", "max-autotune", "max-autotune-no-cudagraphs")


def collect(min_sms: int | None = None) -> dict[str, Any]:
    """Return the doctor report, a dict of plain JSON types.

    Args:
        min_sms: also give each GPU's gate verdict at this SM threshold (an int from 1 to 1024, as the knob).

    Raises:
        InvalidKnobValue: ``min_sms`` is not a value the ``min_sms`` knob takes.
    """
    if min_sms is not None:
        KNOBS["min_sms"].check("--min-sms", min_sms)
    import torch

    version = torch.__version__
    report: dict[str, Any] = {
        "versions": {
            "python": platform.python_version(),
            "torch": version,
            "triton": _version_of("triton"),
            "cuda": torch.version.cuda,
            "hip": torch.version.hip,
        },
        "patch_module": _patch_module(version),
    }
    gpus = report["gpus"] = _gpus(report["patch_module"].get("torch_min_sms", 68), min_sms)
    report["gemm_backends"] = _backends(version, bool(gpus))
    report["sm_gate"] = _sm_gate(version, gpus)
    report["env"] = _env()
    report["modes"] = _modes()
    report["precedence"] = _precedence(version)
    report["release_knobs"] = _release_knobs(version)
    report["native_floors"] = _native_floors(version, report["env"]["resolved"])
    report["bytecode"] = bytecode()
    return report


def bytecode(module: str = "torch") -> dict[str, Any]:
    """Whether ``module``'s Python has bytecode this interpreter will use, and whether it can write bytecode it lacks.

    Where neither holds (a host that installed packages without compiling them and sets ``PYTHONDONTWRITEBYTECODE``,
    as container images often do, or whose package directories this user cannot write), every process compiles the
    package's modules from source at import: seconds of every serving process's start, every ablation's fork server
    and every run started as a new interpreter (the ablation's fork server imported its modules in 10.0-13.0 s without
    torch's bytecode and 3.9-5.2 s with every module's, one-H200 node, torch 2.11, 2026-11-29:
    ``bench/published/2026-11-29-cold-start-all-bytecode``).

    Judged by the module's own file (a package's ``__init__``) as Python's ``SourceLoader.get_code`` judges it: the
    file ``importlib.util.cache_from_source`` names (which follows ``sys.pycache_prefix``) carries this Python's magic
    number and either the source's mtime and size or, for a checked hash-based file, its ``importlib.util.source_hash``
    (an unchecked hash-based file is used as it is).  ``python -m compileall`` writes such files whatever
    ``PYTHONDONTWRITEBYTECODE`` says, into the prefix where one is set; Python then reads only the prefix, so the
    command doctor prints names the standard library too.

    Args:
        module (str): a module or package name.

    Returns:
        dict[str, Any]: ``usable`` (bool | None: None when the module, or a source file of it, is not found),
        ``writes`` (bool: ``sys.dont_write_bytecode`` is off and the directory the bytecode goes to, or its nearest
        existing parent, is writable), ``prefix`` (``sys.pycache_prefix``), ``directory`` (the directory holding the
        module, what ``python -m compileall`` would compile), ``compile`` (the directories to compile: ``directory``,
        and the standard library's where a prefix is set) and ``slow_start`` (bytecode neither usable nor written).
        Never raises: a name that cannot be looked up reads as not found.
    """
    usable: bool | None = None
    directory = None
    writes = not sys.dont_write_bytecode
    try:
        spec = importlib.util.find_spec(module)
    except (ImportError, ValueError):  # a dotted name whose parent is missing; a module whose __spec__ is None
        spec = None
    source = spec.origin if spec is not None else None
    if source and source.endswith(".py") and os.path.isfile(source):
        package = bool(spec is not None and spec.submodule_search_locations)
        directory = os.path.dirname(os.path.dirname(source) if package else source)
        cached = importlib.util.cache_from_source(source)
        usable = _bytecode_matches(source, cached)
        writes = writes and _writable(os.path.dirname(cached))
    dirs = [directory] if directory else []
    if sys.pycache_prefix and directory:
        paths = sysconfig.get_paths()
        dirs += [paths[key] for key in ("stdlib", "platstdlib") if paths.get(key) and paths[key] not in dirs]
    return {
        "module": module,
        "usable": usable,
        "writes": writes,
        "prefix": sys.pycache_prefix,
        "directory": directory,
        "compile": dirs,
        "slow_start": usable is False and not writes,
    }


def _bytecode_matches(source: str, cached: str) -> bool:
    """Whether Python would run ``cached`` for ``source`` (the header checks of ``SourceLoader.get_code``)."""
    try:
        with open(cached, "rb") as file:
            header = file.read(16)
        if len(header) < 16 or header[:4] != importlib.util.MAGIC_NUMBER:
            return False
        flags = int.from_bytes(header[4:8], "little")
        if flags & ~0b11:
            return False
        if flags & 0b1:  # hash-based: checked (0b10) against the source's hash, unchecked used as it is
            if not flags & 0b10:
                return True
            with open(source, "rb") as file:
                return importlib.util.source_hash(file.read()) == header[8:16]
        stat = os.stat(source)
        mtime, size = int.from_bytes(header[8:12], "little"), int.from_bytes(header[12:16], "little")
        return mtime == int(stat.st_mtime) & 0xFFFFFFFF and size == stat.st_size & 0xFFFFFFFF
    except OSError:
        return False


def _writable(directory: str) -> bool:
    """Whether ``directory``, or the nearest parent of it that exists, is writable (Python makes the rest)."""
    while directory and not os.path.isdir(directory):
        parent = os.path.dirname(directory)
        if parent == directory:
            return False
        directory = parent
    return bool(directory) and os.access(directory, os.W_OK)


def _native_floors(version: str, resolved: dict[str, Any] | None) -> dict[str, Any]:
    """torch's recompile stance, deterministic mode and what it bans of the env knobs, and the ignored config keys
    an env variable sets (facts with torch's file:line: ``patches/native_floors.py``)."""
    patches = torch_compat.select(version, strict=False)
    cfg = importlib.import_module("torch._inductor.config")
    asked: dict[str, tuple[Any, str]] = {}  # config key -> (value, the variable that asks it)
    for name, value in (resolved or {}).items():
        if name == "config":
            asked.update({key: (v, f"{ENV_PREFIX}CONFIG") for key, v in value.items()})
        elif name in KNOBS and value is not None:
            asked.update({key: (v, f"{ENV_PREFIX}{name.upper()}") for key, v in knob_config(name, value).items()})
    bans = patches.deterministic_bans(cfg, [(key, value) for key, (value, _) in asked.items()])
    ignored = []
    for key, (source, env) in patches.ignored_config_keys(torch_compat.release_of(version)).items():
        setters = [asked[key][1]] if key in asked else []
        setters += [name for name in (env, "TORCHINDUCTOR_" + key.upper()) if name and name in os.environ][:1]
        if setters:
            ignored.append({"key": key, "set_by": setters, "source": source})
    return {
        "fail_on_recompile": patches.recompile_stance is not None,
        "deterministic": getattr(cfg, "deterministic", None),
        "deterministic_bans": [{"key": k, "asked_by": asked[k][1], "what": what} for k, what in bans.items()],
        "ignored_keys": ignored,
    }


def _release_knobs(version: str) -> list[dict[str, Any]]:
    """Per knob that only some releases have: whether this torch has it, what it is, and its config value here."""
    release = torch_compat.release_of(version)
    cfg = importlib.import_module("torch._inductor.config")
    patches = torch_compat.select(version, strict=False)
    rows = []
    for name, row in KNOBS.items():
        if row.since is None and row.until is None:
            continue
        if isinstance(row.changes, Config):
            value = patches.read_value(cfg, row.changes.key) if row.on(release) else "absent"
            state = f"{len(value)} keys set" if isinstance(value, dict) else repr(value)
        else:
            state = "process setting"
        rows.append(dict(knob=name, available=row.on(release), since=row.since, until=row.until, what=row.summary, state=state))
    return rows


def _version_of(name: str) -> str | None:
    try:
        return metadata.version(name)
    except metadata.PackageNotFoundError:
        return None


def _patch_module(version: str) -> dict[str, Any]:
    import torch._inductor.utils as utils

    try:
        patches = torch_compat.select(version)
    except KnobsError as err:
        return {"name": None, "error": str(err), "supported": torch_compat.supported_range()}
    drift = torch_compat.check_gate(patches, original_gate() or utils.is_big_gpu)
    return {
        "name": patches.name,
        "torch_range": str(patches.torch_range),
        "supported": torch_compat.supported_range(),
        "drift_ok": drift.ok,
        "drift_problems": list(drift.problems),
        "gate_fingerprint": drift.fingerprint,
        "config_is_thread_local": patches.config_is_thread_local,
        "torch_min_sms": patches.torch_min_sms,
        "config_patch_restores_unset": patches.config_patch_restores_unset,
        "green_context_api": patches.green_context_api,
    }


def _gpus(threshold: int, min_sms: int | None) -> list[dict[str, Any]]:
    import torch

    if not torch.cuda.is_available():
        return []
    gpus = []
    for index in range(torch.cuda.device_count()):
        props = torch.cuda.get_device_properties(index)
        sms = int(props.multi_processor_count)
        entry: dict[str, Any] = {"index": index, "name": props.name, "sms": sms, "capability": f"{props.major}.{props.minor}"}
        entry["gate_at_torch_threshold"] = sms >= threshold
        if min_sms is not None:
            entry["gate_at_min_sms"] = sms >= min_sms
        gpus.append(entry)
    return gpus


def _backends(version: str, has_gpu: bool) -> dict[str, str]:
    import torch

    patches = torch_compat.select(version, strict=False)
    release = torch_compat.release_of(version)
    names = sorted(patches.gemm_backends(release))
    cutlass_found, cutlass_dir = patches.cutlass_available(importlib.import_module("torch._inductor.config"), release)
    rocm = bool(torch.version.hip)
    reasons = {
        "ATEN": "usable: extern cuBLAS/CPU kernels, always available",
        "TRITON": ("usable" if _version_of("triton") and has_gpu else "needs triton and a GPU")
        + " (templates also need the SM gate open: see gpus)",
        "CPP": "usable on CPU" if shutil.which(os.environ.get("CXX", "g++")) else "needs a C++ compiler",
        "CUTLASS": describe_cutlass(cutlass_found, cutlass_dir, patches.cutlass_dir_key(release), has_gpu and not rocm),
        "CK": "usable" if rocm and has_gpu else "not usable: ROCm only",
        "CKTILE": "usable" if rocm and has_gpu else "not usable: ROCm only",
        "CUTEDSL": "usable"
        if importlib.util.find_spec("cutlass") and has_gpu
        else "not usable: needs nvidia-cutlass-dsl and an NVIDIA GPU",
        "NVGEMM": _nvgemm_reason(patches.nvgemm_modules(release), has_gpu and not rocm),
        "FLYDSL": "usable" if rocm and has_gpu else "not usable: ROCm only",
    }
    return {name: reasons.get(name, "known to this torch") for name in names}


def _importable(module: str) -> bool:
    """``importlib.util.find_spec(module)`` as torch's ``ensure_*_available`` asks it, never raising."""
    try:
        return importlib.util.find_spec(module) is not None
    except Exception:  # noqa: BLE001 - a broken optional package is "not importable" here
        return False


def _nvgemm_reason(modules: tuple[str, ...], nvidia: bool) -> str:
    missing = [m for m in modules if not _importable(m)]
    if not nvidia:
        return "not usable: needs an NVIDIA GPU"
    if missing:
        return f"not usable: needs the module(s) {', '.join(missing)}"
    return "usable (never asks the SM gate)"


def _sm_gate(version: str, gpus: list[dict[str, Any]]) -> dict[str, Any]:
    """Which GEMM backends the SM gate governs here (the patch module's reading of ``torch/_inductor/utils.py``'s
    ``use_*_template``), and whether NVGEMM is a no-patch alternative for a GPU below torch's threshold."""
    import torch

    patches = torch_compat.select(version, strict=False)
    release = torch_compat.release_of(version)
    known = patches.gemm_backends(release)
    gated = known & patches.gate_checked_backends(release)
    modules = patches.nvgemm_modules(release)
    missing = [m for m in modules if not _importable(m)]
    small = [g for g in gpus if not g["gate_at_torch_threshold"]]
    alternative = hint = None
    if "NVGEMM" in known and small and not torch.version.hip:
        names = ", ".join(f"GPU {g['index']} ({g['sms']} SMs)" for g in small)
        if missing:
            dists = [patches.module_distributions.get(m, m) for m in missing]
            hint = (
                f"NVGEMM never asks the SM gate, but torch {version} needs the module(s) {', '.join(missing)} "
                f"for it (pip install {' '.join(dict.fromkeys(dists))}); not importable here"
            )
        else:
            alternative = (
                f"{names}: max_autotune_gemm_backends='ATEN,NVGEMM' (with max_autotune) autotunes NVGEMM templates "
                "without patching the gate, where its kernels support the GPU's architecture"
            )
    return {
        "gated": sorted(gated),
        "not_gated": sorted(known - gated),
        "checked_last": patches.gate_checked_last,
        "nvgemm_modules": list(modules),
        "nvgemm_missing": missing,
        "nvgemm_alternative": alternative,
        "nvgemm_hint": hint,
    }


def _env() -> dict[str, Any]:
    """The variables, what they resolve to, and the error the first compile's activation would raise: parsed, then
    planned as activation plans them (``plan(..., process_wide=True)``, emulation's too), nothing applied."""
    variables = {k: v for k, v in os.environ.items() if k.startswith(ENV_PREFIX)}
    active = active_env_knobs()
    report: dict[str, Any] = {"variables": variables, "resolved": None, "error": None, "disabled": activation_disabled()}
    report["active"] = active.to_dict() if active else None
    if report["disabled"]:
        return report
    try:
        knobs = Knobs.from_env()
        report["resolved"] = knobs.to_dict()
        emulation = emulation_from_env()
        if env_requests_knobs():
            activation_plan(knobs_to_apply(knobs), emulation)
    except KnobsError as err:
        report["error"] = f"{err}; {DISABLE_HINT}"
    except Exception as err:  # noqa: BLE001 - a report, not a crash: said as the error of this setup
        report["error"] = f"{type(err).__name__}: {err}; {DISABLE_HINT}"
    return report


def _modes() -> dict[str, Any]:
    import torch._inductor as inductor

    out: dict[str, Any] = {}
    for mode in MODES:
        try:
            out[mode] = inductor.list_mode_options(mode)
        except (KeyError, RuntimeError) as err:
            out[mode] = f"unknown on this torch: {err}"
    return out


PRECEDENCE = "emulation > knob > options > mode > process default"


def _precedence(version: str) -> dict[str, Any]:
    """What decides an Inductor config value at compile time, and what beats a knob here."""
    patches = torch_compat.select(version, strict=False)
    cfg = importlib.import_module("torch._inductor.config")
    forcing, implied = [], []
    for key in patches.config_keys(cfg):
        env = patches.forcing_env_var(cfg, key)
        if env:
            forcing.append(f"{key} forced by {env}")
        by = patches.implied_by(cfg, key)
        if by:
            implied.append(f"{key} implied by {by}")
    modules = ["torch._inductor.config", "torch._dynamo.config", "torch.compiler.config"]  # the last: 2.6+
    foreign = []
    for name in modules:
        if importlib.util.find_spec(name) is not None:
            text = foreign_setattr(importlib.import_module(name))
            if text:
                foreign.append(text)
    return {"order": PRECEDENCE, "forcing_env_vars": forcing, "implications": implied, "foreign_setattr": foreign}


def render(report: dict[str, Any]) -> str:
    """Human-readable text for a :func:`collect` report."""
    lines = ["inductor-knobs doctor", ""]
    lines.append("versions: " + ", ".join(f"{k} {v}" for k, v in report["versions"].items() if v))
    pm = report["patch_module"]
    if pm.get("name"):
        drift = "ok" if pm["drift_ok"] else "DRIFT: " + "; ".join(pm["drift_problems"])
        lines.append(f"patch module: {pm['name']} ({pm['torch_range']}), is_big_gpu {pm['gate_fingerprint']}: {drift}")
        scope = "per thread" if pm["config_is_thread_local"] else "process-global"
        lines.append(f"Inductor config overrides on this torch: {scope}")
        restores = "restores a key it found unset" if pm["config_patch_restores_unset"] else "pins the value it read"
        lines.append(f"torch._inductor.config.patch on exit: {restores}")
        api = {"create": "GreenContext.create(num_sms=, device_id=)", "constructor": "GreenContext(num_sms=, device_id=)"}
        green = api.get(pm["green_context_api"]) or (
            "GreenContext(num_sms=, device_id=) and .sm_count" if pm["green_context_api"] else "none (emulate_gpu refuses)"
        )
        lines.append(f"small-GPU emulation makes its green context with: {green}")
    else:
        lines.append(f"patch module: none ({pm['error']})")
    lines.append("")
    if not report["gpus"]:
        lines.append("GPUs: none visible (CUDA unavailable); the SM gate only matters on GPUs")
    for gpu in report["gpus"]:
        verdict = "open" if gpu["gate_at_torch_threshold"] else "CLOSED (Triton/CUTLASS GEMM templates off)"
        line = (
            f"GPU {gpu['index']}: {gpu['name']}, {gpu['sms']} SMs, sm_{gpu['capability']}: gate at torch's threshold: {verdict}"
        )
        if "gate_at_min_sms" in gpu:
            line += f"; at --min-sms: {'open' if gpu['gate_at_min_sms'] else 'closed'}"
        lines.append(line)
    lines += ["", "GEMM backends (max_autotune_gemm_backends):"]
    lines += [f"  {name:8} {why}" for name, why in report["gemm_backends"].items()]
    gate = report["sm_gate"]
    lines.append(f"  SM gate (is_big_gpu) governs: {', '.join(gate['gated'])}; never asked by: {', '.join(gate['not_gated'])}")
    lines.append(
        "  torch asks the gate last: only under max-autotune with a gated backend selected"
        if gate["checked_last"]
        else "  torch asks the gate first, at every GPU GEMM lowering (max-autotune or not)"
    )
    if gate["nvgemm_alternative"]:
        lines.append(f"  no-patch alternative: {gate['nvgemm_alternative']}")
    if gate["nvgemm_hint"]:
        lines.append(f"  {gate['nvgemm_hint']}")
    env = report["env"]
    lines += ["", "INDUCTOR_KNOBS_* variables:"]
    if not env["variables"]:
        lines.append("  none set")
    lines += [f"  {k}={v}" for k, v in env["variables"].items()]
    if env.get("disabled"):
        lines.append("  INDUCTOR_KNOBS_DISABLE is set: none of them is applied")
    elif env["error"]:
        lines.append(f"  ERROR: {env['error']}")
    elif env["variables"]:
        lines.append(f"  resolve to: {env['resolved']}")
        lines.append(f"  active in this process: {env['active']}")
    prec = report["precedence"]
    lines += ["", f"precedence at every Inductor compile under inductor_knobs: {prec['order']}"]
    beats = prec["forcing_env_vars"] + prec["implications"] + prec["foreign_setattr"]
    lines += [f"  beats any knob here: {item}" for item in beats] or [
        "  nothing here beats a knob (no forcing env var, implication or foreign __setattr__)"
    ]
    lines += ["", "per-shape knobs of newer torch releases:"]
    for knob in report["release_knobs"]:
        here = f"yes; now {knob['state']}" if knob["available"] else f"NOT on this torch (needs {knob['since']}+)"
        lines.append(f"  {knob['knob']:26} {here}: {knob['what']}")
    floors = report["native_floors"]
    lines += ["", "torch's own floors:"]
    lines.append(
        "  torch.compiler.set_stance('fail_on_recompile'): "
        + (
            "ik.serving.no_stalls(on='raise') holds it while it serves"
            if floors["fail_on_recompile"]
            else "not on this torch (2.6+)"
        )
    )
    mode = {None: "not on this torch (2.10+)", True: "ON", False: "off"}.get(
        floors["deterministic"], repr(floors["deterministic"])
    )
    lines.append(f"  Inductor deterministic mode (torch._inductor.config.deterministic): {mode}")
    lines += [
        f"  deterministic mode bans what {ban['asked_by']} asks for ({ban['key']}): it {ban['what']}; a compile raises "
        "KnobNotApplied (on_mismatch='warn': a warning)"
        for ban in floors["deterministic_bans"]
    ]
    lines += [
        f"  IGNORED by torch {report['versions']['torch']}: {item['key']} (set by {', '.join(item['set_by'])}): {item['source']}"
        for item in floors["ignored_keys"]
    ]
    code = report["bytecode"]
    if code["slow_start"]:
        lines += [
            "",
            f"start-up: {code['module']} has no bytecode here that this Python reads, and it writes none "
            "(PYTHONDONTWRITEBYTECODE, -B, or a directory it cannot write):",
            "  every process compiles its modules from source (seconds of each serving process's and ablation server's start);",
            f"  compile them once: {shlex.join([sys.executable, '-m', 'compileall', '-q', '-j', '0', *code['compile']])}",
        ]
    lines += ["", "torch.compile modes expand to (torch._inductor.list_mode_options):"]
    lines += [f"  {mode:28} {opts}" for mode, opts in report["modes"].items()]
    return "\n".join(lines)
