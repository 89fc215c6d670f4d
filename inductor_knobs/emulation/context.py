"""``ik.emulate_gpu(...)``: a block that runs on a green context of fewer SMs and makes Inductor see that GPU."""

from __future__ import annotations

from ..core.blocks import UndoContext
from ..core.undo import Change
from .emulate import Emulation, EmulationSpec, resolve_spec
from .plan import plan_emulation


class EmulateGpuContext(UndoContext):
    """Emulates a smaller GPU on enter (returning an :class:`~inductor_knobs.emulation.emulate.Emulation`).

    Raises (on enter):
        The errors of :func:`inductor_knobs.emulation.plan.plan_emulation`; nothing stays applied.
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
            … see ``inductor_knobs.emulation.gpu_presets.PRESETS``) or an SM count (int).
        sms: SM count (int, 1..the GPU's SM count), instead of the positional argument.
        shared_memory_per_block: bytes per block Inductor sees (int, <= the GPU's), or None for
            the real GPU's; a preset supplies its own unless this is given.
        device: CUDA device index (default: the current device at enter).

    Returns:
        An :class:`EmulateGpuContext` (context manager, decorator, ``start()``/``stop()``);
        entering returns an :class:`~inductor_knobs.emulation.emulate.Emulation` (``sms``, ``granted_sms``,
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
    ``torch.cuda.graph(stream=None)`` (``torch/cuda/graphs.py``); see :mod:`inductor_knobs.emulation.capture`.
    """
    return EmulateGpuContext(resolve_spec(preset_or_sms, sms=sms, shared_memory_per_block=shared_memory_per_block, device=device))
