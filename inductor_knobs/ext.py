"""The extension API: what the package's satellites (``inductor_knobs.serving``, ``inductor_knobs.ablation``) and
other extensions may use of the core besides the public ``inductor_knobs`` names.

Each name is documented where it is defined; this module only gives it a public, stable home, so no satellite
imports a private module or a private name of the core (``tests/test_contract.py`` checks that).

- Patching torch: :class:`SharedPatch` (install once, count users, restore by identity), :func:`wrap_attribute`
  (a wrapt wrapper as one step of a patch), :func:`resolve` and :func:`present` (find a dotted target).
- Files: :func:`atomic_write` and :func:`write_json` (a file is whole or absent), :func:`unsafe_directories` and
  :func:`who` (the ownership rule for files that are code).
- Messages: :func:`unknown_message` ("did you mean"), :func:`describe_owner` (a thread or asyncio task),
  :func:`canonical_json` (JSON data that keeps every type apart, as ``Knobs.identity`` writes it).
"""

from __future__ import annotations

from .core.files import atomic_write, unsafe_directories, who, write_json
from .core.knobs import canonical_json
from .core.patching import SharedPatch, present, resolve, wrap_attribute
from .core.scope import describe_owner
from .errors import unknown_message as unknown_message

__all__ = [
    "SharedPatch",
    "atomic_write",
    "canonical_json",
    "describe_owner",
    "present",
    "resolve",
    "unknown_message",
    "unsafe_directories",
    "who",
    "wrap_attribute",
    "write_json",
]
