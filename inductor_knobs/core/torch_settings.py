"""Process-global torch settings outside Inductor's config that knobs set: SDPA backends, TunableOp and
cuDNN attention's avoid-recompile variable.

Both are first-call costs at serving time that are fixed by a setting: cuDNN attention builds an
execution plan per exact input shape (an SDPA backend order without it has none), and TunableOp
tunes each new GEMM shape while it is enabled.  torch keeps both in ``at::globalContext()``, one
value per process (``torch.backends.cuda.enable_*_sdp``, ``torch._C._set_sdp_priority_order``,
``torch.cuda.tunable.enable``), also on 2.12+ where Inductor config is per thread.  The third is an
environment variable, ``TORCH_CUDNN_SDPA_AVOID_RECOMPILE`` (2.9+), which torch reads once per process at
its first dense cuDNN attention call and keeps (:data:`~inductor_knobs.patches._features.CUDNN_SDPA_AVOID_RECOMPILE_VAR`):
a block changes it only while that read cannot have happened yet (CUDA not initialised), and says so
when torch may have read the block's value (``Setting.read_once``).  So a block that
sets one holds it for the process: a second thread or asyncio task that sets the same one while a
block holds it gets :class:`~inductor_knobs.errors.ConcurrentKnobsError`, as blocks of two threads do
on torch < 2.12.

A setting is applied as an undo record (:class:`inductor_knobs.core.changes.SettingChange`) and attested
inside every compile like a config key (its :class:`~inductor_knobs.core.asked.Asked` has module
:data:`SETTINGS_MODULE`).  The patch module reads and writes them (``read_sdpa``/``write_sdpa``,
``read_tunableop``/``write_tunableop``).
"""

from __future__ import annotations

import os
import threading
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from ..patches._features import CUDNN_SDPA_AVOID_RECOMPILE_VAR
from ..patches.torch_2_4 import TorchPatches
from ._undo import SAFE_EXIT

#: ``Asked.module`` of these settings: they live in torch's global context, not in a config module.
SETTINGS_MODULE = "torch"


@dataclass(frozen=True)
class Setting:
    """How to read, set and restore one process-global setting through the patch module.

    Attributes:
        key: the knob's name (``sdpa_backends``, ``tunableop``).
        state: the exact state to put back later.
        restore: puts a ``state`` back.
        set: sets the knob's value.
        value: the value now, comparable with the knob's (what attestation reads).
        problem: why the knob's value cannot be set on this torch, or None.
        what: the torch API, for messages.
        missing_feature: a problem means this torch build lacks the feature (``NotSupportedOnThisTorch``)
            rather than that the value is wrong for it (``InvalidKnobValue``).
        matches: whether a ``value`` read back is the knob's value (equal, unless this torch cannot tell
            them apart).
        read_once: for a setting torch reads once per process and keeps, when it reads it (for messages);
            None when torch reads it at every use.
        maybe_read: for a ``read_once`` setting, whether torch may have read it already in this process.
        env_var: the environment variable that is the setting, or None: every process started inside the
            block inherits it, so a launcher of fresh processes asks :func:`environ_before_knobs`.
    """

    key: str
    state: Callable[[TorchPatches], Any]
    restore: Callable[[TorchPatches, Any], None]
    set: Callable[[TorchPatches, Any], None]
    value: Callable[[TorchPatches], Any]
    problem: Callable[[TorchPatches, Any], str | None]
    what: str
    missing_feature: bool = False
    matches: Callable[[TorchPatches, Any, Any], bool] = lambda patches, found, asked: (
        type(found) is type(asked) and found == asked
    )
    read_once: str | None = None
    maybe_read: Callable[[TorchPatches], bool] = lambda patches: False
    env_var: str | None = None


def _sdpa_problem(patches: TorchPatches, value: str) -> str | None:
    here = patches.sdpa_backends_here()
    missing = [name for name in value.split(",") if name not in here]
    return f"{', '.join(missing)} not in this torch's SDPA backends ({', '.join(here)})" if missing else None


SETTINGS = {
    "sdpa_backends": Setting(
        key="sdpa_backends",
        state=lambda patches: patches.read_sdpa(),
        restore=lambda patches, state: patches.write_sdpa(*state),
        set=lambda patches, value: patches.write_sdpa(tuple(value.split(",")), None),
        value=lambda patches: ",".join(patches.read_sdpa()[0]),
        problem=_sdpa_problem,
        matches=lambda patches, found, asked: patches.sdpa_matches(found, asked),
        what="torch.backends.cuda.enable_*_sdp / torch._C._set_sdp_priority_order (what torch.nn.attention.sdpa_kernel sets)",
    ),
    "tunableop": Setting(
        key="tunableop",
        state=lambda patches: patches.read_tunableop(),
        restore=lambda patches, state: patches.write_tunableop(state),
        set=lambda patches, value: patches.write_tunableop(value),
        value=lambda patches: patches.read_tunableop(),
        problem=lambda patches, value: patches.tunableop_problem(),
        what="torch.cuda.tunable.enable",
        missing_feature=True,  # a CPU-only build has no TunableOp, whatever the value
    ),
    # Which releases have it is its knob row's since= (plan refuses it elsewhere); on a CPU-only build nothing reads it.
    "cudnn_sdpa_avoid_recompile": Setting(
        key="cudnn_sdpa_avoid_recompile",
        state=lambda patches: patches.read_env(CUDNN_SDPA_AVOID_RECOMPILE_VAR),
        restore=lambda patches, state: patches.write_env(CUDNN_SDPA_AVOID_RECOMPILE_VAR, state),
        set=lambda patches, value: patches.write_env(CUDNN_SDPA_AVOID_RECOMPILE_VAR, "1" if value else "0"),
        value=lambda patches: patches.read_env(CUDNN_SDPA_AVOID_RECOMPILE_VAR) == "1",  # c10::utils::check_env: "1" only
        problem=lambda patches, value: None,
        what=f"the environment variable {CUDNN_SDPA_AVOID_RECOMPILE_VAR}",
        read_once=(
            f"torch reads {CUDNN_SDPA_AVOID_RECOMPILE_VAR} once per process, at its first dense cuDNN attention call "
            "(a static in at::native::use_ragged_in_dense, aten/src/ATen/native/cudnn/MHA.cpp, torch 2.9+), and keeps "
            "that value for the life of the process"
        ),
        maybe_read=lambda patches: patches.cuda_started(),
        env_var=CUDNN_SDPA_AVOID_RECOMPILE_VAR,
    ),
}

#: Environment variables that live blocks have set: variable -> the value each block found (None: unset),
#: outermost first.  Written by :class:`~inductor_knobs.core.changes.SettingChange`.
_ENV_FOUND: dict[str, list[tuple[object, str | None]]] = {}
_ENV_LOCK = threading.Lock()


def hold_env(var: str, token: object, found: str | None) -> None:
    """Record that the block of ``token`` set ``var``, which was ``found`` before it."""
    with _ENV_LOCK, SAFE_EXIT:
        _ENV_FOUND.setdefault(var, []).append((token, found))


def release_env(var: str, token: object) -> None:
    """Forget :func:`hold_env`'s record of ``token`` (idempotent)."""
    with _ENV_LOCK, SAFE_EXIT:
        held = [entry for entry in _ENV_FOUND.get(var, []) if entry[0] is not token]
        if held:
            _ENV_FOUND[var] = held
        else:
            _ENV_FOUND.pop(var, None)


def environ_before_knobs() -> dict[str, str]:
    """A copy of ``os.environ`` as it was before the live knobs blocks set their environment variables.

    A knob that is an environment variable (``cudnn_sdpa_avoid_recompile``) would otherwise reach every
    process started inside its block, such as an ablation's runs, whose arms choose their own settings.

    Returns:
        dict[str, str]: the environment, each variable a live block set put back to what the outermost
        such block found (removed where it was unset).
    """
    env = dict(os.environ)
    with _ENV_LOCK, SAFE_EXIT:
        for var, held in _ENV_FOUND.items():
            found = held[0][1]
            if found is None:
                env.pop(var, None)
            else:
                env[var] = found
    return env


def read_setting(patches: TorchPatches, key: str) -> Any:
    """The value of setting ``key`` now, as the knob spells it."""
    return SETTINGS[key].value(patches)


def setting_matches(patches: TorchPatches, key: str, found: Any, asked: Any) -> bool:
    """Whether setting ``key`` read back as ``found`` is the knob's value ``asked``."""
    return SETTINGS[key].matches(patches, found, asked)
