"""Torch's own pieces that the release-dependent knobs use, and the facts behind their rows' ``since=``.

A base module of :mod:`inductor_knobs.patches.torch_2_4` (``_``-prefixed: no ``PATCHES``, so
:func:`inductor_knobs.core.torch_compat.all_patch_modules` skips it).  Which releases have a knob is its row's
``since=``/``until=`` in the knob table (:data:`inductor_knobs.core.knobs.KNOBS`); the facts, checked in the
release wheels (``torch/`` relative; the C++ one in ``libtorch_cuda.so`` of the Linux CUDA wheels and in
``aten/src/ATen/native/cudnn/MHA.cpp``):

- ``cudagraph_capture_sizes``: ``_inductor/config.py`` ``class triton``
  ``cudagraph_capture_sizes: tuple[int | tuple[int, ...]] | None = None`` from 2.8 (2.8 :1107, 2.9 :1228,
  2.10 :1412, 2.11 :1522, 2.12 :1674, 2.13 :1821, 2.14.1 :1956; absent in 2.4.1-2.7.0).  It is read at
  every *call* of a function compiled with CUDA graph trees, not at compile: ``cudagraph_trees.py``
  ``is_cudagraph_capture_sizes`` (2.13 :402) from ``deferred_cudagraphify`` (2.13 :435), which runs
  the graph without CUDA graphs when the call's int key is not listed.
- ``lookup_table``: ``_inductor/config.py`` ``class lookup_table: table = None`` (2.10 :2234, 2.11 :2440,
  2.12 :2634, 2.13 :2892, 2.14.1 :3060; absent in 2.4.1-2.9.0) with ``check_src_hash = True``; read only by
  ``torch._inductor.lookup_table.LookupTableChoices`` (``lookup_table/choices.py``), which Inductor uses
  only when it is the choices handler (``V.set_choices_handler`` or ``config.inductor_choices_class``,
  2.10+).  Its ``_get_lookup_table`` returns ``{}`` unless ``torch.cuda.is_available()``, and
  ``make_lookup_key`` returns None for a non-CUDA device: the table is CUDA-only.  The handler is cached
  per thread (``virtualized.py`` ``_choices_default`` stores the first one it makes), so
  ``inductor_choices_class`` set after a thread's first compile does not reach that thread.
- ``cudnn_sdpa_avoid_recompile``: ``at::native::use_ragged_in_dense`` (``MHA.cpp``) reads
  ``TORCH_CUDNN_SDPA_AVOID_RECOMPILE`` into a function-local ``static bool`` (``c10::utils::check_env``:
  ``"1"`` is on, ``"0"`` off) at the first dense cuDNN attention call of the process, forward or
  backward (``setMHAParams`` asks it to build each plan-cache key), and never again.  In the
  ``libtorch_cuda.so`` of 2.9.0, 2.10.0, 2.11.0, 2.12.0, 2.13.0 and 2.14.1; not in 2.8.0 (pytorch#155958,
  merged 2025-08-15).  Only calls without an attention bias whose q, k, v and output are BSHD
  (``x.transpose(1, 2).is_contiguous()``) take the path; others warn once and plan per shape as before.

2.15.0 (+cu132 wheel, read without installing): ``triton.cudagraph_capture_sizes`` at ``config.py:2156``,
``lookup_table.table`` at ``config.py:3336``, and ``TORCH_CUDNN_SDPA_AVOID_RECOMPILE`` in ``libtorch_cuda.so``.
"""

from __future__ import annotations

import os
from contextlib import AbstractContextManager, nullcontext
from typing import Any

#: The environment variable torch's cuDNN attention reads once per process (see the module docstring).
CUDNN_SDPA_AVOID_RECOMPILE_VAR = "TORCH_CUDNN_SDPA_AVOID_RECOMPILE"


class KnobFeatures:
    """The torch pieces the release-dependent knobs use (see the module docstring)."""

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

    def lookup_handler(self) -> AbstractContextManager[Any]:
        """Make ``LookupTableChoices`` this thread's choices handler until the context exits, as torch's
        README says (``V.set_choices_handler(LookupTableChoices())``, whose context puts the prior one back).

        Torch's own ``InductorChoices`` is replaced; a handler that already is a ``LookupTableChoices`` is
        kept.  Any other handler (``inductor_choices_class``, ``V.set_choices_handler``) is someone's own
        heuristics: :class:`TypeError` names it, and nothing is changed.
        """
        from torch._inductor.choices import InductorChoices
        from torch._inductor.virtualized import V

        lookup = self.lookup_choices_class()
        current = self.choices_handler()
        if isinstance(current, lookup):
            return nullcontext()
        if type(current) is not InductorChoices:
            raise TypeError(f"{type(current).__module__}.{type(current).__qualname__}")
        return V.set_choices_handler(lookup())  # type: ignore[no-any-return]

    def lookup_key(self, ktc: Any, op_name: str, *, device: bool) -> str | None:
        """The table key torch looks up for a choice's ``KernelTemplateChoice``: ``LookupTableChoices.make_lookup_key``
        where it answers (CUDA), else the same join of its ``_generate_kernel_inputs_key`` and ``op_name``
        (device-agnostic only: torch gives a non-CUDA device no key and never looks a table up there)."""
        lookup = self.lookup_choices_class()
        if ktc.inputs.device().type == "cuda":
            return lookup().make_lookup_key(ktc.inputs, op_name, include_device=device)  # type: ignore[no-any-return]
        if device:
            return None
        return f"{lookup._generate_kernel_inputs_key(ktc.inputs)}+{op_name}"  # type: ignore[attr-defined]

    def lookup_entry(self, ktc: Any) -> dict[str, Any]:
        """A choice's entry in torch's table format: ``template_id``, the template's parameters
        (``params.to_serializeable_dict()``) and, where the template has one, its ``template_hash``
        (``src_hash``, checked by torch while ``lookup_table.check_src_hash`` is on)."""
        entry = {"template_id": str(ktc.template.uid), **ktc.params.to_serializeable_dict()}
        src_hash = getattr(ktc.template, "src_hash", None)
        if src_hash is not None:
            entry["template_hash"] = str(src_hash)
        return entry
