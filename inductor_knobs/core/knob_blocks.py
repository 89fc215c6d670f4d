"""``ik.knobs(...)`` and ``ik.force_gemm_autotune(...)``: blocks that apply a :class:`~inductor_knobs.core.knobs.Knobs`.

Each is an :class:`~inductor_knobs.core.context.UndoContext` (context manager, decorator,
``start()``/``stop()``) whose records come from :func:`inductor_knobs.core.plan.plan`.
"""

from __future__ import annotations

import sys
from typing import Any

from ._undo import Change
from .context import UndoContext
from .knobs import Knobs
from .messages import torch_version
from .plan import plan


class KnobsContext(UndoContext):
    """Applies a :class:`Knobs` on enter (returning it) and reverts every change on exit.

    Raises (on enter):
        KnobsError subclasses from :func:`inductor_knobs.core.plan.plan`; nothing stays applied.
    """

    def __init__(self, knobs: Knobs, *, source: str = "knobs", sources: dict[str, str] | None = None) -> None:
        self.knobs = knobs
        self.strict = bool(knobs.strict)
        self.source = source
        self.sources = sources

    def __repr__(self) -> str:
        return f"knobs({', '.join(f'{k}={v!r}' for k, v in self.knobs.to_dict().items())})"

    def _plan(self) -> tuple[list[Change], Knobs]:
        return plan(self.knobs, source=self.source, sources=self.sources), self.knobs


def knobs(spec: Knobs | None = None, /, **kwargs: Any) -> KnobsContext:
    """Return a context manager / decorator that applies knobs to TorchInductor.

    Args:
        spec: a prebuilt :class:`Knobs` (e.g. ``Knobs.from_env()``); keywords override it.
        **kwargs: any :class:`Knobs` field: ``min_sms`` (int SMs), ``max_autotune``,
            ``max_autotune_gemm``, ``gemm_backends``, ``gemm_search_space``,
            ``coordinate_descent_tuning``, ``cudagraphs``, ``trace``, ``sdpa_backends``, ``tunableop``,
            ``cudnn_sdpa_avoid_recompile`` (2.9+), ``cudagraph_capture_sizes`` (2.8+), ``lookup_table``
            (2.10+), ``config``, ``on_mismatch``, ``strict``.

    Returns:
        A :class:`KnobsContext`.  ``torch.compile`` compiles at the first call of the
        compiled function, so that call (and any recompile) must happen inside it.

    Raises:
        UnknownKnob: an unknown keyword ("did you mean" included).
        InvalidKnobValue: a bad value.  Torch-dependent checks happen on enter.
    """
    if spec is not None and not isinstance(spec, Knobs):
        from ..errors import InvalidKnobValue

        hint = f"; did you mean knobs(min_sms={spec!r})?" if isinstance(spec, int) and not isinstance(spec, bool) else ""
        raise InvalidKnobValue(
            f"knobs({spec!r}) is invalid on torch {torch_version()}: allowed an ik.Knobs or keyword arguments{hint}"
        )
    extra = _knobs_from_kwargs(kwargs)
    return KnobsContext(spec.merged(extra) if spec is not None else extra)


#: (torch version, keyword items, their types) -> the validated Knobs: a block written in a loop
#: (``with ik.knobs(...)``) validates its keywords once.  Knobs are immutable, so sharing is safe.
_KNOBS_BY_KWARGS: dict[tuple[Any, ...], Knobs] = {}
#: Only these values are cached, keyed with their exact types: ``1 == True`` and ``40 == 40.0`` hash
#: alike, and a wrong type must still be refused after an equal valid value was cached.
_CACHED_TYPES = frozenset({bool, int, float, str, type(None)})


def _knobs_from_kwargs(kwargs: dict[str, Any]) -> Knobs:
    types = tuple(map(type, kwargs.values()))
    if not _CACHED_TYPES.issuperset(types) or isinstance(kwargs.get("trace"), str):
        # a container (config=...) can hold 1 for True; a trace directory is probed on the file system every time
        return Knobs.from_kwargs(**kwargs)
    torch = sys.modules.get("torch")
    version = torch.__version__ if torch is not None else torch_version()  # no call once torch is imported
    key = (version, tuple(kwargs.items()), types)  # call-site order: each order is cached once
    found = _KNOBS_BY_KWARGS.get(key)
    return found if found is not None else _remember(key, Knobs.from_kwargs(**kwargs))


def _remember(key: tuple[Any, ...], knobs: Knobs) -> Knobs:
    if len(_KNOBS_BY_KWARGS) >= 256:
        _KNOBS_BY_KWARGS.clear()
    _KNOBS_BY_KWARGS[key] = knobs
    return knobs


def force_gemm_autotune(min_sms: int = 1, backends: str = "ATEN,TRITON", **kwargs: Any) -> KnobsContext:
    """Open the SM gate and turn GEMM autotuning on: ``knobs(min_sms=…, max_autotune_gemm=True, gemm_backends=…)``.

    Args:
        min_sms: open the gate for CUDA devices with at least this many SMs (default 1: every GPU).
        backends: ``max_autotune_gemm_backends`` (default ``"ATEN,TRITON"``, keeping the ATen fallback).
        **kwargs: further knobs, as for :func:`knobs`; they win over the two above.
    """
    torch = sys.modules.get("torch")
    if kwargs or torch is None or type(min_sms) is not int or type(backends) is not str:
        return KnobsContext(_knobs_from_kwargs({**_forced(min_sms, backends), **kwargs}))
    # The common form, written in a loop: a small key instead of the general one (the exact types
    # are checked above, so 40.0 or True for min_sms never reaches this cache).
    key = (torch.__version__, "force_gemm_autotune", min_sms, backends)
    found = _KNOBS_BY_KWARGS.get(key)
    return KnobsContext(found if found is not None else _remember(key, _knobs_from_kwargs(_forced(min_sms, backends))))


def _forced(min_sms: object, backends: object) -> dict[str, Any]:
    return {"min_sms": min_sms, "max_autotune_gemm": True, "gemm_backends": backends}
