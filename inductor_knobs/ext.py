"""The extension API: what satellites (``inductor_knobs.serving``, ``inductor_knobs.ablation``) and other extensions
may use of the core besides the public ``inductor_knobs`` names.

Each name is documented where it is defined; this module gives it a stable home, so no satellite imports a core
module (``tests/test_contract.py`` checks that).  Names load on first use (PEP 562): importing this module imports
nothing else (a forked ablation server imports it without loading the core).
"""

import importlib

TYPE_CHECKING = False

#: Public name -> (the module of this package that defines it, its name there; None: the module itself).
_PUBLIC = {
    "events": ("core.events", None),
    "setup": ("core.setup", None),
    "torch_compat": ("core.torch_compat", None),
    "CUDNN_SDPA_AVOID_RECOMPILE_VAR": ("core.changes", "CUDNN_SDPA_AVOID_RECOMPILE_VAR"),
    "environ_before_knobs": ("core.changes", "environ_before_knobs"),
    "Claim": ("core.changes", "Claim"),
    "ConfigChange": ("core.changes", "ConfigChange"),
    "mode_options": ("core.compile_backend", "mode_options"),
    "format_table": ("core.events", "format_table"),
    "atomic_write": ("core.files", "atomic_write"),
    "unsafe_directories": ("core.files", "unsafe_directories"),
    "who": ("core.files", "who"),
    "write_json": ("core.files", "write_json"),
    "EMULATE_SMS_VAR": ("core.knobs", "EMULATE_SMS_VAR"),
    "ENV_PREFIX": ("core.knobs", "ENV_PREFIX"),
    "KNOBS": ("core.knobs", "KNOBS"),
    "canonical_json": ("core.knobs", "canonical_json"),
    "table_from_records": ("core.lookup_table", "table_from_records"),
    "can_record_autotune": ("core.observers", "can_record_autotune"),
    "SharedPatch": ("core.patching", "SharedPatch"),
    "on_import": ("core.patching", "on_import"),
    "remove_by_identity": ("core.patching", "remove_by_identity"),
    "present": ("core.patching", "present"),
    "replace_attribute": ("core.patching", "replace_attribute"),
    "resolve": ("core.patching", "resolve"),
    "wrap_attribute": ("core.patching", "wrap_attribute"),
    "config_values": ("core.plan", "config_values"),
    "plan": ("core.plan", "plan"),
    "Collector": ("core.recorder", "Collector"),
    "ObservedBlock": ("core.recorder", "ObservedBlock"),
    "Subscription": ("core.recorder", "Subscription"),
    "describe_owner": ("core.scope", "describe_owner"),
    "SAFE_EXIT": ("core.undo", "SAFE_EXIT"),
    "Applied": ("core.undo", "Applied"),
    "release_of": ("core.torch_compat", "release_of"),
    "capture_streams": ("emulation.confine", "capture_streams"),
    "EmulationSpec": ("emulation.gpus", "EmulationSpec"),
    "GPU_PRESETS": ("emulation.gpus", "PRESETS"),
    "spec_from_text": ("emulation.gpus", "spec_from_text"),
    "unknown_message": ("errors", "unknown_message"),
    "STARTUP_HOOK_MODULE": ("startup", "HOOK_MODULE"),
    "run_startup_hook": ("startup", "bootstrap"),
}

__all__ = sorted(_PUBLIC)


def __getattr__(name: str) -> object:
    found = _PUBLIC.get(name)
    if found is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    module, attribute = found
    value: object = importlib.import_module(f"inductor_knobs.{module}")
    if attribute is not None:
        value = getattr(value, attribute)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted([*globals(), *_PUBLIC])


if TYPE_CHECKING:  # for type checkers and IDEs (a test keeps this equal to _PUBLIC)
    from .core import events as events
    from .core import setup as setup
    from .core import torch_compat as torch_compat
    from .core.changes import CUDNN_SDPA_AVOID_RECOMPILE_VAR as CUDNN_SDPA_AVOID_RECOMPILE_VAR
    from .core.changes import Claim as Claim
    from .core.changes import ConfigChange as ConfigChange
    from .core.changes import environ_before_knobs as environ_before_knobs
    from .core.compile_backend import mode_options as mode_options
    from .core.events import format_table as format_table
    from .core.files import atomic_write as atomic_write
    from .core.files import unsafe_directories as unsafe_directories
    from .core.files import who as who
    from .core.files import write_json as write_json
    from .core.knobs import EMULATE_SMS_VAR as EMULATE_SMS_VAR
    from .core.knobs import ENV_PREFIX as ENV_PREFIX
    from .core.knobs import KNOBS as KNOBS
    from .core.knobs import canonical_json as canonical_json
    from .core.lookup_table import table_from_records as table_from_records
    from .core.observers import can_record_autotune as can_record_autotune
    from .core.patching import SharedPatch as SharedPatch
    from .core.patching import on_import as on_import
    from .core.patching import present as present
    from .core.patching import remove_by_identity as remove_by_identity
    from .core.patching import replace_attribute as replace_attribute
    from .core.patching import resolve as resolve
    from .core.patching import wrap_attribute as wrap_attribute
    from .core.plan import config_values as config_values
    from .core.plan import plan as plan
    from .core.recorder import Collector as Collector
    from .core.recorder import ObservedBlock as ObservedBlock
    from .core.recorder import Subscription as Subscription
    from .core.scope import describe_owner as describe_owner
    from .core.torch_compat import release_of as release_of
    from .core.undo import SAFE_EXIT as SAFE_EXIT
    from .core.undo import Applied as Applied
    from .emulation.confine import capture_streams as capture_streams
    from .emulation.gpus import PRESETS as GPU_PRESETS  # noqa: F401 - re-exported under its extension name
    from .emulation.gpus import EmulationSpec as EmulationSpec
    from .emulation.gpus import spec_from_text as spec_from_text
    from .errors import unknown_message as unknown_message
    from .startup import HOOK_MODULE as STARTUP_HOOK_MODULE  # noqa: F401 - re-exported under its extension name
    from .startup import bootstrap as run_startup_hook  # noqa: F401 - re-exported under its extension name
