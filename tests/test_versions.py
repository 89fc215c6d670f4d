"""Patch-module selection, the supported range, and drift fingerprints."""

from __future__ import annotations

import inspect
import sys

import pytest
import torch
import torch._inductor.utils as inductor_utils
from packaging.version import Version

import inductor_knobs as ik
from inductor_knobs.core import torch_compat
from inductor_knobs.core.torch_compat import fingerprint, fingerprint_source
from inductor_knobs.errors import DriftWarning, PatchTargetChanged, UnsupportedTorchVersion


@pytest.mark.parametrize(
    ("version", "module"),
    [
        ("2.4.0", "torch_2_4"),
        ("2.4.1+cu124", "torch_2_4"),
        ("2.5.1+rocm6.2", "torch_2_4"),
        ("2.6.0", "torch_2_6"),
        ("2.6.0.dev20241112+cu124", "torch_2_6"),
        ("2.7.1", "torch_2_7"),
        ("2.8.0+cpu", "torch_2_8"),
        ("2.10.0", "torch_2_8"),
        ("2.11.0a0+git70d99e9", "torch_2_8"),
        ("2.12.0", "torch_2_12"),
        ("2.13.0+cpu", "torch_2_12"),
        ("2.14.0", "torch_2_14"),
        ("2.14.1+cu130", "torch_2_14"),
        ("2.15.0", "torch_2_15"),
        ("2.15.0rc3", "torch_2_15"),
    ],
)
def test_selection_by_release(version, module):
    assert torch_compat.select(version).name == module


@pytest.mark.parametrize("version", ["2.3.1", "2.0.0", "2.16.0", "2.16.0.dev20261101", "3.0.0"])
def test_outside_range_is_refused_with_the_range(version):
    with pytest.raises(UnsupportedTorchVersion, match=r">=2\.4,<2\.16"):
        torch_compat.select(version)


def test_not_a_version():
    with pytest.raises(UnsupportedTorchVersion, match="not a PEP 440 version"):
        torch_compat.select("banana")


def test_lenient_mode_picks_the_nearest_module_with_a_warning():
    with pytest.warns(DriftWarning, match="outside"):
        assert torch_compat.select("2.16.0.dev20261101", strict=False).name == "torch_2_15"
    with pytest.warns(DriftWarning):
        assert torch_compat.select("2.3.0", strict=False).name == "torch_2_4"


def test_module_ranges_are_disjoint_and_contiguous():
    mods = torch_compat.all_patch_modules()
    for minor in range(4, 16):
        owners = [m.name for m in mods if m.torch_range.contains(Version(f"2.{minor}"))]
        assert len(owners) == 1, (minor, owners)
    assert torch_compat.supported_range() == ">=2.4,<2.16"


def test_every_module_declares_facts_for_its_whole_range():
    for mod in torch_compat.all_patch_modules():
        releases = [f"2.{m}" for m in range(4, 16) if mod.torch_range.contains(Version(f"2.{m}"))]
        assert sorted(mod.gemm_backends_by_release) == sorted(releases), mod.name
        assert sorted(mod.cutlass_dir_key_by_release) == sorted(releases), mod.name
        assert sorted(mod.feedback_saver_arity_by_release) == sorted(releases), mod.name
        assert sorted(mod.gate_checked_backends_by_release) == sorted(releases), mod.name
        assert sorted(mod.nvgemm_modules_by_release) == sorted(releases), mod.name
        assert sorted(mod.aot_headers_by_release) == sorted(releases), mod.name
        for release in releases:
            # every gated backend is one the release knows; NVGEMM exists exactly where it has modules
            assert mod.gate_checked_backends(release) <= mod.gemm_backends(release), (mod.name, release)
            assert ("NVGEMM" in mod.gemm_backends(release)) == bool(mod.nvgemm_modules(release)), (mod.name, release)
        assert mod.gate_fingerprints and inspect.getdoc(sys.modules[type(mod).__module__])


def test_patch_modules_import_as_package_submodules():
    import importlib

    for name in ("torch_2_4", "torch_2_6", "torch_2_7", "torch_2_8", "torch_2_12", "torch_2_14", "torch_2_15"):
        module = importlib.import_module(f"inductor_knobs.patches.{name}")
        assert module.PATCHES.name == name


def test_installed_torch_gate_is_recognised(patches):
    report = torch_compat.check_gate(patches, inductor_utils.is_big_gpu)
    assert report.ok, report.problems
    assert report.fingerprint in patches.gate_fingerprints


def test_fingerprint_ignores_comments_decorators_and_layout_but_not_code():
    base = "@functools.cache\ndef f(x=0):\n    # a comment\n    return x >= 68\n"
    moved = "\n\n    def f(x=0):  # moved\n        return   x >= 68\n"
    changed = "def f(x=0):\n    return x >= 58\n"
    assert fingerprint_source(base) == fingerprint_source(moved)
    assert fingerprint_source(base) != fingerprint_source(changed)


def test_unknown_gate_is_refused_in_strict_mode_and_nothing_is_patched(monkeypatch, cfg):
    def is_big_gpu(index_or_device=0):  # a user's hand patch
        return True

    monkeypatch.setattr(inductor_utils, "is_big_gpu", is_big_gpu)
    before = cfg.max_autotune_gemm
    with pytest.raises(PatchTargetChanged, match="fingerprint"), ik.force_gemm_autotune(min_sms=40):
        pass
    assert inductor_utils.is_big_gpu is is_big_gpu
    assert cfg.max_autotune_gemm == before


def test_cached_validation_rechecks_a_gate_replaced_between_blocks(monkeypatch, cfg):
    """The plan's validation is cached per gate identity: the same knobs, entered again after
    someone replaced ``is_big_gpu``, are checked again (the cache must never skip the drift check)."""
    same = ik.force_gemm_autotune(min_sms=40)
    with same:  # validated and cached with torch's own gate
        pass

    def is_big_gpu(index_or_device=0):  # a hand patch arriving between two blocks
        return True

    monkeypatch.setattr(inductor_utils, "is_big_gpu", is_big_gpu)
    before = cfg.max_autotune_gemm
    with pytest.raises(PatchTargetChanged, match="fingerprint"), same:
        pass
    assert inductor_utils.is_big_gpu is is_big_gpu and cfg.max_autotune_gemm == before


def test_unknown_gate_is_patched_with_a_warning_in_lenient_mode(monkeypatch):
    import functools

    @functools.cache
    def is_big_gpu(index_or_device=0):
        return False

    if torch_compat.installed().gate_parameters[0][0] == "index":
        pytest.skip("lenient wrapper of a foreign signature is only meaningful where torch's has a default")
    monkeypatch.setattr(inductor_utils, "is_big_gpu", is_big_gpu)
    with pytest.warns(DriftWarning, match="fingerprint"), ik.knobs(min_sms=1, strict=False):
        assert inductor_utils.is_big_gpu is not is_big_gpu
    assert inductor_utils.is_big_gpu is is_big_gpu


def test_live_fingerprint_matches_a_table_entry():
    assert fingerprint(inductor_utils.is_big_gpu) in torch_compat.installed().gate_fingerprints
    assert torch.__version__  # the table above was made from the same release family


# -- per-release facts, each read from that release's wheel (see the patch modules' docstrings) ------

_CK = {"ATEN", "TRITON", "CUTLASS", "CK", "CPP"}
_NEW = {"ATEN", "TRITON", "CUTLASS", "CUTEDSL", "NVGEMM", "CK", "CKTILE", "CPP"}


@pytest.mark.parametrize(
    ("release", "backends", "gated", "nvgemm_modules"),
    [
        ("2.4", {"ATEN", "TRITON", "CUTLASS", "CPP"}, {"TRITON", "CUTLASS"}, ()),
        ("2.5", _CK, {"TRITON", "CUTLASS"}, ()),
        ("2.6", _CK, {"TRITON", "CUTLASS"}, ()),
        ("2.7", _CK, {"TRITON", "CUTLASS"}, ()),
        ("2.8", _CK | {"CKTILE"}, {"TRITON", "CUTLASS"}, ()),
        ("2.9", _CK | {"CKTILE"}, {"TRITON", "CUTLASS"}, ()),
        ("2.10", _CK | {"CKTILE", "CUTEDSL"}, {"TRITON", "CUTLASS", "CUTEDSL"}, ()),
        ("2.11", _NEW, {"TRITON", "CUTLASS", "CUTEDSL"}, ("cutlass", "cutlass_api")),
        ("2.12", _NEW, {"TRITON", "CUTLASS", "CUTEDSL"}, ("cutlass", "cutlass_api")),
        ("2.13", _NEW, {"TRITON", "CUTLASS", "CUTEDSL"}, ("cutlass", "cutlass_api")),
        ("2.14", _NEW, {"TRITON", "CUTLASS", "CUTEDSL"}, ("cutlass", "cutlass.operators")),
        ("2.15", _NEW | {"FLYDSL"}, {"TRITON", "CUTLASS", "CUTEDSL", "FLYDSL"}, ("cutlass", "cutlass.operators")),
    ],
)
def test_gemm_backend_facts_per_release(release, backends, gated, nvgemm_modules):
    mod = torch_compat.select(f"{release}.0")
    assert mod.gemm_backends(release) == backends
    assert mod.gate_checked_backends(release) == gated
    assert mod.nvgemm_modules(release) == nvgemm_modules


@pytest.mark.parametrize(
    ("version", "fingerprint", "api", "checked_last", "restores_unset"),
    [
        ("2.4.0", "0c2a1ad415c3f2a6", None, False, False),
        ("2.6.0", "866ddf0080c36d59", None, False, False),
        ("2.7.0", "005b0eeebdc4037d", None, False, False),
        ("2.11.0", "005b0eeebdc4037d", "create", False, False),
        ("2.12.0", "d29598369aaebd20", "create", False, False),
        ("2.13.0", "d29598369aaebd20", "create", False, False),
        ("2.14.1", "e9e500a1f4feee94", "constructor", False, False),
        ("2.15.0", "e9e500a1f4feee94", "constructor+sm_count", True, True),
    ],
)
def test_era_facts(version, fingerprint, api, checked_last, restores_unset):
    mod = torch_compat.select(version)
    assert fingerprint in mod.gate_fingerprints
    assert mod.green_context_api == api
    assert mod.gate_checked_last is checked_last
    assert mod.config_patch_restores_unset is restores_unset


def test_each_fingerprint_belongs_to_one_module():
    seen: dict[str, str] = {}
    for mod in torch_compat.all_patch_modules():
        for fp in mod.gate_fingerprints:
            if fp in seen:  # only modules whose releases share the gate's source may share one
                assert fp in {"005b0eeebdc4037d", "e9e500a1f4feee94"}, (fp, seen[fp], mod.name)
            seen[fp] = mod.name
