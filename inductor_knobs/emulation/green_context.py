"""Confinement: the stream of a CUDA green context of ``sms`` SMs, made current on the entering thread.

Work launched from that thread goes to the stream of a green context (``GreenContext.create(num_sms=,
device_id=).Stream()`` on torch 2.11-2.13, ``GreenContext(num_sms=, device_id=).Stream()`` on
2.14-2.15: the patch modules' ``make_green_stream``), made current with ``torch.cuda.set_stream``.
Eager ATen/cuBLAS kernels, Inductor's Triton kernels and Inductor's autotune benchmarks all launch on
the current stream, so all run on the partition (measured on an H200, torch 2.11: a 4096³ bf16 GEMM
autotuned at 16 SMs benchmarks 1.26 ms against 0.19 ms on 132).  ``GreenContext.set_context()`` is
not used: after it, Inductor's compiled kernels escaped the partition (issue 5's measurement).  The
stream is per thread, as torch's current stream is.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any

from ..core import torch_compat
from ..core.undo import SAFE_EXIT, Change
from ..errors import EmulationUnavailable, KnobsError, NotSupportedOnThisTorch
from ..patches.torch_2_4 import TorchPatches

_GREEN_LOCK = threading.Lock()
#: (device, sms) -> (green context, its stream, granted SMs).  Kept for the process's life: the
#: caching allocator keeps blocks tied to these streams, torch 2.11-2.13 have no destroy, and from
#: 2.14 ``GreenContext.__del__`` destroys the context and its streams while the stream object (a
#: ``torch.cuda.ExternalStream``) holds no reference to it.
_GREEN: dict[tuple[int, int], tuple[Any, Any, int | None]] = {}
#: (device, sms) -> a second stream of that green context, the one CUDA graphs are captured on
#: (:func:`green_capture_stream`); kept as long as the context.
_CAPTURE: dict[tuple[int, int], Any] = {}


def _check_green_context_support(patches: TorchPatches, torch_version: str) -> None:
    """Refuse a torch without a green-context API its patch module knows, then one without CUDA.

    The API per release is the patch module's (``green_context_api``: ``GreenContext.create``
    on 2.11-2.13, the ``GreenContext(num_sms=, device_id=)`` constructor on 2.14-2.15).

    Raises:
        NotSupportedOnThisTorch: no ``GreenContext``, none with ``Stream()`` (< 2.11), or one whose
            API this torch's patch module does not recognise; the message names the release.
        EmulationUnavailable: no CUDA GPU.
    """
    import torch

    refusal = patches.green_context_refusal(torch_version)
    if refusal is not None:
        raise NotSupportedOnThisTorch(refusal)
    if not torch.cuda.is_available():
        raise EmulationUnavailable(
            f"emulate_gpu needs a CUDA GPU; torch {torch_version} sees none (torch.cuda.is_available() is False)"
        )


def green_stream(device_index: int, sms: int) -> tuple[Any, int | None]:
    """The (cached) stream of a green context of ``sms`` SMs on ``device_index``, and the SMs granted.

    The context is made the way this torch's patch module says (``TorchPatches.make_green_stream``:
    ``GreenContext.create(num_sms=, device_id=)`` on 2.11-2.13, ``GreenContext(num_sms=, device_id=)``
    on 2.14-2.15, ``torch/cuda/green_contexts.py``); the granted SMs come from ``GreenContext.sm_count``
    on 2.15, else from the driver through cuda-python (None if neither answers).

    Raises:
        NotSupportedOnThisTorch: this torch has no green-context API its patch module knows.
        EmulationUnavailable: the driver refused the green context (its message is included).
    """

    key = (device_index, sms)
    with _GREEN_LOCK, SAFE_EXIT:
        if key not in _GREEN:
            patches = torch_compat.installed(strict=False)
            _GREEN[key] = _made(device_index, sms, "a green context", lambda: patches.make_green_stream(device_index, sms))
        _, stream, granted = _GREEN[key]
    return stream, granted


def _made(device_index: int, sms: int, what: str, make: Callable[[], Any]) -> Any:
    """``make()``, with the driver's refusal as :class:`EmulationUnavailable` (a call, so that no ``try`` is in a
    body under ``_GREEN_LOCK``: see ``SAFE_EXIT``)."""
    import torch

    try:
        return make()
    except KnobsError:
        raise
    except Exception as exc:
        raise EmulationUnavailable(
            f"emulate_gpu(sms={sms}): the CUDA driver refused {what} on cuda:{device_index} "
            f"(torch {torch.__version__}, CUDA {torch.version.cuda}): {exc}"
        ) from exc


def green_capture_stream(device_index: int, sms: int) -> Any:
    """A second stream of the (cached) green context of ``sms`` SMs on ``device_index``, cached too.

    Emulation captures CUDA graphs there, never on the stream work runs on (see
    ``TorchPatches.make_capture_stream`` for why: cuBLAS's per-stream workspace).

    Raises:
        NotSupportedOnThisTorch, EmulationUnavailable: as :func:`green_stream`, or the driver refused
            the second stream.
    """

    green_stream(device_index, sms)
    key = (device_index, sms)
    with _GREEN_LOCK, SAFE_EXIT:
        if key not in _CAPTURE:
            patches = torch_compat.installed(strict=False)
            green = _GREEN[key][0]
            _CAPTURE[key] = _made(
                device_index, sms, "a second stream of the green context", lambda: patches.make_capture_stream(green)
            )
        return _CAPTURE[key]


class GreenStreamChange(Change):
    """Undo record: make the green context's stream current on this thread, ordered by events.

    The green stream waits for the work already queued on the prior stream (so inputs made before
    the block are ready) and, on revert, the prior stream waits for the green one (so results
    made inside are ready after it).
    """

    def __init__(self, device_index: int, stream: Any, description: str) -> None:
        self.device_index = device_index
        self.stream = stream
        self.description = f"current stream of cuda:{device_index}: green context ({description})"
        self._prior: Any = None
        self._prior_device = 0

    def apply(self) -> None:
        import torch

        self._prior_device = torch.cuda.current_device()
        self._prior = torch.cuda.current_stream(self.device_index)
        self.stream.wait_stream(self._prior)
        torch.cuda.set_stream(self.stream)  # also makes the stream's device current

    def revert(self) -> None:
        import torch

        self._prior.wait_stream(self.stream)
        torch.cuda.set_stream(self._prior)
        if torch.cuda.current_device() != self._prior_device:
            torch.cuda.set_device(self._prior_device)
