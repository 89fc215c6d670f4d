"""Small-GPU emulation (``ik.emulate_gpu``): where Inductor reads the SM count, and the green context.

A base module of :mod:`inductor_knobs.patches.torch_2_4` (``_``-prefixed: no ``PATCHES``, so
:func:`inductor_knobs.core.torch_compat.all_patch_modules` skips it).  What :class:`SmallGpuEmulation`
encodes (``torch/`` relative):

- ``torch.cuda.get_device_properties`` serves ``is_big_gpu`` (2.4–2.5), ``get_max_num_sms``,
  flex decoding and the shared-memory pruning of GEMM configs; ``CudaInterface.get_device_properties``
  is bound to it at import (``_dynamo/device_interface.py:194`` in 2.4, ``:341`` in 2.15).  Emulation
  wraps both and clears the ``functools`` caches that hold a count read earlier (``sm_count_caches``:
  ``_inductor/utils.py:972`` in 2.4; more from 2.6 and 2.7) and the compile workers' dict.
- ``_inductor/codecache.py``'s ``CacheBase.get_local_cache_path``: the GEMM autotune timings' file, one per device
  name; emulation gives the emulated GPU its own (:attr:`SmallGpuEmulation.autotune_local_cache_path`).
- ``torch/cuda/green_contexts.py``: no ``GreenContext`` with ``Stream()`` before 2.11 (2.10 has
  ``create`` and ``set_context`` only), so this base refuses; the era modules name the API
  (``green_context_api``) and make the context: ``create(num_sms=, device_id=)`` in 2.11–2.13
  (:mod:`.torch_2_8`), the constructor from 2.14 (:mod:`.torch_2_14`), ``.sm_count`` in 2.15
  (:mod:`.torch_2_15`).
- Where CUDA graphs are captured (emulation keeps them, captured on a second stream of its green
  context: a graph replays on the SMs of the stream it was captured on).  ``_inductor/cudagraph_trees.py``: one
  ``CUDAGraphTreeManager`` per thread and device (``local.tree_manager_containers``, stashed in
  torch's TLS for autograd threads) warms up and records every graph on ``manager.stream``, a side
  stream its ``__init__(self, device_index)`` makes (``__init__`` at ``:1996`` in 2.11, read on an
  H100; ``self.stream = torch.cuda.Stream()`` at ``:2090`` in 2.13, ``:2315`` in 2.14.1;
  read by ``CUDAWarmupNode.run`` through ``_use_cuda_memory_pool_manager``, ``:757``/``:800``, and
  by ``CUDAGraphNode._record``'s ``torch.cuda.graph(..., stream=self.stream)``, ``:1372``/``:1474``).
  ``cuda/graphs.py``: ``torch.cuda.graph(cuda_graph, pool=None, stream=None, ...)`` captures on the
  class-wide ``default_capture_stream`` when ``stream`` is None (``:408`` in 2.13, ``:1125`` in 2.14.1).
  ``compile_fx.py``'s ``cudagraphify_impl`` (``triton.cudagraph_trees=False``) makes a local side
  stream (``:1995`` in 2.13), so emulation asks for the trees; 2.14's
  ``autotune_cudagraph_benchmarking`` captures each candidate on a local stream
  (``runtime/benchmarking.py:376`` in 2.14.1), so emulation asks it off (:mod:`.torch_2_14`).
"""

from __future__ import annotations

import sys
from typing import Any, ClassVar


class SmallGpuEmulation:
    """The SM-count read sites emulation wraps, and the green context it runs in (see the module docstring)."""

    #: The patch module's name (``torch_2_4``), for messages.
    name: ClassVar[str]

    # -- where Inductor reads the SM count (small-GPU emulation wraps and clears these) --
    #: ``module:attribute`` getters of CUDA device properties.  ``torch.cuda.get_device_properties``
    #: serves ``is_big_gpu`` (2.4–2.5), ``get_max_num_sms`` (→ ``NUM_SMS`` of persistent/TMA
    #: templates), flex decoding and the shared-memory pruning of GEMM configs;
    #: ``CudaInterface.get_device_properties`` is a staticmethod bound to it at import
    #: (``_dynamo/device_interface.py:194`` in 2.4, ``:341`` in 2.15), read by
    #: ``DeviceProperties.create`` (the 2.6+ gate, ``triton_heuristics``, split reductions in
    #: ``choices.py``/``ir.py``/``simd.py``) and, on 2.15, ``get_multi_processor_count``.
    device_property_getters: ClassVar[tuple[str, ...]] = (
        "torch.cuda:get_device_properties",
        "torch._dynamo.device_interface:CudaInterface.get_device_properties",
    )
    #: ``functools`` caches that hold an SM count read earlier (``_inductor/utils.py:972`` in 2.4).
    sm_count_caches: ClassVar[tuple[str, ...]]
    #: Where Inductor keeps GEMM autotune timings on disk: ``CacheBase.get_local_cache_path`` (a staticmethod,
    #: ``_inductor/codecache.py``: 2.8.0 ``:242``, 2.9.1 ``:219``, 2.10.0 ``:232``, 2.11.0 ``:219``, 2.12.0 ``:226``,
    #: 2.13.0 ``:319``, 2.14.1 ``:364``), one file per "system" (device name, CUDA and Triton versions) that
    #: ``PersistentCache.lookup`` reads before it benchmarks a GEMM's choices and writes after.  A real T4 has a
    #: file of its own (another device name); emulation gives the emulated GPU one too (:mod:`..emulation.sm_view`),
    #: so a GEMM seen again in the process is not benchmarked again, as on that GPU, and the whole GPU never
    #: reads timings measured on fewer SMs.
    autotune_local_cache_path: ClassVar[str] = "torch._inductor.codecache:CacheBase.get_local_cache_path"
    #: The dict in which compile workers cache every device's properties.
    device_properties_dict_cache: ClassVar[str] = "torch._dynamo.device_interface:caching_worker_device_properties"

    # -- green contexts ----------------------------------------------------------------------
    #: The first release whose ``torch.cuda.GreenContext`` has ``Stream()`` (``torch/cuda/green_contexts.py:45``
    #: in 2.11; 2.10 has ``create`` only).  Emulation needs it and feature-checks it at run time.
    green_stream_since: ClassVar[str] = "2.11"
    #: How this range makes the green context small-GPU emulation runs on: None (torch 2.4-2.10 have
    #: no ``GreenContext`` with ``Stream()``), ``"create"`` (2.11-2.13: ``GreenContext.create(num_sms=,
    #: device_id=)``, C++-backed), ``"constructor"`` (2.14: ``GreenContext(num_sms=, device_id=)``, Python
    #: over ``cuda.bindings``; ``create`` is "kept for compatibility"), ``"constructor+sm_count"`` (2.15:
    #: the same constructor, and ``.sm_count`` says how many SMs the driver granted).
    green_context_api: ClassVar[str | None]

    def green_context_problem(self) -> str | None:
        """Why emulation cannot make a confining green context on this torch, or None when it can.

        Reads ``torch.cuda.GreenContext``: it must exist, have ``Stream()`` (2.11+; 2.10 has
        ``create`` and ``set_context`` only, ``torch/cuda/green_contexts.py``) and have the shape
        :attr:`green_context_api` names (:meth:`_green_api_problem`).  Returns a phrase that
        completes "torch X has …".
        """
        import torch

        green = getattr(torch.cuda, "GreenContext", None)
        if green is None:
            return "no GreenContext"
        if not callable(getattr(green, "Stream", None)):
            return "GreenContext without Stream()"
        if self.green_context_api is None:
            return f"a GreenContext whose API patches.{self.name} does not know"
        return self._green_api_problem(green)

    def _green_api_problem(self, green: Any) -> str | None:
        """Whether ``green`` (the ``GreenContext`` class) has this range's API; None when it does."""
        return f"a GreenContext whose API patches.{self.name} does not know"

    def green_context_refusal(self, torch_version: str) -> str | None:
        """The ``NotSupportedOnThisTorch`` message for :meth:`green_context_problem`, or None."""
        problem = self.green_context_problem()
        if problem is None:
            return None
        return (
            f"emulate_gpu needs torch.cuda.GreenContext with Stream() (torch >= {self.green_stream_since}); torch "
            f"{torch_version} has {problem}. GreenContext.set_context() alone does not confine Inductor's compiled "
            "kernels, so no emulator is offered here"
        )

    def make_green_stream(self, device_index: int, sms: int) -> tuple[Any, Any, int | None]:
        """Create a green context of ``sms`` SMs on ``device_index`` and one stream of it.

        Returns:
            ``(context, stream, granted SMs or None)``.  The caller must keep ``context`` alive as
            long as ``stream`` may be used: from 2.14 ``GreenContext.__del__`` destroys the context
            and its streams, and the stream (a ``torch.cuda.ExternalStream``) holds no reference to it.

        Raises:
            NotSupportedOnThisTorch: this torch has no green-context API this range knows.
            Exception: whatever torch or the driver raises when it refuses the context.
        """
        import torch

        refusal = self.green_context_refusal(torch.__version__)
        if refusal is not None:
            from inductor_knobs.errors import NotSupportedOnThisTorch

            raise NotSupportedOnThisTorch(refusal)
        context = self._new_green_context(torch.cuda.GreenContext, device_index, sms)
        stream = context.Stream()
        return context, stream, self.granted_sms(context, device_index, sms)

    def make_capture_stream(self, context: Any) -> Any:
        """One more stream of ``context`` (from :meth:`make_green_stream`): where emulation captures CUDA graphs.

        ``GreenContext.Stream()`` makes a new stream of the context at each call (2.14.1
        ``cuda/green_contexts.py:364``: ``cuGreenCtxStreamCreate``, up to a pool of 32, then round robin).
        Captures go to this second stream, not to the one work runs on, for the reason torch captures on
        a side stream: cuBLAS keeps one workspace per stream, and on a stream that eager work used it was
        allocated outside any graph's pool; a graph captured there keeps its address, and when Inductor's
        graph trees free the workspaces (``cudagraph_trees.clear_cublass_cache``, around every warm-up and
        recording) the replay reads freed memory (an H100, torch 2.11: "unspecified launch failure").
        On a stream used only for captures the workspace is allocated inside the capturing graph's pool.
        """
        return context.Stream()

    def _new_green_context(self, green: Any, device_index: int, sms: int) -> Any:
        """Create the green context; overridden by the ranges that have an API (2.11+)."""
        raise NotImplementedError(f"patches.{self.name} has no green-context API")  # refused above

    def granted_sms(self, context: Any, device_index: int, sms: int) -> int | None:
        """SMs the driver granted ``context`` (it rounds requests up to its SM groups), or None if unknown."""
        return None

    # -- CUDA graph captures (emulation keeps CUDA graphs, captured on its green stream) ---------
    #: The module of Inductor's CUDA graph trees.
    cudagraph_trees_module: ClassVar[str] = "torch._inductor.cudagraph_trees"
    #: ``CUDAGraphTreeManager.__init__(self, device_index)``: makes ``self.stream`` (``torch.cuda.Stream()``),
    #: the stream the manager warms up and records every graph on (``:2090`` in 2.13, ``:2315`` in 2.14.1).
    cudagraph_tree_manager_init: ClassVar[str] = "torch._inductor.cudagraph_trees:CUDAGraphTreeManager.__init__"
    #: The manager's attribute holding that stream; each node copies it when it is made.
    cudagraph_tree_stream_attribute: ClassVar[str] = "stream"
    #: ``torch.cuda.graph.__init__(self, cuda_graph, pool=None, stream=None, ...)``: ``stream`` None means the
    #: class-wide ``default_capture_stream``, a side stream (``cuda/graphs.py:408`` in 2.13, ``:1125`` in 2.14.1).
    graph_capture_init: ClassVar[str] = "torch.cuda.graphs:graph.__init__"
    #: Inductor config emulation asks for so that every graph Inductor captures is captured where
    #: emulation can redirect it: the graph trees (``compile_fx.cudagraphify_impl``, used when
    #: ``triton.cudagraph_trees`` is False, captures on a local ``torch.cuda.Stream()``, ``:1995`` in 2.13).
    #: Ranges with more such keys extend it (2.14: ``autotune_cudagraph_benchmarking`` off).
    emulation_capture_config: ClassVar[tuple[tuple[str, Any], ...]] = (("triton.cudagraph_trees", True),)

    def cudagraph_tree_manager(self, device_index: int) -> Any:
        """This thread's CUDA graph tree manager of ``device_index``, or None; creates nothing.

        Reads what ``cudagraph_trees.get_obj(local, "tree_manager_containers")`` reads (the
        thread-local dict, else the one torch stashed in its TLS for autograd's threads) without its
        side effects: ``get_manager(i, create_if_none_exists=False)`` adds an empty container on 2.13
        and before, and ``get_obj`` initialises the TLS on 2.14.
        """
        import torch

        module = sys.modules.get(self.cudagraph_trees_module)
        if module is None:  # never imported: no manager exists
            return None
        containers = getattr(getattr(module, "local", None), "tree_manager_containers", None)
        if containers is None and torch._C._is_key_in_tls("tree_manager_containers"):
            containers = torch._C._get_obj_in_tls("tree_manager_containers")
        container = containers.get(device_index) if isinstance(containers, dict) else None
        return getattr(container, "tree_manager", None)
