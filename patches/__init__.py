"""One module per torch range; each declares what is true of Inductor in its range.

Every module defines ``PATCHES``, an instance of a :class:`~inductor_knobs.patches.torch_2_4.TorchPatches`
subclass whose ``torch_range`` (a ``packaging`` SpecifierSet) says which torch releases it
covers.  :mod:`inductor_knobs.core.torch_compat` discovers the modules here with ``pkgutil``, so
supporting a new torch release means adding one file (subclass the newest module, set
``torch_range`` and the fingerprints it saw) and nothing else.

``TorchPatches`` is assembled from one base module per concern (``gate``, ``config_storage``,
``gemm_backends``, ``emulation``, ``process_settings``, ``hooks``, ``features``, ``fixes``,
``release_tables``).  They define no ``PATCHES``; discovery reads only the ``torch_*`` modules.
"""
