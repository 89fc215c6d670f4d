"""Confinement: the stream of a CUDA green context of ``sms`` SMs, made current on the entering thread.

The stream (patch modules' ``make_green_stream``: ``GreenContext.create(num_sms=, device_id=).Stream()`` on torch
2.11-2.13, ``GreenContext(num_sms=, device_id=).Stream()`` on 2.14-2.15) is made current with
``torch.cuda.set_stream``, so eager kernels, Inductor's kernels and its autotune benchmarks all run on the partition.
``GreenContext.set_context()`` is not used: Inductor's compiled kernels escaped the partition after it.  CUDA graphs
captured on an emulating thread use a second stream of the same context (:data:`CAPTURE_PATCH`).
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
#: (device, sms) -> (green context, its stream, granted SMs), kept for the process's life: the caching allocator
#: keeps blocks tied to these streams, and from 2.14 ``GreenContext.__del__`` destroys its streams.
_GREEN: dict[tuple[int, int], tuple[Any, Any, int | None]] = {}
#: (device, sms) -> the second stream of that green context, for CUDA graph captures.
_CAPTURE: dict[tuple[int, int], Any] = {}


def check_green_context_support(patches: TorchPatches, torch_version: str) -> None:
    """Raise NotSupportedOnThisTorch without a green-context API the patch module knows (< 2.11), then
    EmulationUnavailable without CUDA."""
    import torch

    refusal = patches.green_context_refusal(torch_version)
    if refusal is not None:
        raise NotSupportedOnThisTorch(refusal)
    if not torch.cuda.is_available():
        raise EmulationUnavailable(
            f"emulate_gpu needs a CUDA GPU; torch {torch_version} sees none (torch.cuda.is_available() is False)"
        )


def green_stream(device_index: int, sms: int) -> tuple[Any, int | None]:
    """The (cached) stream of a green context of ``sms`` SMs on ``device_index``, and the SMs granted (or None).
    Raises NotSupportedOnThisTorch (no known green-context API) or EmulationUnavailable (the driver refused)."""
    key = (device_index, sms)
    with _GREEN_LOCK, SAFE_EXIT:
        if key not in _GREEN:
            patches = torch_compat.installed(strict=False)
            _GREEN[key] = _made(device_index, sms, "a green context", lambda: patches.make_green_stream(device_index, sms))
        _, stream, granted = _GREEN[key]
    return stream, granted


def _made(device_index: int, sms: int, what: str, make: Callable[[], Any]) -> Any:
    """``make()``, with the driver's refusal as EmulationUnavailable (no ``try`` under ``_GREEN_LOCK``: see SAFE_EXIT)."""
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
    """The (cached) capture stream of :func:`green_stream`'s context, which raises as it does; not the work stream
    (``TorchPatches.make_capture_stream``: cuBLAS's per-stream workspace)."""
    green_stream(device_index, sms)
    key = (device_index, sms)
    with _GREEN_LOCK, SAFE_EXIT:
        if key not in _CAPTURE:
            make, green = torch_compat.installed(strict=False).make_capture_stream, _GREEN[key][0]
            _CAPTURE[key] = _made(device_index, sms, "a second stream of the green context", lambda: make(green))
        return _CAPTURE[key]


class GreenStreamChange(Change):
    """Undo record: make the green stream current on this thread; each stream waits for the other's queued work."""

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
        device_index: the CUDA device of the capture (default: the current device).

    Returns:
        The outermost active ``ik.emulate_gpu``'s streams for that device, or None (capture as torch would).
    """
    if not _ACTIVE.changes:
        return None
    if device_index is None:
        import torch

        device_index = torch.cuda.current_device()
    change = _outermost(device_index)
    return None if change is None else (change.work_stream, change.stream)


def _outermost(device_index: int | None) -> CaptureStreamChange | None:
    return next((c for c in _ACTIVE.changes if c.device_index == device_index), None)


def capture_stream(device_index: int | None = None) -> Any:
    """The stream a CUDA graph captured now on this thread must be captured on, or None."""
    streams = capture_streams(device_index)
    return None if streams is None else streams[1]


def _manager_init(wrapped: Any, instance: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
    """A ``CUDAGraphTreeManager`` made on an emulating thread records on the capture stream."""
    wrapped(*args, **kwargs)
    change = _outermost(args[0] if args else kwargs.get("device_index"))  # an inner block's exit must not restore it
    if change is not None:
        change.adopt(instance)


def _graph_init(wrapped: Any, instance: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
    """``torch.cuda.graph.__init__(cuda_graph, pool=None, stream=None, ...)``: no stream on an emulating thread
    means the capture stream."""
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


#: ``CUDAGraphTreeManager.__init__`` and ``torch.cuda.graph.__init__``, wrapped while any emulation is active.
CAPTURE_PATCH = SharedPatch("CUDA graph capture streams (emulation)", _capture_steps)


class CaptureStreamChange(Change):
    """Undo record: this thread's CUDA graph tree managers of ``device_index`` record on the capture ``stream``.

    Revert gives each its stream back unless an emulation of the same GPU stays active on this thread (an
    out-of-order exit takes them over); a manager given another stream meanwhile is left alone.
    """

    def __init__(self, patches: TorchPatches, device_index: int, work_stream: Any, stream: Any, description: str) -> None:
        self.patches = patches
        self.device_index = device_index
        self.work_stream = work_stream
        self.stream = stream
        self.description = f"CUDA graph captures on cuda:{device_index} from this thread: a green context stream ({description})"
        self._adopted: list[tuple[Any, Any]] = []  # (weak reference to a manager, the stream it had)

    def apply(self) -> None:
        CAPTURE_PATCH.acquire(self)
        if self not in _ACTIVE.changes:
            _ACTIVE.changes.append(self)
        manager = self.patches.cudagraph_tree_manager(self.device_index)
        if manager is not None:
            self.adopt(manager)

    def adopt(self, manager: Any) -> None:
        """Make ``manager`` record on the capture stream, remembering the stream it had."""
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
