"""AOTInductor's precompiled headers, made ahead of the build that asks for them.

Facts (torch 2.10.0, 2.11.0, 2.13.0 and 2.15.0 wheels, ``torch/_inductor/`` relative):
- ``codecache.py:AotCodeCompiler.compile`` (2.11 :1818) picks the CPU's vector ISA (``cpu_vec_isa.pick_vec_isa``) and keys
  everything it compiles on ``cpp_command``: ``repr`` of the command line of ``cpp_builder.CppBuilder(name="o",
  sources="i", BuildOption=CppTorchDeviceOptions(vec_isa=, device_type=, aot_mode=True))``.
- Where ``config.aot_inductor.precompile_headers`` and not Windows, it asks ``_precompile_header(
  _get_cpp_wrapper_header(device_type, aot_mode=True), cpp_command, min_optimize=not
  config.aot_inductor.package_cpp_only, **compile_command)`` for the wrapper (2.11 :2332), and for a CPU model also
  ``_precompile_header(_get_cpp_prefix_header(device_type), cpp_command, **compile_command)`` for the kernels.
  ``compile_command`` is ``aot_mode``, ``device_type``, ``use_mmap_weights``, ``use_mmap_weights_external`` (from
  ``utils.py:determine_aoti_mmap_flags(consts_size)``), ``use_relative_path`` (``is_fbcode() and device_type == "cpu"``)
  and ``vec_isa``, in that order.  The same in 2.10.0, 2.12.0, 2.13.0, 2.14.0 and 2.15.0.
- ``_precompile_header`` (2.11 :2758) is a ``functools.cache`` (keyword order is part of its key): it preprocesses the
  header, hashes the result, and compiles it once per host into ``default_cache_dir()/precompiled_headers`` under a file
  lock, keyed on the command, that hash and the compiler's version; a second caller of an equal key waits on the lock and
  finds the file.  A header made for another key is never used: the build then makes its own on its critical path.
- ``utils.py:determine_aoti_mmap_flags`` (2.10-2.15): mmap above 2,000,000,000 bytes of constants, which
  ``AotCodeCompiler.compile`` counts as each non-folded constant's whole storage (padded to 64 bytes unless all are on
  CUDA), and as 0 unless ``aot_inductor.package_constants_in_so`` or the ``binary_blob`` on-disk format.
- No header on Windows (``_IS_WINDOWS``); ``precompile_headers`` is off by default under fbcode, where the build's
  paths differ.  The package makes headers on Linux only.
"""

from __future__ import annotations

import sys
from collections.abc import Callable, Iterable
from typing import Any, ClassVar

#: ``determine_aoti_mmap_flags``'s threshold on the bytes of constants (2.10-2.15).
MMAP_THRESHOLD = 2_000_000_000


class AotHeaders:
    """Which releases' AOT builds ask for their headers as :meth:`make_aot_headers` does, and the making itself."""

    #: Per minor release: whether ``AotCodeCompiler.compile`` asks for its precompiled headers as above.
    aot_headers_by_release: ClassVar[dict[str, bool]]

    def makes_aot_headers_as_torch(self, release: str) -> bool:
        """Whether :meth:`make_aot_headers` asks what the AOT build of torch ``release`` (``"2.11"``) asks: only a
        release the table lists (a release after the newest checked gets no headers made for it), on Linux outside
        fbcode.  Imports Inductor's config."""
        from torch._inductor import config

        listed = bool(self.aot_headers_by_release.get(release, False))
        return listed and sys.platform == "linux" and not config.is_fbcode()

    def aot_constants_nbytes(self, weights: Iterable[Any], setting: Callable[[str], Any]) -> int | None:
        """The bytes of constants an AOTInductor build of a model with ``weights`` (its parameters and buffers) counts
        for its mmap flags, as far as the module tells, or None where unsure: a storage that cannot be read (a sparse
        tensor, an uninitialised lazy parameter), or a count within a factor of two of :data:`MMAP_THRESHOLD` (torch
        counts its lowered graph's constants, which can differ from the module's).

        Args:
            weights (Iterable[Any]): the model's parameters and buffers.
            setting (Callable[[str], Any]): an Inductor config key -> the value the build compiles with (None where
                this torch lacks the key).

        Returns:
            int | None: bytes, or None.
        """
        packed = setting("aot_inductor.package_constants_in_so") or (
            setting("aot_inductor.package_constants_on_disk_format") == "binary_blob"
        )
        try:
            nbytes = sum(tensor.untyped_storage().nbytes() for tensor in weights) if packed else 0
        except Exception:  # noqa: BLE001 - a guess: whatever torch raises for a storage it cannot give
            return None
        return None if MMAP_THRESHOLD / 2 < nbytes < MMAP_THRESHOLD * 2 else nbytes

    def make_aot_headers(self, device_type: str, consts_nbytes: int) -> list[str]:
        """Make the precompiled headers an AOTInductor build of a model on ``device_type`` (``"cuda"``, ``"cpu"``) whose
        constants take ``consts_nbytes`` bytes would ask for, under the calling context's Inductor config and compiler.

        Returns:
            list[str]: the headers' paths (the wrapper's, then, for a CPU model, the kernels').

        Raises:
            Exception: what torch's picking of the ISA or its compile of a header raises (``CppCompileError`` ...).
        """
        from torch._inductor import codecache, config
        from torch._inductor.cpp_builder import CppBuilder, CppTorchDeviceOptions
        from torch._inductor.cpu_vec_isa import pick_vec_isa
        from torch._inductor.utils import determine_aoti_mmap_flags

        isa = pick_vec_isa()
        options = CppTorchDeviceOptions(vec_isa=isa, device_type=device_type, aot_mode=True)
        cpp_command = repr(CppBuilder(name="o", sources="i", BuildOption=options).get_command_line())
        external, mmap = determine_aoti_mmap_flags(consts_nbytes)
        command = {
            "aot_mode": True,
            "device_type": device_type,
            "use_mmap_weights": mmap,
            "use_mmap_weights_external": external,
            "use_relative_path": config.is_fbcode() and device_type == "cpu",
            "vec_isa": isa,
        }
        wrapper = codecache._get_cpp_wrapper_header(device_type, aot_mode=True)
        optimize = not config.aot_inductor.package_cpp_only
        made = [codecache._precompile_header(wrapper, cpp_command, min_optimize=optimize, **command)]
        if prefix := codecache._get_cpp_prefix_header(device_type):
            made.append(codecache._precompile_header(prefix, cpp_command, **command))
        return made
