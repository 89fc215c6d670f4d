"""Fixes of torch bugs (patches/fixes.py, serving/torch_fixes.py): which releases get them, what the fix does to a
warm-loaded kernel, and that it is installed on torch's class only while a warm-up or bundle load holds it."""

from __future__ import annotations

import shutil
import threading
from types import SimpleNamespace

import pytest
import torch
from inductor_knobs.patches import fixes as _fixes
from inductor_knobs.patches.torch_2_4 import PATCHES as T24
from inductor_knobs.patches.torch_2_8 import PATCHES as T28
from inductor_knobs.patches.torch_2_12 import PATCHES as T212
from inductor_knobs.patches.torch_2_15 import PATCHES as T215

import inductor_knobs as ik
from inductor_knobs.core import torch_compat
from inductor_knobs.serving import torch_fixes

heuristics = pytest.importorskip("torch._inductor.runtime.triton_heuristics")
Autotuner = heuristics.CachingAutotuner

#: The fixed function and what it calls: torch 2.4 has neither (``check_autotune_cache`` is in 2.10.0
#: ``runtime/triton_heuristics.py:211``, ``CachingAutotuner.recheck_autotune_cache`` at ``:386``).
needs_recheck = pytest.mark.skipif(
    "recheck_autotune_cache" not in Autotuner.__dict__ or not hasattr(heuristics, "check_autotune_cache"),
    reason=f"torch {torch.__version__} has no CachingAutotuner.recheck_autotune_cache",
)


def _paths(patches, release: str) -> list[str]:
    return [path for path, _ in patches.fixes(release)]


def test_each_fix_is_declared_for_exactly_the_releases_that_have_the_bug():
    # recheck: 2.8.0-2.11.0 wheels ``len(cached_configs) == 1 and len(configs) > 1``; 2.12.0, 2.14.1 fixed.
    # probe: ``import torch`` in the child's script in 2.4-2.12.1; 2.13.0 ``cpu_vec_isa.py:90`` without it.
    # pickle: the compile worker pickles its kernel back in 2.8.0, 2.10.0, 2.11.0, 2.13.0 and 2.15.0, unfixed.
    recheck, probe = _fixes.RECHECK_PATH, _fixes.VEC_ISA_PROBE_PATH
    carried = [_fixes.CONFIG_SETSTATE_PATH]
    for release in ("2.8", "2.9", "2.10", "2.11"):
        assert _paths(T28, release) == [recheck, probe, *carried]
        assert T28.fixes(release)[0][1] is _fixes.recheck_autotune_cache
    assert _paths(T24, "2.5") == [probe]
    assert _paths(T212, "2.12") == [probe, *carried]
    assert _paths(T24, "2.4") == []  # 2.4: VecISA in codecache.py
    for patches, release in ((T212, "2.13"), (T215, "2.15")):
        assert _paths(patches, release) == carried


@pytest.fixture
def probe_script(tmp_path):
    """The fixed child script for a vector-ISA probe, with its placeholder filled in by torch's own ``replace``."""
    fix = dict(T212.fixes("2.12"))[_fixes.VEC_ISA_PROBE_PATH]
    assert fix.replaces == _fixes.VEC_ISA_PROBE_BEFORE
    return lambda library: fix.value.replace("__lib_path__", str(library))


def _library_needing(tmp_path, name: str):
    """A shared library linked to torch's ``name`` (``torch_cpu``, ``torch``) without a run path, as Inductor's probe
    libraries are: the loader finds it only where it is loaded already."""
    import subprocess
    import sys
    from pathlib import Path

    gpp, lib = shutil.which("g++"), Path(torch.__file__).parent / "lib"
    if gpp is None or not (lib / f"lib{name}.so").is_file():
        pytest.skip(f"needs g++ and a Linux torch wheel's lib/lib{name}.so")
    source, library = tmp_path / f"needs_{name}.cpp", tmp_path / f"needs_{name}.so"
    source.write_text('extern "C" int probe() { return 1; }\n')
    link = [gpp, "-shared", "-fPIC", "-o", str(library), str(source), f"-L{lib}", "-Wl,--no-as-needed", f"-l{name}"]
    subprocess.run(link, check=True, timeout=120)
    bare = subprocess.run([sys.executable, "-c", f"import ctypes; ctypes.cdll.LoadLibrary({str(library)!r})"], timeout=120)
    if bare.returncode == 0:
        pytest.skip("the loader finds torch's libraries without the fix here (LD_LIBRARY_PATH)")
    return library


@pytest.mark.parametrize("needs", ["torch_cpu", "torch"])
def test_the_fixed_probe_loads_a_library_linked_to_torch_without_importing_torch(probe_script, tmp_path, needs):
    import subprocess
    import sys

    library = _library_needing(tmp_path, needs)
    no_torch = probe_script(library) + "import sys\nassert 'torch' not in sys.modules, 'imported torch'\n"
    subprocess.run([sys.executable, "-c", no_torch], check=True, timeout=120)


def test_the_fixed_probe_fails_as_torchs_does_for_a_file_that_is_not_a_library(probe_script, tmp_path):
    import subprocess
    import sys

    bogus = tmp_path / "not_a_library.so"
    bogus.write_text("not ELF")
    done = subprocess.run([sys.executable, "-c", probe_script(bogus)], capture_output=True, text=True, timeout=120)
    assert done.returncode != 0 and "OSError" in done.stderr  # after the fallback's ``import torch``, as torch's own


def test_the_probe_fix_replaces_only_torchs_own_text_and_restores_it_by_identity(monkeypatch):
    isa = pytest.importorskip("torch._inductor.cpu_vec_isa")
    patches = torch_compat.installed(strict=False)
    monkeypatch.setattr(type(patches), "vec_isa_probe_fix_by_release", {torch_compat.release_of(torch.__version__): True})
    before = "".join(_fixes.VEC_ISA_PROBE_BEFORE)  # torch 2.4-2.12's text, as a distinct object
    monkeypatch.setattr(isa.VecISA, "_avx_py_load", before)
    torch_fixes._steps.cache_clear()
    try:
        with torch_fixes.torch_fixes():
            assert isa.VecISA._avx_py_load != before and "import torch\n" in isa.VecISA._avx_py_load
        assert isa.VecISA._avx_py_load is before
        custom = "\nimport torch  # someone else's\nfrom ctypes import cdll\ncdll.LoadLibrary('__lib_path__')\n"
        monkeypatch.setattr(isa.VecISA, "_avx_py_load", custom)
        with torch_fixes.torch_fixes():  # the same process's steps: checked again at this install
            assert isa.VecISA._avx_py_load is custom  # not torch's text: left alone
        monkeypatch.setattr(isa.VecISA, "_avx_py_load", before)
        with torch_fixes.torch_fixes():
            assert isa.VecISA._avx_py_load != before  # torch's text again: fixed again
    finally:
        torch_fixes._steps.cache_clear()


def _config(block: int, coordesc: bool | None = None) -> SimpleNamespace:
    config = SimpleNamespace(kwargs={"XBLOCK": block}, num_warps=4, num_stages=1)
    if coordesc is not None:
        config.found_by_coordesc = coordesc
    return config


def _kernel(*blocks: int) -> SimpleNamespace:
    return SimpleNamespace(
        compile_results=[SimpleNamespace(config=_config(b)) for b in blocks],
        filename="/cache/ab/kernel.py",
        inductor_meta={"coordinate_descent_tuning": True},
        fn=SimpleNamespace(fn=object()),
        _precompile_config=lambda config: SimpleNamespace(config=config, precompiled=True),
    )


@pytest.fixture
def cache_says(monkeypatch):
    """Make torch's ``check_autotune_cache`` answer with a given best config (a hit) or nothing (a miss)."""

    def answer(best):
        def check(configs, filename, meta):
            if best is None:
                return configs, None, {"autotune_cache_state": "miss"}
            return [best], None, {"autotune_cache_state": "hit"}

        monkeypatch.setattr(heuristics, "check_autotune_cache", check)

    return answer


@pytest.mark.parametrize("blocks", [(64,), (32, 64, 128)], ids=["one config", "several configs"])
@needs_recheck
def test_a_cached_coordesc_winner_among_the_compiled_configs_is_kept_and_marked(cache_says, blocks):
    # torch 2.11 skipped the first case and left the second unmarked: run() then tuned the kernel again
    cache_says(_config(64, coordesc=True))
    kernel = _kernel(*blocks)
    _fixes.recheck_autotune_cache(None, kernel, (lambda: None,), {})
    assert [r.config.kwargs for r in kernel.compile_results] == [{"XBLOCK": 64}]
    assert kernel.compile_results[0].config.found_by_coordesc is True
    assert kernel.autotune_cache_info["autotune_cache_state"] == "hit"


@needs_recheck
def test_a_coordesc_winner_not_compiled_is_compiled_once_and_a_miss_changes_nothing(cache_says):
    cache_says(_config(256, coordesc=True))
    kernel = _kernel(32, 64)
    _fixes.recheck_autotune_cache(None, kernel, (), {"reload_kernel_from_src": lambda: None})
    assert [(r.config.kwargs, r.precompiled) for r in kernel.compile_results] == [({"XBLOCK": 256}, True)]
    cache_says(None)
    kernel = _kernel(64)
    before = kernel.compile_results
    _fixes.recheck_autotune_cache(None, kernel, (lambda: None,), {})
    assert kernel.compile_results is before and not hasattr(before[0].config, "found_by_coordesc")


@pytest.fixture
def claims_the_bug(monkeypatch):
    """The installed torch's patches module declares the recheck fix (as on 2.8-2.11), for this process's steps."""
    patches = torch_compat.installed(strict=False)
    monkeypatch.setattr(type(patches), "coordesc_recheck_fix_by_release", {torch_compat.release_of(torch.__version__): True})
    torch_fixes._steps.cache_clear()
    yield
    torch_fixes._steps.cache_clear()


@needs_recheck
def test_the_fix_is_on_torchs_class_only_while_held_and_restored_by_identity_across_threads(claims_the_bug):
    original = Autotuner.__dict__["recheck_autotune_cache"]
    seen = []
    inside = threading.Event()
    leave = threading.Event()

    def hold():
        with torch_fixes.torch_fixes():
            inside.set()
            leave.wait(60)

    thread = threading.Thread(target=hold)
    thread.start()
    assert inside.wait(60)
    with torch_fixes.torch_fixes():  # a second holder: installed once, kept until both left
        seen.append(Autotuner.__dict__["recheck_autotune_cache"])
    seen.append(Autotuner.__dict__["recheck_autotune_cache"])
    leave.set()
    thread.join(60)
    assert all(s is not original and s.__wrapped__ is original for s in seen)
    assert Autotuner.__dict__["recheck_autotune_cache"] is original


@needs_recheck
def test_warmup_holds_the_fix_during_its_calls_and_leaves_torch_as_it_was(claims_the_bug):
    original = Autotuner.__dict__["recheck_autotune_cache"]
    during = []

    def model(x):
        during.append(Autotuner.__dict__["recheck_autotune_cache"])
        return x + 1

    ik.serving.warmup(model, [torch.ones(2)], calls_per_input=1, probes=None)
    assert during and all(d is not original for d in during)
    assert Autotuner.__dict__["recheck_autotune_cache"] is original


def test_on_a_torch_without_the_recheck_bug_its_method_is_left_alone():
    torch_fixes._steps.cache_clear()
    fixes = dict(torch_compat.installed(strict=False).fixes(torch_compat.release_of(torch.__version__)))
    if _fixes.RECHECK_PATH in fixes:
        pytest.skip(f"torch {torch.__version__} needs the fix")
    original = Autotuner.__dict__.get("recheck_autotune_cache")  # None where torch has none (2.4)
    with torch_fixes.torch_fixes():
        assert Autotuner.__dict__.get("recheck_autotune_cache") is original


def test_a_fix_whose_torch_function_is_absent_installs_nothing_and_warmup_still_runs(monkeypatch):
    patches = torch_compat.installed(strict=False)
    missing = (("torch._no_such_module:Thing.method", _fixes.recheck_autotune_cache),)
    monkeypatch.setattr(type(patches), "fixes", lambda self, release: missing)
    torch_fixes._steps.cache_clear()
    try:
        assert torch_fixes._steps() == ()
        report = ik.serving.warmup(lambda x: x + 1, [torch.ones(2)], calls_per_input=1, probes=None)
        assert len(report.steps) == 1 and torch_fixes.TORCH_FIXES.users == 0
    finally:
        torch_fixes._steps.cache_clear()


def test_replace_attribute_restores_by_identity_and_leaves_a_later_change_with_a_warning():
    import types
    import warnings

    from inductor_knobs.core.patching import SharedPatch, replace_attribute
    from inductor_knobs.errors import ExternalChangeWarning

    module = types.ModuleType("ik_test_replace_target")

    class Holder:
        text = "original"

    module.Holder = Holder
    import sys

    sys.modules[module.__name__] = module
    try:
        original = Holder.text
        patch, holder = SharedPatch("replace", lambda: [replace_attribute(f"{module.__name__}:Holder.text", "new")]), object()
        patch.acquire(holder)
        assert Holder.text == "new"
        patch.release(holder)
        assert Holder.text is original
        patch.acquire(holder)
        Holder.text = "someone else's"
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            patch.release(holder)
        assert Holder.text == "someone else's"
        assert [w.category for w in caught] == [ExternalChangeWarning]
    finally:
        del sys.modules[module.__name__]


def test_replace_attribute_of_an_inherited_class_attribute_deletes_it_again():
    import sys
    import types

    from inductor_knobs.core.patching import SharedPatch, replace_attribute

    module = types.ModuleType("ik_test_replace_inherited")

    class Base:
        text = "base"

    class Child(Base):
        pass

    module.Child = Child
    sys.modules[module.__name__] = module
    try:
        patch, holder = SharedPatch("inherited", lambda: [replace_attribute(f"{module.__name__}:Child.text", "x" * 40)]), object()
        patch.acquire(holder)
        assert Child.text == "x" * 40 and Base.text == "base"
        patch.release(holder)
        assert "text" not in Child.__dict__ and Child.text == "base"
    finally:
        del sys.modules[module.__name__]


def test_replace_attribute_keeps_a_staticmethod_and_a_classmethod_as_they_were():
    import sys
    import types

    from inductor_knobs.core.patching import SharedPatch, replace_attribute

    module = types.ModuleType("ik_test_replace_descriptors")

    class Base:
        @staticmethod
        def f(x):
            return x

        @classmethod
        def g(cls):
            return cls.__name__

    class Child(Base):
        pass

    module.Base = Base
    sys.modules[module.__name__] = module
    try:
        f, g = Base.__dict__["f"], Base.__dict__["g"]
        steps = [replace_attribute(f"{module.__name__}:Base.{n}", staticmethod(lambda *a: "new")) for n in ("f", "g")]
        patch, holder = SharedPatch("descriptors", lambda: steps), object()
        patch.acquire(holder)
        assert Base().f(1) == "new"
        patch.release(holder)
        assert Base.__dict__["f"] is f and Base.__dict__["g"] is g  # the descriptors, not what they give
        assert Base().f(1) == 1 and Child.g() == "Child"
    finally:
        del sys.modules[module.__name__]


class Config:
    """As ``triton.runtime.autotuner.Config`` (Triton 3.x): its ``__setstate__`` restores only its own fields."""

    def __init__(self, kwargs):
        self.kwargs = kwargs

    def __setstate__(self, state):
        self.kwargs = state.get("kwargs", {})


def test_a_pickled_config_keeps_found_by_coordesc_through_a_setstate_that_drops_it():
    # the compile worker pickles the cached winner back: Inductor's mark was lost on the way to the parent
    import pickle

    import wrapt

    marked, plain = Config({"XBLOCK": 64}), Config({"XBLOCK": 32})
    marked.found_by_coordesc = True
    wrapped = Config.__dict__["__setstate__"]
    for fixed in (False, True):
        Config.__setstate__ = wrapt.FunctionWrapper(wrapped, _fixes.keep_found_by_coordesc) if fixed else wrapped
        try:
            back, other = pickle.loads(pickle.dumps(marked)), pickle.loads(pickle.dumps(plain))
        finally:
            Config.__setstate__ = wrapped
        assert back.kwargs == {"XBLOCK": 64} and getattr(back, "found_by_coordesc", False) is fixed
        assert not hasattr(other, "found_by_coordesc")


def test_tritons_own_config_keeps_the_mark_only_while_the_fixes_are_held(monkeypatch):
    # the real classes: torch's cache read marks the winner, a CachingAutotuner carries it back as the compile worker
    # pickles it, Triton 3.x drops the mark in its __setstate__, and the fix puts it back while held (4 threads at once)
    import pickle
    from concurrent.futures import ThreadPoolExecutor

    triton = pytest.importorskip("triton", reason="the fix wraps triton.Config.__setstate__; Triton is not installed")
    from torch._inductor.runtime.autotune_cache import _load_cached_autotuning

    patches = torch_compat.installed(strict=False)
    monkeypatch.setattr(type(patches), "coordesc_pickle_fix_by_release", {torch_compat.release_of(torch.__version__): True})
    torch_fixes._steps.cache_clear()
    try:
        config = triton.Config({"XBLOCK": 64}, num_warps=4)
        config.found_by_coordesc = True
        entry = {"XBLOCK": 256, "num_warps": 8, "num_stages": 1, "found_by_coordesc": True, "configs_hash": "h"}
        winner = _load_cached_autotuning(entry, "h", [config], {"coordinate_descent_tuning": True})
        assert winner.found_by_coordesc is True  # what the worker's cache read hands its kernel
        kernel = Autotuner.__new__(Autotuner)
        kernel.__dict__.update(configs=[winner], launchers=[], lock=None, inductor_meta={})
        sent = pickle.dumps(kernel, pickle.HIGHEST_PROTOCOL)

        def marked(_: int) -> bool:
            return getattr(pickle.loads(sent).configs[0], "found_by_coordesc", False)

        with torch_fixes.torch_fixes():
            assert pickle.loads(pickle.dumps(config)).found_by_coordesc is True
            with ThreadPoolExecutor(4) as pool:
                assert all(pool.map(marked, range(400)))
        outside = pickle.loads(pickle.dumps(config))
        assert "__setstate__" not in vars(triton.Config) or not getattr(outside, "found_by_coordesc", False)
        assert "__setstate__" not in vars(triton.Config) or not marked(0)  # Triton's own behaviour, left as it was
    finally:
        torch_fixes._steps.cache_clear()


def _fake_module(name: str):
    import sys
    import types

    module = types.ModuleType(name)

    class Base:
        def inherited(self):
            return "base"

    class Target(Base):
        def method(self):
            return "torch's"

    module.Target = Target
    sys.modules[name] = module
    return module


def test_a_fix_left_inside_someone_elses_wrapper_passes_calls_through_after_the_release(monkeypatch):
    import sys
    import warnings

    from inductor_knobs.errors import ExternalChangeWarning

    module = _fake_module("ik_test_fix_left_inside")
    fixed = lambda wrapped, instance, args, kwargs: "fixed"  # noqa: E731 - a fix that changes the answer
    patches = torch_compat.installed(strict=False)
    monkeypatch.setattr(type(patches), "fixes", lambda self, release: ((f"{module.__name__}:Target.method", fixed),))
    torch_fixes._steps.cache_clear()
    try:
        target = module.Target()
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            with torch_fixes.torch_fixes():
                assert target.method() == "fixed"
                ours = module.Target.__dict__["method"]
                module.Target.method = lambda self: "theirs, then " + ours(self)  # someone wraps ours meanwhile
            assert target.method() == "theirs, then torch's"  # ours stays inside theirs, and passes through
        assert ExternalChangeWarning in [w.category for w in caught]
    finally:
        torch_fixes._steps.cache_clear()
        del sys.modules[module.__name__]


def test_a_fix_of_an_inherited_method_is_left_out_and_the_warm_up_still_runs(monkeypatch):
    import sys

    module = _fake_module("ik_test_fix_inherited")
    fixed = lambda wrapped, instance, args, kwargs: "fixed"  # noqa: E731
    patches = torch_compat.installed(strict=False)
    monkeypatch.setattr(type(patches), "fixes", lambda self, release: ((f"{module.__name__}:Target.inherited", fixed),))
    torch_fixes._steps.cache_clear()
    try:
        assert torch_fixes._steps() == ()
        report = ik.serving.warmup(lambda x: x + 1, [torch.ones(2)], calls_per_input=1, probes=None)
        assert len(report.steps) == 1 and module.Target().inherited() == "base"
    finally:
        torch_fixes._steps.cache_clear()
        del sys.modules[module.__name__]
