"""Startup hook: activate ``INDUCTOR_KNOBS_*`` in processes that never import inductor_knobs.

The installed ``inductor_knobs_startup.pth`` runs one line at interpreter start.  It checks
the environment first and imports this module only when an ``INDUCTOR_KNOBS_*`` variable
is set (and ``INDUCTOR_KNOBS_DISABLE`` is not), so an unconfigured process pays for one
scan of ``os.environ`` and imports nothing.  :func:`bootstrap` then parses the variables
(without importing torch) and registers a wrapt post-import hook that applies them when
``torch._inductor.compile_fx`` (Inductor's compile entry) is first imported: at the first
compile, or an explicit import of it.

A bad variable must not go unnoticed in a launch script, but the ``.pth`` must not kill
interpreters that never use torch: the error is printed at startup and raised from the
hook, i.e. at ``import torch._inductor``/the first ``torch.compile``.
"""

from __future__ import annotations

import sys

# Inductor's compile entry: every Inductor compile imports it, it imports utils (the gate) and
# config, and the compile interception wraps it, so all three are complete when this fires.
# (utils is imported half-way through compile_fx's own import, too early to wrap compile_fx.)
HOOK_MODULE = "torch._inductor.compile_fx"
_registered = False


def bootstrap() -> None:
    """Parse ``INDUCTOR_KNOBS_*`` and arrange activation at ``torch._inductor.utils`` import; idempotent."""
    global _registered
    if _registered:  # the .pth can run twice when a directory is on sys.path twice
        return
    _registered = True
    import wrapt

    from .errors import KnobsError
    from .knobs import Knobs

    try:
        Knobs.from_env()
        error: KnobsError | None = None
    except KnobsError as err:
        error = err
        print(f"inductor_knobs: {err}", file=sys.stderr)

    @wrapt.when_imported(HOOK_MODULE)
    def _activate(_module: object) -> None:
        if error is not None:
            raise error
        from .env import activate_from_env

        activate_from_env()
