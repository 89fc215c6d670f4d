"""Why a config value does not hold what a knob set: the causes torch and third parties have.

Used by the undo records (read-back at apply), the compile interception (read inside a compile)
and ``doctor``.  Causes, in the order torch ranks them: a forcing env var (``env_name_force``,
2.6+), an active config implication (2.15+), a foreign ``__setattr__`` on the config module's
class (Unsloth replaces it), else code outside inductor_knobs.
"""

from __future__ import annotations

from typing import Any

from ..patches.torch_2_4 import TorchPatches


def diagnose(patches: TorchPatches, cfg: Any, key: str) -> str:
    """Why ``cfg.key`` does not hold the value set, as ``"<kind>: <details>"``."""
    forcing = patches.forcing_env_var(cfg, key)
    if forcing:
        return f"env-forced: the environment variable {forcing} forces it (torch's env_name_force beats every override)"
    implied = patches.implied_by(cfg, key)
    if implied:
        return f"implication: {implied} implies it (torch 2.15 config implications beat every override)"
    foreign = foreign_setattr(cfg)
    if foreign:
        return f"foreign __setattr__: {foreign}"
    return "changed: code outside inductor_knobs changed it inside the compile"


def foreign_setattr(cfg: Any) -> str | None:
    """A description of a replaced ``__setattr__`` on ``cfg``'s class (Unsloth does this), or None."""
    setter = getattr(type(cfg), "__setattr__", None)
    code = getattr(setter, "__code__", None)
    if code is None or code.co_filename.replace("\\", "/").endswith("torch/utils/_config_module.py"):
        return None
    where = f"{code.co_filename}:{code.co_firstlineno}"
    return f"{getattr(cfg, '__name__', cfg)}.__setattr__ is {getattr(setter, '__qualname__', setter)} from {where}, not torch's"
