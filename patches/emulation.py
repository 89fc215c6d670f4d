"""Small-GPU emulation (``ik.emulate_gpu``): where Inductor reads the SM count, and the green context.

Facts (``torch/`` relative):
- ``cuda/__init__.py:get_device_properties`` serves ``is_big_gpu`` (2.4–2.5), ``get_max_num_sms``, flex decoding and GEMM
  config pruning; ``_dynamo/device_interface.py:CudaInterface.get_device_properties`` is bound to it (2.4 :194, 2.15 :341).
- ``_inductor/codecache.py:CacheBase.get_local_cache_path`` (2.8.0 :242, 2.14.1 :364): autotune timings per device name;
  the emulated GPU gets its own.
- ``cuda/green_contexts.py:GreenContext``: ``Stream()`` from 2.11; ``create`` 2.11–2.13, the constructor from 2.14.
- ``_inductor/cudagraph_trees.py:CUDAGraphTreeManager.__init__`` records on ``self.stream`` (2.13 :2090, 2.14.1 :2315);
  ``cuda/graphs.py:graph`` captures on ``default_capture_stream`` when ``stream`` is None (2.13 :408, 2.14.1 :1125);
  ``compile_fx.py:cudagraphify_impl`` uses a local stream (2.13 :1995), so emulation asks for the trees.
"""

from __future__ import annotations

import sys
from typing import Any, ClassVar


class SmallGpuEmulation:
    """The SM-count read sites emulation wraps, and the green context it runs in."""

    #: The patch module's name (``torch_2_4``), for messages.
    name: ClassVar[str]
    #: ``module:attribute`` getters of CUDA device properties, which emulation wraps.
    device_property_getters: ClassVar[tuple[str, ...]] = (
        "torch.cuda:get_device_properties",
        "torch._dynamo.device_interface:CudaInterface.get_device_properties",
    )
    #: ``functools`` caches that hold an SM count read earlier (``_inductor/utils.py:972`` in 2.4).
    sm_count_caches: ClassVar[tuple[str, ...]]
    #: The staticmethod naming the GEMM autotune timings' file (``PersistentCache.lookup`` reads it).
    autotune_local_cache_path: ClassVar[str] = "torch._inductor.codecache:CacheBase.get_local_cache_path"
    #: The dict in which compile workers cache every device's properties.
    device_properties_dict_cache: ClassVar[str] = "torch._dynamo.device_interface:caching_worker_device_properties"
    #: The first release whose ``torch.cuda.GreenContext`` has ``Stream()``, which emulation needs.
    green_stream_since: ClassVar[str] = "2.11"
    #: How this range makes the green context: None, ``"create"``, ``"constructor"``, ``"constructor+sm_count"`` (2.15).
    green_context_api: ClassVar[str | None]

    cudagraph_trees_module: ClassVar[str] = "torch._inductor.cudagraph_trees"
    #: Makes ``self.stream``, the stream the manager warms up and records every graph on.
    cudagraph_tree_manager_init: ClassVar[str] = "torch._inductor.cudagraph_trees:CUDAGraphTreeManager.__init__"
    #: The manager's attribute holding that stream; each node copies it when it is made.
    cudagraph_tree_stream_attribute: ClassVar[str] = "stream"
    #: ``torch.cuda.graph.__init__(self, cuda_graph, pool=None, stream=None, ...)``.
    graph_capture_init: ClassVar[str] = "torch.cuda.graphs:graph.__init__"
    #: Inductor config that makes every graph Inductor captures one emulation can redirect.
    emulation_capture_config: ClassVar[tuple[tuple[str, Any], ...]] = (("triton.cudagraph_trees", True),)

    def green_context_problem(self) -> str | None:
        """Why emulation cannot make a confining green context here (a phrase completing "torch X has …"), or None."""
        import torch

        green = getattr(torch.cuda, "GreenContext", None)
        if green is None:
            return "no GreenContext"
        if not callable(getattr(green, "Stream", None)):
            return "GreenContext without Stream()"
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
        """``(context, stream, granted SMs or None)``: a green context of ``sms`` SMs on ``device_index`` and a stream of it;
        keep ``context`` alive while ``stream`` is used (from 2.14 its ``__del__`` destroys its streams).

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
        """A new stream of ``context`` to capture graphs on: one captured on the work stream keeps its cuBLAS workspace, outside
        any graph pool, which ``cudagraph_trees.clear_cublass_cache`` frees under the replay (H100, 2.11: launch failure)."""
        return context.Stream()

    def _new_green_context(self, green: Any, device_index: int, sms: int) -> Any:
        """Create the green context; overridden by the ranges that have an API (2.11+)."""
        raise NotImplementedError(f"patches.{self.name} has no green-context API")  # refused above

    def granted_sms(self, context: Any, device_index: int, sms: int) -> int | None:
        """SMs the driver granted ``context`` (it rounds requests up to its SM groups), or None if unknown."""
        return None

    def cudagraph_tree_manager(self, device_index: int) -> Any:
        """This thread's CUDA graph tree manager of ``device_index``, or None; creates nothing (unlike ``get_manager``,
        which adds a container on 2.13 and before, and ``get_obj``, which initialises the TLS on 2.14)."""
        import torch

        module = sys.modules.get(self.cudagraph_trees_module)
        if module is None:  # never imported: no manager exists
            return None
        containers = getattr(getattr(module, "local", None), "tree_manager_containers", None)
        if containers is None and torch._C._is_key_in_tls("tree_manager_containers"):
            containers = torch._C._get_obj_in_tls("tree_manager_containers")
        container = containers.get(device_index) if isinstance(containers, dict) else None
        return getattr(container, "tree_manager", None)
