"""Plan a small-GPU emulation on a big GPU (``with ik.emulate_gpu(sms=40):``): the changes that emulate it.

Three things make an honest emulator, and each is one undo record:

- **Confinement** (:class:`~inductor_knobs.emulation.confine.GreenStreamChange`): work launched
  from the entering thread runs on the stream of a CUDA green context of ``sms`` SMs
  (:mod:`inductor_knobs.emulation.confine`).
- **What Inductor sees** (:class:`~inductor_knobs.emulation.sm_view.SmViewChange`): the CUDA
  device-property getters return the emulated SM count (and, optionally, shared memory per block),
  and the caches of SM counts read earlier are emptied (:mod:`inductor_knobs.emulation.sm_view`).
- **CUDA graphs kept, and confined** (:class:`~inductor_knobs.emulation.confine.CaptureStreamChange`):
  a graph replays on the SMs of the stream it was captured on, so Inductor's CUDA graph trees and
  ``torch.cuda.graph`` captures of the entering thread are captured on a second stream of the same
  green context (:mod:`inductor_knobs.emulation.confine`).  ``mode="max-autotune"`` runs with CUDA graphs as on a
  real small GPU.

Around them, config changes: the capture paths that make a stream of their own are not taken
(``triton.cudagraph_trees=True``; from 2.14 ``autotune_cudagraph_benchmarking=False``: the patch
modules' ``emulation_capture_config``), autotune in this process (a subprocess would run on the
whole GPU), no reuse of autotune results or compiled graphs from other SM counts (a cache-key salt, and
a GEMM autotune timings file of the emulated GPU's own, :mod:`inductor_knobs.emulation.sm_view`).

The SM view is process-wide while any emulation is active (the caches it clears are process-wide),
so two emulations of different GPUs at once are refused.  The stream is per thread, as torch's
current stream is: enter ``emulate_gpu`` in every thread that launches work.
"""

from __future__ import annotations

import importlib
import warnings

from ..core import torch_compat
from ..core.attestation import CACHE_SALT, EMULATION, INDUCTOR_CONFIG, Asked, by_slot
from ..core.blocks import UndoContext
from ..core.changes import ConfigChange
from ..core.interception import AskChange, InterceptionUse
from ..core.undo import Change
from ..errors import EmulationWarning, InvalidKnobValue
from .confine import CaptureStreamChange, GreenStreamChange, check_green_context_support, green_capture_stream, green_stream
from .gpus import Emulation, EmulationSpec, resolve_spec
from .sm_view import SM_VIEW, SmViewChange, check_no_conflict


def plan_emulation(spec: EmulationSpec, *, process_wide: bool = False) -> tuple[list[Change], Emulation]:
    """Validate ``spec`` on the live torch and GPU and return the changes that emulate it.

    Nothing is changed here (a green context may be created and cached; it runs nothing until its
    stream is made current).

    Returns:
        The changes in apply order (config, SM view, stream, capture stream) and the :class:`Emulation`
        they make.

    Raises:
        NotSupportedOnThisTorch: torch without ``GreenContext.Stream()`` (< 2.11), or with a green-context
            API its patch module does not recognise.
        EmulationUnavailable: no CUDA GPU, or the driver refused the green context.
        InvalidKnobValue: ``sms`` or ``shared_memory_per_block`` above the real GPU's.
        EmulationConflict: another emulation with other values is active.
    """
    import torch

    patches = torch_compat.installed(strict=False)
    check_green_context_support(patches, torch.__version__)
    index = torch.cuda.current_device() if spec.device_index is None else spec.device_index
    if index >= torch.cuda.device_count():
        raise InvalidKnobValue(
            f"emulate_gpu: device={index} is not allowed; torch {torch.__version__} sees "
            f"{torch.cuda.device_count()} CUDA device(s)"
        )
    spec = EmulationSpec(spec.sms, spec.shared_memory_per_block, spec.preset, index)
    real = SM_VIEW.original_properties(index)
    physical, real_smem = int(real.multi_processor_count), int(real.shared_memory_per_block_optin)
    if spec.sms > physical:
        raise InvalidKnobValue(
            f"emulate_gpu: sms={spec.sms} is not allowed on {real.name} (cuda:{index}, torch {torch.__version__}); "
            f"it must be 1..{physical}, the GPU's SM count"
        )
    if spec.shared_memory_per_block is not None and spec.shared_memory_per_block > real_smem:
        raise InvalidKnobValue(
            f"emulate_gpu: shared_memory_per_block={spec.shared_memory_per_block} is not allowed on {real.name} "
            f"(torch {torch.__version__}); it must be at most {real_smem} bytes, the GPU's own"
        )
    check_no_conflict(spec)
    stream, granted = green_stream(index, spec.sms)
    capture = green_capture_stream(index, spec.sms)
    if granted is not None and granted != spec.sms:
        warnings.warn(
            f"emulate_gpu(sms={spec.sms}): the driver grants SMs in groups on {real.name}, so kernels run on "
            f"{granted} SMs while Inductor sees {spec.sms}",
            EmulationWarning,
            stacklevel=3,
        )
    cfg = importlib.import_module(INDUCTOR_CONFIG)
    salt = spec.cache_tag()
    source = f"emulate_gpu({spec.label()})"
    changes: list[Change] = [InterceptionUse(patches)]
    # Every CUDA graph Inductor captures goes through a path CaptureStreamChange redirects to the green
    # stream: the interception enforces these over modes, options and knobs, with an EmulationWarning.
    asked = [
        Asked(INDUCTOR_CONFIG, key, value, source, EMULATION, overriding_warning=EmulationWarning)
        for key, value in patches.emulation_capture_config
    ]
    asked.append(Asked(CACHE_SALT, salt, True, source))  # written at each compile (interception._with_salt)
    # Benchmarks in a subprocess would run on the whole GPU.  (Autotune timings stay cached: the SM view gives
    # the emulated GPU a timings file of its own, as a real one of another name has.)
    changes.append(ConfigChange(patches, [(cfg, "autotune_in_subproc", False)], process_wide=process_wide))
    asked.append(Asked(INDUCTOR_CONFIG, "autotune_in_subproc", False, source, EMULATION))
    changes += [
        AskChange(patches, by_slot(asked), process_wide=process_wide),
        SmViewChange(patches, spec),
        GreenStreamChange(index, stream, spec.label()),
        CaptureStreamChange(patches, index, stream, capture, spec.label()),
    ]
    emulation = Emulation(
        spec.sms, granted, physical, spec.shared_memory_per_block, spec.preset, index, str(real.name), stream, capture
    )
    return changes, emulation


class EmulateGpuContext(UndoContext):
    """Emulates a smaller GPU on enter (returning an :class:`~inductor_knobs.emulation.gpus.Emulation`).

    Raises (on enter):
        The errors of :func:`inductor_knobs.emulation.block.plan_emulation`; nothing stays applied.
    """

    def __init__(self, spec: EmulationSpec) -> None:
        self.spec = spec

    def __repr__(self) -> str:
        return f"emulate_gpu({self.spec.label()})"

    def _plan(self) -> tuple[list[Change], Emulation]:
        return plan_emulation(self.spec)


def emulate_gpu(
    preset_or_sms: str | int | None = None,
    /,
    *,
    sms: int | None = None,
    shared_memory_per_block: int | None = None,
    device: int | None = None,
) -> EmulateGpuContext:
    """Run everything inside on ``sms`` SMs of this GPU, and make Inductor see a GPU of that size.

    Work launched from the entering thread (eager ATen/cuBLAS, Inductor's Triton kernels and its
    autotune benchmarks) runs on a CUDA green context's stream of ``sms`` SMs; every place
    Inductor reads the SM count (the ``is_big_gpu`` gate, ``DeviceProperties``, ``NUM_SMS`` of
    persistent/TMA templates, split-reduction heuristics) sees ``sms``; with
    ``shared_memory_per_block`` Inductor prunes Triton GEMM configs as on that GPU.  CUDA graphs
    stay on: Inductor's CUDA graph trees, ``torch.cuda.graph`` without ``stream=`` and
    ``ik.serving.capture_cuda_graphs`` capture on a second stream of the green context from the entering
    thread (``Emulation.capture_stream``), so their replays run on the emulated SMs too.  Memory bandwidth, L2 size, clocks and
    the instruction set stay the real GPU's.  Composes with :func:`knobs`, :func:`force_gemm_autotune`
    and ``ik.compile`` in either nesting order; reverts exactly.

    Args:
        preset_or_sms: a preset name (``"T4"``, ``"L4"``, ``"RTX3070"``, ``"RTX4060"``, ``"GB10"``,
            … see ``inductor_knobs.emulation.gpus.PRESETS``) or an SM count (int).
        sms: SM count (int, 1..the GPU's SM count), instead of the positional argument.
        shared_memory_per_block: bytes per block Inductor sees (int, <= the GPU's), or None for
            the real GPU's; a preset supplies its own unless this is given.
        device: CUDA device index (default: the current device at enter).

    Returns:
        An :class:`EmulateGpuContext` (context manager, decorator, ``start()``/``stop()``);
        entering returns an :class:`~inductor_knobs.emulation.gpus.Emulation` (``sms``, ``granted_sms``,
        ``physical_sms``, ``stream``, …).

    Raises:
        InvalidKnobValue: a bad value (at once), or one above the real GPU's (on enter).
        UnknownKnob: an unknown preset; the message lists the known ones.
        NotSupportedOnThisTorch: on enter, torch < 2.11 (``GreenContext.Stream()`` is missing).
        EmulationUnavailable: on enter, no CUDA GPU or the driver refused the green context.
        EmulationConflict: on enter, another emulation with other values is active.

    Relies on ``torch.cuda.GreenContext.create(num_sms=, device_id=)`` and ``.Stream()``
    (``torch/cuda/green_contexts.py``, 2.11+), on the getters and caches each patch module
    lists (``device_property_getters``, ``sm_count_caches``), and on where CUDA graphs are
    captured: ``CUDAGraphTreeManager.stream`` (``torch/_inductor/cudagraph_trees.py``) and
    ``torch.cuda.graph(stream=None)`` (``torch/cuda/graphs.py``); see :mod:`inductor_knobs.emulation.confine`.
    """
    return EmulateGpuContext(resolve_spec(preset_or_sms, sms=sms, shared_memory_per_block=shared_memory_per_block, device=device))
