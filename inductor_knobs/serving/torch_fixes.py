"""Fixes of torch bugs (most fixed in a later torch release), held while ``ik.serving.warmup``,
``ik.serving.load_serving_bundle`` and an AOT build of ``ik.serving.save_serving_bundle`` run.

The installed torch's patches module says which fixes it needs (:mod:`inductor_knobs.patches.fixes`:
on torch 2.8-2.11, the autotune cache's coordinate-descent winners that a warm load tuned again; on 2.8-2.15,
those a compile worker read and sent back without their mark (fixed in no release yet); on 2.5-2.12, the CPU
vector-ISA probes' children importing torch, seconds apiece, that an AOT bundle's build pays).  They
are one :class:`~inductor_knobs.ext.SharedPatch`, installed while any warm-up or bundle load
holds it and restored by identity after the last one: process-wide while held, as fixed code in torch
would be, so a compile on another thread in that window gets the fix too.  A wrapper that someone else
wrapped again meanwhile stays inside theirs after the release, and passes calls through from then on.
"""

from __future__ import annotations

import contextlib
import functools
import sys
from collections.abc import Iterator
from typing import Any

from ..ext import SharedPatch, present, release_of, replace_attribute, resolve, torch_compat, wrap_attribute


@functools.cache  # one step object per fix for the process: it reuses its wrapper while torch's original is the same
def _steps() -> tuple[Any, ...]:
    patches = torch_compat.installed(strict=False)  # imports torch
    steps = []
    for path, fix in patches.fixes(release_of(sys.modules["torch"].__version__)):
        # A build whose module does not import has nothing to fix, and a warm-up must not fail for a fix.
        if not present(path):
            continue
        if callable(fix):  # a wrapt wrapper of the function at ``path``
            owner, name = resolve(path)
            if isinstance(owner, type) and name not in vars(owner):  # inherited: nothing of this class to wrap
                continue
            steps.append(wrap_attribute(path, _while_held(fix)))
        else:  # a patches.fixes.Replacement: data anyone else changed is left alone, checked at every install
            steps.append(replace_attribute(path, fix.value, only_if=fix.replaces))
    return tuple(steps)


def _while_held(fix: Any) -> Any:
    """``fix`` while :data:`TORCH_FIXES` is held; the original alone once it is not (a wrapper left inside someone
    else's after the release)."""

    def wrapper(wrapped: Any, instance: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
        if TORCH_FIXES.users:
            return fix(wrapped, instance, args, kwargs)
        return wrapped(*args, **kwargs)

    return wrapper


TORCH_FIXES = SharedPatch("fixes of torch bugs (patches/fixes.py)", _steps)


@contextlib.contextmanager
def torch_fixes() -> Iterator[None]:
    """Hold the installed torch's fixes (see the module docstring) for the block; nothing on a torch that needs none.

    Raises:
        Whatever installing a fix raises (nothing is left installed then).
    """
    holder = object()
    try:  # acquire inside: an interrupt after it installed and counted the holder still releases it
        TORCH_FIXES.acquire(holder)
        yield
    finally:
        TORCH_FIXES.release(holder)  # a no-op for a holder that is not in it
