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
import weakref
from collections.abc import Callable
from typing import Any

from ..core import torch_compat
from ..core.patching import SharedPatch, wrap_attribute
from ..core.undo import SAFE_EXIT, Change, warn_after_restore
from ..errors import EmulationUnavailable, EmulationWarning, KnobsError, NotSupportedOnThisTorch
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


def check_green_context_support(patches: TorchPatches, torch_version: str) -> None:
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


class _Active(threading.local):
    """This thread's active capture redirections, outermost first."""

    def __init__(self) -> None:
        self.changes: list[CaptureStreamChange] = []


_ACTIVE = _Active()


def capture_streams(device_index: int | None = None) -> tuple[Any, Any] | None:
    """The green streams of the emulation active on this thread: (the one work runs on, the capture stream).

    Args:
        device_index: the CUDA device of the capture (default: the current device, read only while an
            emulation is active on this thread).

    Returns:
        The streams of the outermost ``ik.emulate_gpu`` active on this thread for that device, or None
        (no emulation there: capture as torch would).
    """
    changes = _ACTIVE.changes
    if not changes:
        return None
    if device_index is None:
        import torch

        device_index = torch.cuda.current_device()
    for change in changes:
        if change.device_index == device_index:
            return change.work_stream, change.stream
    return None


def capture_stream(device_index: int | None = None) -> Any:
    """The green stream a CUDA graph captured now on this thread must be captured on, or None (see :func:`capture_streams`)."""
    streams = capture_streams(device_index)
    return None if streams is None else streams[1]


def _manager_init(wrapped: Any, instance: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
    """``CUDAGraphTreeManager.__init__``: a manager made on an emulating thread records on the capture stream."""
    wrapped(*args, **kwargs)
    if _ACTIVE.changes:
        device_index = args[0] if args else kwargs.get("device_index")
        for change in _ACTIVE.changes:  # the outermost owns it: an inner block's exit must not restore it
            if change.device_index == device_index:
                change.adopt(instance)
                break


def _graph_init(wrapped: Any, instance: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
    """``torch.cuda.graph.__init__(cuda_graph, pool=None, stream=None, ...)``: no stream on an emulating thread
    means the capture stream (not torch's ``default_capture_stream``)."""
    if _ACTIVE.changes and (args[2] if len(args) > 2 else kwargs.get("stream")) is None:
        green = capture_stream()
        if green is not None:
            if len(args) > 2:
                args = (*args[:2], green, *args[3:])
            else:
                kwargs = {**kwargs, "stream": green}
    return wrapped(*args, **kwargs)


def _capture_steps() -> list[Any]:
    patches = torch_compat.installed(strict=False)
    return [
        wrap_attribute(patches.cudagraph_tree_manager_init, _manager_init),
        wrap_attribute(patches.graph_capture_init, _graph_init),
    ]


#: ``CUDAGraphTreeManager.__init__`` and ``torch.cuda.graph.__init__`` wrapped while any emulation is active
#: (installed for the first user, restored by identity after the last); the wrappers act only on
#: threads with an active emulation.
CAPTURE_PATCH = SharedPatch("CUDA graph capture streams (emulation)", _capture_steps)


class CaptureStreamChange(Change):
    """Undo record: CUDA graphs captured for this thread on ``device_index`` are captured on ``stream``.

    ``stream`` is the green context's capture stream; ``work_stream`` the one work runs on (where
    ``ik.serving.capture_cuda_graphs`` warms up).

    On apply the thread's CUDA graph tree manager of the device (if one exists) records on ``stream``;
    one made while the record is active does too.  On revert each gets back the stream object it had,
    unless an emulation of the same GPU stays active on this thread (an out-of-order exit): that one
    then owns them.  A manager that something else gave another stream meanwhile is left alone.
    """

    def __init__(self, patches: TorchPatches, device_index: int, work_stream: Any, stream: Any, description: str) -> None:
        self.patches = patches
        self.device_index = device_index
        self.work_stream = work_stream
        self.stream = stream
        self.description = f"CUDA graph captures on cuda:{device_index} from this thread: a green context stream ({description})"
        #: (weak reference to a tree manager, the stream it had), in adoption order.
        self._adopted: list[tuple[Any, Any]] = []

    def apply(self) -> None:
        CAPTURE_PATCH.acquire(self)
        if self not in _ACTIVE.changes:
            _ACTIVE.changes.append(self)
        manager = self.patches.cudagraph_tree_manager(self.device_index)
        if manager is not None:
            self.adopt(manager)

    def adopt(self, manager: Any) -> None:
        """Make ``manager`` warm up and record on the capture stream, remembering the stream it had."""
        name = self.patches.cudagraph_tree_stream_attribute
        had = getattr(manager, name, None)
        if had is None:
            warn_after_restore(
                f"emulate_gpu: {type(manager).__name__} has no {name!r} attribute on this torch "
                f"(patches.{self.patches.name}), so the CUDA graphs it records are captured outside the emulated "
                "GPU's green context and replay on the whole GPU",
                EmulationWarning,
            )
            return
        if had is self.stream:  # an outer emulation of the same GPU on this thread owns it
            return
        self._adopted.append((weakref.ref(manager), had))  # before the change: revert restores what it finds
        setattr(manager, name, self.stream)

    def revert(self) -> None:
        changes = _ACTIVE.changes
        if self in changes:
            changes.remove(self)
        heir = next((c for c in changes if c.device_index == self.device_index and c.stream is self.stream), None)
        name = self.patches.cudagraph_tree_stream_attribute
        while self._adopted:  # one at a time: an interrupted revert runs again from where it stopped
            ref, had = self._adopted[-1]
            manager = ref()
            if heir is not None:
                heir._adopted.insert(0, (ref, had))
            elif manager is not None and getattr(manager, name, None) is self.stream:
                setattr(manager, name, had)
            self._adopted.pop()
        CAPTURE_PATCH.release(self)
