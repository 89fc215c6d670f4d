"""torch's C++ ISA probes, skipped while an AOT bundle loads: the build host's answer stands in for them.

Why: from 2.10 torch's loader compares the package's metadata with this host's
(``torch/export/pt2_archive/_package.py`` ``_load_aoti`` -> ``codecache.get_device_information``, which
calls ``torch._inductor.cpu_vec_isa.pick_vec_isa()``: 2.10.0 ``:1019``/``:182``, 2.11.0 ``:1031``/``:169``,
2.12.0 ``:1034``/``:176``, 2.13.0 ``:1054``/``:259``, 2.14.1 ``:1066``/``:304``, 2.15.0 ``:1068``/``:313``;
2.7.0-2.9.0 compare nothing).  On a host whose Inductor cache is empty, as on a new serving host,
``pick_vec_isa`` compiles a C++ probe per vector ISA the CPU reports, with the ATen vector headers, and
loads each in a child Python (which imports torch in 2.11).  On an H100 host (16 CPUs, torch 2.11.0)
that still ran after 40 s; on the 2-core development machine it took about 5 of a 7.8 s load.  torch
uses the answer only to log a difference.

How: the bundle records the build host's ISA (:func:`picked`); while :func:`recorded` is entered, this
thread's ``pick_vec_isa()`` returns torch's own ``VecISA`` object of that name (from
``cpu_vec_isa.supported_vec_isa_list``; naming one builds nothing) instead of probing.  That is what the
probes would say here: :func:`~inductor_knobs.serving.aot_package.check_cpu` has already refused a
CPU lacking any of the build host's instruction-set extensions.  Other threads, and this one after the
load, call torch's function unchanged: the answer is not cached, so the next C++ compile in the process
probes as usual.  A name torch does not know (another torch built the bundle) falls through to the probes.
"""

from __future__ import annotations

import contextlib
import contextvars
from collections.abc import Iterator
from typing import Any

from ..core._patching import SharedPatch, present, wrap_attribute

PICK_PATH = "torch._inductor.cpu_vec_isa:pick_vec_isa"

#: The ISA this thread's load stands in for the probes (``str(isa).upper()``, as torch writes it in a package's
#: ``AOTI_CPU_ISA``), or None: probe as torch does.
_standing_in: contextvars.ContextVar[str | None] = contextvars.ContextVar("inductor_knobs_aot_isa", default=None)


def _pick(wrapped: Any, instance: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
    name = _standing_in.get()
    isa = _named(name) if name is not None else None
    return isa if isa is not None else wrapped(*args, **kwargs)


def _named(name: str) -> Any:
    """torch's ``VecISA`` object whose name is ``name`` (``str()`` of one builds nothing), or None."""
    from torch._inductor import cpu_vec_isa

    for isa in (*cpu_vec_isa.supported_vec_isa_list, cpu_vec_isa.invalid_vec_isa):
        if str(isa).upper() == name:
            return isa
    return None


_PATCH = SharedPatch("pick_vec_isa while an AOT bundle loads", lambda: [wrap_attribute(PICK_PATH, _pick)])


def picked() -> str | None:
    """This host's vector ISA as torch names it in a package (``AOTI_CPU_ISA``), or None where torch has no
    ``cpu_vec_isa.pick_vec_isa``.  Probes if torch has not yet (it has after an AOTInductor compile)."""
    if not present(PICK_PATH):
        return None
    from torch._inductor import cpu_vec_isa

    return str(cpu_vec_isa.pick_vec_isa()).upper()


@contextlib.contextmanager
def recorded(name: str | None) -> Iterator[None]:
    """While entered, this thread's ``pick_vec_isa()`` answers ``name`` without probing (see the module docstring).

    Args:
        name (str | None): the build host's :func:`picked`; None (not recorded) changes nothing.

    The wrapper is installed only while some thread is inside (:class:`~inductor_knobs.core._patching.SharedPatch`:
    torch's function is put back by identity when the last one leaves, on every exit path).
    """
    if name is None or not present(PICK_PATH):
        yield
        return
    holder = object()
    token = _standing_in.set(name)
    try:
        _PATCH.acquire(holder)
        yield
    finally:
        try:
            _PATCH.release(holder)  # idempotent: a holder never acquired is not counted
        finally:
            _standing_in.reset(token)
