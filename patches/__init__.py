"""One module per torch range; each declares what is true of Inductor in its range.

Each ``torch_*`` module defines ``PATCHES``, a :class:`~inductor_knobs.patches.torch_2_4.TorchPatches` subclass whose
``torch_range`` (a ``packaging`` SpecifierSet) names its releases; :mod:`inductor_knobs.core.torch_compat` finds them
with ``pkgutil``, so a new torch release is one new file.  The other modules are ``TorchPatches``' bases, one per concern.
"""
