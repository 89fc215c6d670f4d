"""The extension API: what the package's satellites (``inductor_knobs.serving``, ``inductor_knobs.ablation``) and
other extensions may use of the core besides the public ``inductor_knobs`` names.

Each name is documented where it is defined; this module only gives it a public, stable home, so no satellite
imports a core module directly (``tests/test_contract.py`` checks that).

- The installed torch: :data:`torch_compat` (its :func:`~inductor_knobs.core.torch_compat.installed` patch module,
  chosen by release) and :func:`release_of`.
- Patching torch: :class:`SharedPatch` (install once, count users, restore by identity), :func:`wrap_attribute`
  (a wrapt wrapper as one step of a patch), :func:`resolve` and :func:`present` (find a dotted target).
- Knobs to changes: :func:`plan` (the undo records of a :class:`~inductor_knobs.Knobs`), :func:`config_values`
  (the Inductor config keys it sets), :func:`mode_options` (what a ``torch.compile`` mode sets),
  :func:`environ_before_knobs`, :data:`KNOBS` (the knob table: each knob's check, variable parsing and releases),
  and the variable names :data:`ENV_PREFIX`, :data:`EMULATE_SMS_VAR`,
  :data:`CUDNN_SDPA_AVOID_RECOMPILE_VAR`.
- Compile events: :data:`events` (the channel: ``publish``), :class:`ObservedBlock`, :class:`Subscription` and
  :class:`Collector` (blocks that receive events), :func:`can_record_autotune`, :func:`triton_compiles`,
  :data:`CAUSES` (what a first-call cost is) and :func:`format_table`.
- The setup snapshot: :data:`setup` (``snapshot``, ``differences``, ``Setup``).
- Emulation: :class:`EmulationSpec`, :func:`spec_from_text`, :data:`GPU_PRESETS`, :func:`capture_streams`.
- Files: :func:`atomic_write` and :func:`write_json` (a file is whole or absent), :func:`unsafe_directories` and
  :func:`who` (the ownership rule for files that are code).
- Messages: :func:`unknown_message` ("did you mean"), :func:`describe_owner` (a thread or asyncio task),
  :func:`canonical_json` (JSON data that keeps every type apart, as ``Knobs.identity`` writes it).
- Start-up: :func:`run_startup_hook` (what ``inductor_knobs_startup.pth`` does at interpreter start, for a process
  forked from one that started without the run's environment) and :data:`STARTUP_HOOK_MODULE` (the torch module
  whose import activates ``INDUCTOR_KNOBS_*``).
"""

from __future__ import annotations

from .core import events, setup, torch_compat
from .core.changes import CUDNN_SDPA_AVOID_RECOMPILE_VAR, environ_before_knobs
from .core.compile_backend import mode_options
from .core.events import CAUSES, format_table
from .core.files import atomic_write, unsafe_directories, who, write_json
from .core.knobs import EMULATE_SMS_VAR, ENV_PREFIX, KNOBS, canonical_json
from .core.observers import can_record_autotune, triton_compiles
from .core.patching import SharedPatch, present, resolve, wrap_attribute
from .core.plan import config_values, plan
from .core.recorder import Collector, ObservedBlock, Subscription
from .core.scope import describe_owner
from .core.torch_compat import release_of
from .emulation.confine import capture_streams
from .emulation.gpus import PRESETS as GPU_PRESETS
from .emulation.gpus import EmulationSpec, spec_from_text
from .errors import unknown_message
from .startup import HOOK_MODULE as STARTUP_HOOK_MODULE
from .startup import bootstrap as run_startup_hook

__all__ = [
    "CAUSES",
    "CUDNN_SDPA_AVOID_RECOMPILE_VAR",
    "EMULATE_SMS_VAR",
    "ENV_PREFIX",
    "GPU_PRESETS",
    "KNOBS",
    "STARTUP_HOOK_MODULE",
    "Collector",
    "EmulationSpec",
    "ObservedBlock",
    "SharedPatch",
    "Subscription",
    "atomic_write",
    "can_record_autotune",
    "canonical_json",
    "capture_streams",
    "config_values",
    "describe_owner",
    "environ_before_knobs",
    "events",
    "format_table",
    "mode_options",
    "plan",
    "present",
    "release_of",
    "resolve",
    "run_startup_hook",
    "setup",
    "spec_from_text",
    "torch_compat",
    "triton_compiles",
    "unknown_message",
    "unsafe_directories",
    "who",
    "wrap_attribute",
    "write_json",
]
