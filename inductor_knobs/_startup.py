"""Startup hook: activate ``INDUCTOR_KNOBS_*`` in processes that never import inductor_knobs.

The installed ``inductor_knobs_startup.pth`` runs one line at interpreter start.  It checks
the environment first and imports this module only when an ``INDUCTOR_KNOBS_*`` variable
is set (and ``INDUCTOR_KNOBS_DISABLE`` is not), so an unconfigured process pays for one
scan of ``os.environ`` and imports nothing.  :func:`bootstrap` then parses the variables
(without importing torch) and registers a wrapt post-import hook that applies them when
``torch._inductor.utils`` is first imported (by ``import torch._inductor`` or the first compile),
or, when ``INDUCTOR_KNOBS_EMULATE_SMS`` asks for emulation, when ``torch._inductor.compile_fx`` is
(the first compile): emulation wraps ``compile_fx``, which may be half-imported when utils completes.

A bad variable must not go unnoticed in a launch script, but the ``.pth`` must not kill
interpreters that never use torch: the error is printed at startup and raised from the
hook, i.e. at ``import torch._inductor``/the first ``torch.compile``.
"""

from __future__ import annotations

import sys

# Not torch._inductor.config: it is imported half-way through torch._inductor.utils, so the
# gate would not exist yet. utils imports config, so both are complete when this fires.
HOOK_MODULE = "torch._inductor.utils"
# Emulation wraps compile_fx, which may be half-imported when utils completes; wait for it.
EMULATION_HOOK_MODULE = "torch._inductor.compile_fx"
_registered = False


def bootstrap() -> None:
    """Parse ``INDUCTOR_KNOBS_*`` and arrange activation at ``torch._inductor.utils`` import; idempotent."""
    global _registered
    if _registered:  # the .pth can run twice when a directory is on sys.path twice
        return
    _registered = True
    import os

    import wrapt

    from .errors import KnobsError
    from .knobs import EMULATE_SMS_VAR, Knobs

    try:
        Knobs.from_env()
        error: KnobsError | None = None
    except KnobsError as err:
        error = err
        print(f"inductor_knobs: {err}", file=sys.stderr)

    @wrapt.when_imported(EMULATION_HOOK_MODULE if os.environ.get(EMULATE_SMS_VAR) else HOOK_MODULE)
    def _activate(_module: object) -> None:
        if error is not None:
            raise error
        from .env import activate_from_env

        activate_from_env()
