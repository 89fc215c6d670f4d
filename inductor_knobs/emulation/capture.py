"""Emulation keeps CUDA graphs: the graphs captured for the emulating thread are captured on a green stream.

A CUDA graph's kernels run on the SMs of the stream it was *captured* on, wherever it is replayed.
Measured on an H100 (torch 2.11, a 4096³ bf16 GEMM): eager on the full GPU 0.173 ms, eager on a
16-SM green stream 1.265 ms; a graph captured on the green stream replays in 1.265 ms on it and
1.245 ms on the default stream, while the same graph captured on a side stream replays in 0.173 ms,
on the whole GPU.  torch captures on side streams by default, so the emulator redirects each capture
path to its *capture stream*, a second stream of the same green context (the facts per release are the
patch modules', :class:`~inductor_knobs.patches.emulation.SmallGpuEmulation`).  A second stream, not the
one work runs on, as torch captures on a side stream: cuBLAS keeps a workspace per stream, allocated
outside any graph's pool on a stream that eager work used, and a graph captured there replays into
freed memory once Inductor's graph trees free the workspaces ("unspecified launch failure", H100,
torch 2.11); on a stream used only for captures it is allocated inside the capturing graph's pool.

- **Inductor's CUDA graph trees** (``mode="reduce-overhead"``/``"max-autotune"``): one
  ``CUDAGraphTreeManager`` per thread and device warms up and records every graph on
  ``manager.stream``, a side stream its ``__init__`` makes (``_inductor/cudagraph_trees.py:2090`` in
  2.13).  While the emulation is active the entering thread's manager of that device (the one that
  exists on enter, and one made inside) has the capture stream there instead; on exit it gets back
  the stream object it had.  Autograd's threads use the forward thread's manager (torch stashes the
  managers in its TLS), so a backward graph is recorded on the capture stream too.
- **``torch.cuda.graph`` without ``stream=``** on the emulating thread (user code, Inductor's
  benchmarks through ``benchmark_gpu_with_cuda_graph`` in 2.12-2.13) captures on the capture stream
  instead of the class-wide ``default_capture_stream`` (``cuda/graphs.py:408`` in 2.13).  An explicit
  ``stream=`` is left alone (``Emulation.capture_stream`` is there to pass).
- **``ik.serving.capture_cuda_graphs``** warms up on the green stream work runs on and captures on the capture
  stream (:func:`capture_streams`).

Inductor's other capture paths make a stream of their own, so the emulation's config turns them off
(``emulation_capture_config``): ``triton.cudagraph_trees=True`` (the non-tree ``cudagraphify_impl``)
and, from 2.14, ``autotune_cudagraph_benchmarking=False``.

A graph keeps the stream it was captured on: graphs recorded inside the block replay on the
emulated SMs after it too, and graphs recorded before it replay on the whole GPU inside it; compile
and run inside the block.
"""

from __future__ import annotations

import threading
import weakref
from typing import Any

from ..core import torch_compat
from ..core.patching import SharedPatch, wrap_attribute
from ..core.undo import Change, warn_after_restore
from ..errors import EmulationWarning
from ..patches.torch_2_4 import TorchPatches


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
