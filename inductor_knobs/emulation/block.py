"""Plan a small-GPU emulation on a big GPU (``with ik.emulate_gpu(sms=40):``): the changes that emulate it.

One undo record each: confinement to a CUDA green context's stream of ``sms`` SMs (``GreenStreamChange``); what
Inductor sees (``SmViewChange``); CUDA graphs captured on a second green stream, since a graph replays on its
capture stream's SMs (``CaptureStreamChange``).  Around them, config: no capture path with a stream of its own
(``emulation_capture_config``), autotune in this process, a cache-key salt.  The SM view is process-wide
(two different emulations at once are refused); the stream is per thread.
"""

from __future__ import annotations

import importlib
import warnings
from typing import Any

from ..core import torch_compat
from ..core.attestation import CACHE_SALT, EMULATION, INDUCTOR_CONFIG, Asked, by_slot
from ..core.blocks import UndoContext
from ..core.changes import ConfigChange
from ..core.interception import AskChange, InterceptionUse
from ..core.undo import Change
from ..errors import EmulationWarning, InvalidKnobValue
from .confine import CaptureStreamChange, GreenStreamChange, check_green_context_support, green_capture_stream, green_stream
from .gpus import Emulation, EmulationSpec, resolve_spec
from .sm_view import SmViewChange, check_no_conflict, physical_properties


def plan_emulation(spec: EmulationSpec, *, process_wide: bool = False) -> tuple[list[Change], Emulation]:
    """Check ``spec`` on the live torch and GPU (raising as :func:`emulate_gpu` does on enter); return the changes in
    apply order and the :class:`Emulation`.  Changes nothing (a green context may be created and cached, idle)."""
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
    real: Any = physical_properties(index)  # the stubs lack shared_memory_per_block_optin
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
    source = f"emulate_gpu({spec.label()})"
    # Keeps every Inductor CUDA graph capture on a path CaptureStreamChange redirects; enforced over modes and knobs.
    asked = [
        Asked(INDUCTOR_CONFIG, key, value, source, EMULATION, overriding_warning=EmulationWarning)
        for key, value in patches.emulation_capture_config
    ]
    asked.append(Asked(CACHE_SALT, spec.cache_tag(), True, source))  # written at each compile (interception._with_salt)
    asked.append(Asked(INDUCTOR_CONFIG, "autotune_in_subproc", False, source, EMULATION))
    changes: list[Change] = [
        InterceptionUse(patches),
        # Benchmarks in a subprocess would run on the whole GPU.
        ConfigChange(patches, [(cfg, "autotune_in_subproc", False)], process_wide=process_wide),
        AskChange(patches, by_slot(asked), process_wide=process_wide),
        SmViewChange(patches, spec),
        GreenStreamChange(index, stream, spec.label()),
        CaptureStreamChange(patches, index, stream, capture, spec.label()),
    ]
    return changes, Emulation(
        spec.sms, granted, physical, spec.shared_memory_per_block, spec.preset, index, str(real.name), stream, capture
    )


class EmulateGpuContext(UndoContext):
    """Emulates a smaller GPU on enter, returning an ``Emulation``; an error on enter leaves nothing applied."""

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

    Work and CUDA graph captures from the entering thread run on a green context of ``sms`` SMs; every Inductor
    read of the SM count (``is_big_gpu``, ``DeviceProperties``, ``NUM_SMS``) sees ``sms``.  Bandwidth, L2,
    clocks and instruction set stay the real GPU's.  Composes with :func:`knobs` and ``ik.compile``; reverts exactly.

    Args:
        preset_or_sms: a preset name (``"T4"``, ``"L4"``, ``"RTX3070"``, … see ``emulation.gpus.PRESETS``) or SM count.
        sms: SM count (int, 1..the GPU's SM count), instead of the positional argument.
        shared_memory_per_block: bytes per block Inductor sees (int, <= the GPU's), or None: the preset's, else the GPU's.
        device: CUDA device index (default: the current device at enter).

    Returns:
        An :class:`EmulateGpuContext` (context manager, decorator, ``start()``/``stop()``); entering returns an
        :class:`~inductor_knobs.emulation.gpus.Emulation`.

    Raises:
        InvalidKnobValue: a bad value (at once), or one above the real GPU's (on enter).
        UnknownKnob: an unknown preset; the message lists the known ones.
        NotSupportedOnThisTorch: on enter, torch < 2.11 (no ``GreenContext.Stream()``), or an unknown green-context API.
        EmulationUnavailable: on enter, no CUDA GPU or the driver refused the green context.
        EmulationConflict: on enter, another emulation with other values is active.

    Relies on ``GreenContext.create``/``.Stream()`` (``torch/cuda/green_contexts.py``, 2.11+), the patch modules'
    getters and caches, ``CUDAGraphTreeManager.stream`` and ``torch.cuda.graph(stream=None)``.
    """
    return EmulateGpuContext(resolve_spec(preset_or_sms, sms=sms, shared_memory_per_block=shared_memory_per_block, device=device))
