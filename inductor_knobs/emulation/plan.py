"""Plan a small-GPU emulation on a big GPU (``with ik.emulate_gpu(sms=40):``): the changes that emulate it.

Three things make an honest emulator, and each is one undo record:

- **Confinement** (:class:`~inductor_knobs.emulation.green_context.GreenStreamChange`): work launched
  from the entering thread runs on the stream of a CUDA green context of ``sms`` SMs
  (:mod:`inductor_knobs.emulation.green_context`).
- **What Inductor sees** (:class:`~inductor_knobs.emulation.sm_view.SmViewChange`): the CUDA
  device-property getters return the emulated SM count (and, optionally, shared memory per block),
  and the caches of SM counts read earlier are emptied (:mod:`inductor_knobs.emulation.sm_view`).
- **CUDA graphs kept, and confined** (:class:`~inductor_knobs.emulation.capture.CaptureStreamChange`):
  a graph replays on the SMs of the stream it was captured on, so Inductor's CUDA graph trees and
  ``torch.cuda.graph`` captures of the entering thread are captured on a second stream of the same
  green context (:mod:`inductor_knobs.emulation.capture`).  ``mode="max-autotune"`` runs with CUDA graphs as on a
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
from ..core.changes import ConfigChange
from ..core.interception import AskChange, InterceptionUse
from ..core.undo import Change
from ..errors import EmulationWarning, InvalidKnobValue
from .capture import CaptureStreamChange
from .emulate import Emulation, EmulationSpec
from .green_context import GreenStreamChange, _check_green_context_support, green_capture_stream, green_stream
from .sm_view import _VIEW, SmViewChange, check_no_conflict


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
    _check_green_context_support(patches, torch.__version__)
    index = torch.cuda.current_device() if spec.device_index is None else spec.device_index
    if index >= torch.cuda.device_count():
        raise InvalidKnobValue(
            f"emulate_gpu: device={index} is not allowed; torch {torch.__version__} sees "
            f"{torch.cuda.device_count()} CUDA device(s)"
        )
    spec = EmulationSpec(spec.sms, spec.shared_memory_per_block, spec.preset, index)
    real = _VIEW.original_properties(index)
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
