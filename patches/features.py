"""Torch's own pieces that the release-dependent knobs use, and the facts behind their rows' ``since=``.

Checked in the release wheels (``torch/`` relative; 2.15.0 read from the +cu132 wheel without installing):
- ``_inductor/config.py:triton.cudagraph_capture_sizes`` from 2.8 (2.8 :1107, 2.13 :1821, 2.14.1 :1956, 2.15 :2156); read at
  every call, not compile: ``cudagraph_trees.py:is_cudagraph_capture_sizes`` (2.13 :402) via ``deferred_cudagraphify`` (:435).
- ``_inductor/config.py:lookup_table.table`` from 2.10 (2.10 :2234, 2.13 :2892, 2.14.1 :3060, 2.15 :3336), CUDA-only, read by
  ``lookup_table/choices.py:LookupTableChoices`` as the choices handler, cached per thread (``virtualized.py:_choices_default``).
- ``_inductor/config.py:keep_static_cubin_raw`` from 2.13 (2.13 :1420; pytorch#186404, 2.13.0 release notes), read by
  ``CachingAutotuner.prepare_for_caching`` (``runtime/triton_heuristics.py`` :975) as a compile's cache entry is made.
- ``TORCH_CUDNN_SDPA_AVOID_RECOMPILE``: ``aten/src/ATen/native/cudnn/MHA.cpp:use_ragged_in_dense`` reads it once per process,
  at the first dense cuDNN attention call (only bias-free, BSHD); ``libtorch_cuda.so`` 2.9.0–2.15.0, not 2.8.0 (pytorch#155958).
"""

from __future__ import annotations

import os
from contextlib import AbstractContextManager, nullcontext
from typing import Any

#: The environment variable torch's cuDNN attention reads once per process.
CUDNN_SDPA_AVOID_RECOMPILE_VAR = "TORCH_CUDNN_SDPA_AVOID_RECOMPILE"


class KnobFeatures:
    """The torch pieces the release-dependent knobs use."""

    def read_env(self, name: str) -> str | None:
        """The process environment's value of ``name`` (None when unset): what torch's C++ ``getenv`` reads."""
        return os.environ.get(name)

    def write_env(self, name: str, value: str | None) -> None:
        """Set ``name`` in the process environment (``os.environ``, which calls ``putenv``), or unset it (None)."""
        if value is None:
            os.environ.pop(name, None)
        else:
            os.environ[name] = value

    def cuda_started(self) -> bool:
        """Whether this process initialised CUDA (``torch.cuda.is_initialized()``): before that no cuDNN call ran."""
        import torch

        return bool(torch.cuda.is_initialized())

    def choices_handler(self) -> Any:
        """Inductor's choices handler on this thread (``torch._inductor.virtualized.V.choices``; 2.10+ may create it)."""
        from torch._inductor.virtualized import V

        return V.choices

    def lookup_choices_class(self) -> type:
        """``torch._inductor.lookup_table.LookupTableChoices`` (2.10+)."""
        from torch._inductor.lookup_table import LookupTableChoices

        return LookupTableChoices  # type: ignore[no-any-return]

    def lookup_handler_fits(self) -> bool:
        """Whether this thread's choices handler is torch's own ``InductorChoices`` or a ``LookupTableChoices``: the
        handlers :meth:`lookup_handler` takes (any other is someone's own)."""
        from torch._inductor.choices import InductorChoices

        current = self.choices_handler()
        return isinstance(current, self.lookup_choices_class()) or type(current) is InductorChoices

    def lookup_handler(self) -> AbstractContextManager[Any]:
        """``V.set_choices_handler(LookupTableChoices())`` in place of torch's own ``InductorChoices`` (kept if already
        one); any other handler is someone's own: :class:`TypeError` names it and nothing changes."""
        from torch._inductor.virtualized import V

        lookup = self.lookup_choices_class()
        current = self.choices_handler()
        if isinstance(current, lookup):
            return nullcontext()
        if not self.lookup_handler_fits():
            raise TypeError(f"{type(current).__module__}.{type(current).__qualname__}")
        return V.set_choices_handler(lookup())  # type: ignore[no-any-return]

    def lookup_key(self, ktc: Any, op_name: str, *, device: bool) -> str | None:
        """The table key of a ``KernelTemplateChoice``: ``LookupTableChoices.make_lookup_key`` on CUDA, else (device-agnostic
        keys only: torch never looks a table up off CUDA) the same join of ``_generate_kernel_inputs_key`` and ``op_name``."""
        lookup = self.lookup_choices_class()
        if ktc.inputs.device().type == "cuda":
            return lookup().make_lookup_key(ktc.inputs, op_name, include_device=device)  # type: ignore[no-any-return]
        if device:
            return None
        return f"{lookup._generate_kernel_inputs_key(ktc.inputs)}+{op_name}"  # type: ignore[attr-defined]

    def lookup_entry(self, ktc: Any) -> dict[str, Any]:
        """A choice's entry in torch's table format: ``template_id``, ``params.to_serializeable_dict()`` and, where the
        template has a ``src_hash``, ``template_hash`` (checked while ``lookup_table.check_src_hash``)."""
        entry = {"template_id": str(ktc.template.uid), **ktc.params.to_serializeable_dict()}
        src_hash = getattr(ktc.template, "src_hash", None)
        if src_hash is not None:
            entry["template_hash"] = str(src_hash)
        return entry
