"""CUTLASS from the nvidia-cutlass wheel: the generated directory, the plan's undo record, the refusals, doctor.

Most tests build a fake ``nvidia-cutlass`` install in ``tmp_path`` that mirrors the 4.2.0.0 wheel's
layout (top-level ``cutlass_library``, ``cutlass_cppgen``, ``pycute``; C++ sources under
``cutlass_library/source``; a dist-info for ``importlib.metadata``).  One test uses the real wheel
when it is installed (in this environment, or with ``pip install --target DIR`` and
``IK_TEST_NVIDIA_CUTLASS_SITE=DIR``) and asks torch's own ``try_import_cutlass``.
"""

from __future__ import annotations

import errno
import json
import os
import stat
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
import torch
from conftest import inside_compile

import inductor_knobs as ik
from inductor_knobs import doctor
from inductor_knobs.core import cutlass, torch_compat
from inductor_knobs.core.changes import ConfigChange
from inductor_knobs.core.files import unsafe_directories
from inductor_knobs.core.knobs import Knobs
from inductor_knobs.core.plan import plan
from inductor_knobs.core.torch_compat import release_of
from inductor_knobs.errors import InvalidKnobValue, PipCutlassUnavailable

VERSION = "4.2.0.0"
HINT = "pip install 'inductor-knobs[cutlass]'"
OTHER_UID = 65534  # nobody


@pytest.fixture
def key(patches):
    """The config key torch reads the CUTLASS directory from on this torch."""
    return patches.cutlass_dir_key(release_of(torch.__version__))


def raw_state(cfg, key):
    """torch's own stored state of ``key``: the entry's default, its raw user override, the value read.

    The override is a ContextVar from 2.12 (per-thread config), a plain attribute from 2.6, and the
    stored value itself before (2.4-2.5 keep no separate default): the patch module reads it.
    """
    entry = cfg._config[key]
    override = torch_compat.installed(strict=False).read_override(cfg, key)
    return getattr(entry, "default", None), override, getattr(cfg, key)


def make_wheel(site: Path, version: str = VERSION, packages=cutlass.PACKAGES) -> Path:
    """A minimal install of the nvidia-cutlass wheel's layout under ``site``."""
    for package in packages:
        (site / package).mkdir(parents=True)
        (site / package / "__init__.py").write_text("")
    for sub in cutlass.SOURCE_DIRS:
        (site / "cutlass_library" / "source" / sub).mkdir(parents=True, exist_ok=True)
    (site / "cutlass_library" / "source" / "include" / "cutlass" / "cutlass.h").write_text("// fake\n")
    info = site / f"nvidia_cutlass-{version}.dist-info"
    info.mkdir()
    (info / "METADATA").write_text(f"Metadata-Version: 2.4\nName: nvidia-cutlass\nVersion: {version}\n")
    (info / "top_level.txt").write_text("\n".join(packages) + "\n")
    (info / "RECORD").write_text("")
    return site


@pytest.fixture
def fake_wheel(tmp_path, monkeypatch):
    """A fake nvidia-cutlass on sys.path (first, so it is what importlib finds)."""
    site = make_wheel(tmp_path / "site")
    monkeypatch.syspath_prepend(str(site))
    return site.resolve()


@pytest.fixture
def cache_home(tmp_path, monkeypatch):
    """A private XDG_CACHE_HOME; skip where even tmp_path's ancestors fail the ownership rule."""
    home = tmp_path / "xdg"
    home.mkdir(mode=0o700)
    problems = unsafe_directories(str(home), os.geteuid(), label="test", error=RuntimeError)
    if problems:
        pytest.skip(f"tmp_path is not private here: {problems}")
    monkeypatch.setenv("XDG_CACHE_HOME", str(home))
    return home


@pytest.fixture
def no_wheel(monkeypatch):
    """Whatever this environment has installed, nvidia-cutlass is not found."""
    monkeypatch.setattr(cutlass, "find_distribution", lambda: None)


def expected_dir(cache_home: Path) -> Path:
    installed = cutlass.find_distribution()
    assert installed is not None
    return cache_home / "inductor_knobs" / "cutlass" / cutlass.entry_name(installed)


# -- the generated directory ---------------------------------------------------------------------------


def test_finds_the_distribution_without_importing_it(fake_wheel, tmp_path, monkeypatch):
    found = cutlass.find_distribution()
    assert found == cutlass.Installed(VERSION, str(fake_wheel))
    assert not {"cutlass_library", "cutlass_cppgen", "pycute"} & set(sys.modules)
    monkeypatch.setattr(sys, "path", [str(tmp_path / "empty")])
    assert cutlass.find_distribution() is None


def test_generated_directory_has_the_checkout_layout(fake_wheel, cache_home):
    found = cutlass.resolve()
    directory = Path(found.directory)
    assert directory == expected_dir(cache_home).resolve() and found.ready and found.version == VERSION
    assert sorted(os.listdir(directory)) == ["include", "python", "tools"]
    assert sorted(os.listdir(directory / "python")) == ["cutlass_cppgen", "cutlass_library", "pycute"]
    source = fake_wheel / "cutlass_library" / "source"
    assert os.readlink(directory / "include") == str(source / "include")
    assert os.readlink(directory / "tools") == str(source / "tools")
    for package in ("cutlass_library", "cutlass_cppgen", "pycute"):
        assert os.readlink(directory / "python" / package) == str(fake_wheel / package)
    # What torch reads through it: python/cutlass_library (try_import_cutlass) and nvcc's include dirs.
    assert (directory / "python" / "cutlass_library" / "__init__.py").is_file()
    for sub in ("include", "tools/library/include", "tools/library/src", "tools/util/include"):
        assert (directory / sub).is_dir(), sub
    assert (directory / "include" / "cutlass" / "cutlass.h").is_file()
    for path in (directory, directory.parent, directory / "python"):
        assert stat.S_IMODE(path.lstat().st_mode) == 0o700, path
    assert cutlass.resolve() == found  # reused, after the same checks
    assert not [p for p in directory.parent.iterdir() if p.name.startswith(".")], "a temporary directory was left"


def test_reuse_rechecks_every_link(fake_wheel, cache_home, tmp_path):
    directory = Path(cutlass.resolve().directory)
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    (directory / "python" / "pycute").unlink()
    (directory / "python" / "pycute").symlink_to(elsewhere)
    with pytest.raises(PipCutlassUnavailable, match=r"python/pycute points to .*elsewhere"):
        cutlass.resolve()
    (directory / "python" / "pycute").unlink()
    (directory / "python" / "pycute").symlink_to(fake_wheel / "pycute")
    assert cutlass.resolve().ready
    (directory / "extra").write_text("")
    with pytest.raises(PipCutlassUnavailable, match=r"unexpected entries \['extra'\]"):
        cutlass.resolve()


def test_losing_the_creation_race_uses_the_winners_directory(fake_wheel, cache_home, monkeypatch):
    first = cutlass.resolve()
    # As if another process renamed its directory into place between our look and our rename.
    monkeypatch.setattr(cutlass, "_exists", lambda name, root_fd: False)  # resolve looks it up in cutlass_pip
    assert cutlass.resolve() == first
    assert not [p for p in Path(first.directory).parent.iterdir() if p.name.startswith(".")]


def test_incomplete_or_shadowed_wheel_is_refused(fake_wheel, cache_home, tmp_path, monkeypatch):
    other = tmp_path / "other"
    (other / "cutlass_library").mkdir(parents=True)
    (other / "cutlass_library" / "__init__.py").write_text("")
    monkeypatch.syspath_prepend(str(other))
    with pytest.raises(PipCutlassUnavailable, match=r"cutlass_library imports from .*other"):
        cutlass.resolve()
    monkeypatch.syspath_prepend(str(fake_wheel))
    (fake_wheel / "cutlass_cppgen" / "__init__.py").unlink()
    with pytest.raises(PipCutlassUnavailable, match=r"lacks cutlass_cppgen"):
        cutlass.resolve()


# -- the plan: an undo record, validated before any change ---------------------------------------------


def test_plan_sets_the_cutlass_dir_as_a_config_change(patches, cfg, key, fake_wheel, cache_home):
    changes = plan(Knobs(gemm_backends="ATEN,CUTLASS"))
    real = patches.resolve_alias(cfg, key)[1]
    ours = [values[real] for c in changes if isinstance(c, ConfigChange) for _, values in c.groups if real in values]
    assert ours == [str(expected_dir(cache_home).resolve())]


def test_block_sets_cutlass_dir_and_restores_it_exactly(cfg, key, fake_wheel, cache_home):
    before = raw_state(cfg, key)
    directory = str(expected_dir(cache_home).resolve())
    with ik.knobs(gemm_backends="ATEN,CUTLASS"):
        assert getattr(cfg, key) == directory
        assert raw_state(cfg, key)[1] == directory  # a user override, as config.patch would write
        assert raw_state(cfg, key)[0] == before[0]  # the default is untouched
    assert raw_state(cfg, key) == before
    with pytest.raises(RuntimeError, match="boom"), ik.knobs(gemm_backends="ATEN,CUTLASS"):
        raise RuntimeError("boom")
    assert raw_state(cfg, key) == before


def test_compile_sees_and_attests_the_generated_dir(cfg, key, fake_wheel, cache_home, fresh_inductor, monkeypatch):
    directory = str(expected_dir(cache_home).resolve())
    seen = inside_compile(monkeypatch, lambda: getattr(cfg, key))

    def f(x):
        return torch.sin(x) + 1

    with ik.record_compiles() as rec, ik.knobs(gemm_backends="ATEN,CUTLASS"):
        torch.testing.assert_close(torch.compile(f)(torch.ones(4)), f(torch.ones(4)))
    assert seen and set(seen) == {directory}
    assert rec.attestations and all(a.value(key) == directory and a.ok for a in rec.attestations)


def test_a_checkout_is_used_as_configured(cfg, key, fake_wheel, cache_home, tmp_path):
    checkout = tmp_path / "checkout"
    (checkout / "python" / "cutlass_library").mkdir(parents=True)
    with ik.knobs(gemm_backends="ATEN,CUTLASS", config={key: str(checkout)}):
        assert getattr(cfg, key) == str(checkout)
    assert not (cache_home / "inductor_knobs").exists(), "nothing is generated when a checkout is configured"


def test_a_directory_the_knobs_name_is_never_replaced(cfg, key, fake_wheel, cache_home, tmp_path):
    before = raw_state(cfg, key)
    with (
        pytest.raises(InvalidKnobValue, match="not replaced") as err,
        ik.knobs(gemm_backends="ATEN,CUTLASS", config={key: str(tmp_path / "not-a-checkout")}),
    ):
        pass
    assert HINT in str(err.value) and raw_state(cfg, key) == before


def test_missing_package_says_how_to_fix(cfg, key, no_wheel, cache_home):
    before, gate = (raw_state(cfg, key), raw_state(cfg, "max_autotune")), torch._inductor.utils.is_big_gpu
    with pytest.raises(InvalidKnobValue) as err, ik.knobs(gemm_backends="ATEN,CUTLASS", min_sms=40, max_autotune=True):
        pass
    text = str(err.value)
    for part in (HINT, "gemm_backends='ATEN,CUTLASS'", torch.__version__, key, "TORCHINDUCTOR_CUTLASS_DIR", "git clone"):
        assert part in text, (part, text)
    assert "nvidia-cutlass is not installed" in text and err.value.__cause__.missing
    assert (raw_state(cfg, key), raw_state(cfg, "max_autotune")) == before and torch._inductor.utils.is_big_gpu is gate
    assert not (cache_home / "inductor_knobs").exists()


# -- refusals: nothing applied ---------------------------------------------------------------------------


def refused(cfg, key, match):
    """Enter a CUTLASS block expecting InvalidKnobValue matching ``match``; check nothing stayed applied."""
    before = raw_state(cfg, key), raw_state(cfg, "max_autotune")
    with pytest.raises(InvalidKnobValue, match=match) as err, ik.knobs(gemm_backends="ATEN,CUTLASS", max_autotune=True):
        pass
    assert (raw_state(cfg, key), raw_state(cfg, "max_autotune")) == before
    for part in (torch.__version__, "gemm_backends='ATEN,CUTLASS'", "git clone", "TORCHINDUCTOR_CUTLASS_DIR"):
        assert part in str(err.value), (part, str(err.value))
    return str(err.value)


def test_a_symlink_planted_at_the_directory_is_refused(cfg, key, fake_wheel, cache_home, tmp_path):
    target = expected_dir(cache_home)
    target.parent.mkdir(parents=True, mode=0o700)
    planted = tmp_path / "planted"
    (planted / "python" / "cutlass_library").mkdir(parents=True)
    target.symlink_to(planted)
    text = refused(cfg, key, "is a symbolic link")
    assert str(planted) in text
    assert target.is_symlink() and os.readlink(target) == str(planted), "the planted link is left for the user to inspect"


@pytest.mark.parametrize(("mode", "where"), [(0o770, "root"), (0o1777, "root"), (0o775, "above")])
def test_a_group_or_world_writable_cache_is_refused(cfg, key, fake_wheel, cache_home, mode, where):
    root = cache_home / "inductor_knobs" / "cutlass"
    root.mkdir(parents=True, mode=0o700)
    os.chmod(root if where == "root" else root.parent, mode)
    try:
        text = refused(cfg, key, "not private")
        assert "writable by group or others" in text
    finally:
        os.chmod(root if where == "root" else root.parent, 0o700)
    assert not any(root.iterdir()), "nothing was generated in an unsafe cache"


def test_a_cache_owned_by_another_user_is_refused(cfg, key, fake_wheel, cache_home, monkeypatch):
    (cache_home / "inductor_knobs" / "cutlass").mkdir(parents=True, mode=0o700)
    real = os.geteuid()
    monkeypatch.setattr(os, "geteuid", lambda: real + 4242)  # as seen by another user
    text = refused(cfg, key, "not private")
    assert f"owned by uid {real}" in text and f"uid {real + 4242}" in text


def test_a_generated_directory_chowned_to_another_user_is_refused(cfg, key, fake_wheel, cache_home):
    directory = Path(cutlass.resolve().directory)
    try:
        os.lchown(directory, OTHER_UID, OTHER_UID)
    except PermissionError:
        pytest.skip("needs root (or CAP_CHOWN) to give a directory to another user")
    try:
        refused(cfg, key, f"owned by uid {OTHER_UID}")
    finally:
        os.lchown(directory, os.geteuid(), os.getegid())


def test_file_system_errors_become_knob_errors(cfg, key, fake_wheel, cache_home, monkeypatch):
    def denied(*args, **kwargs):
        raise PermissionError(errno.EACCES, "Permission denied")

    monkeypatch.setattr(cutlass, "_make_private_dirs", denied)  # looked up by cutlass._open_root
    refused(cfg, key, "cannot make or check the CUTLASS cache")


# -- doctor --------------------------------------------------------------------------------------------


def test_doctor_says_where_cutlass_comes_from(key, fake_wheel, cache_home, tmp_path, monkeypatch):
    line = cutlass.describe(False, "/nowhere", key, gpu_ok=True)
    assert line.startswith("usable: from nvidia-cutlass 4.2.0.0 at generated dir") and "made on first use" in line
    assert not (cache_home / "inductor_knobs").exists(), "doctor makes nothing"
    cutlass.resolve()
    line = cutlass.describe(False, "/nowhere", key, gpu_ok=False)
    assert line.startswith("not usable here: needs an NVIDIA GPU") and "made on first use" not in line
    assert cutlass.describe(True, "/src/cutlass", key, gpu_ok=True) == f"usable: CUTLASS checkout at /src/cutlass ({key})"
    assert "CUTLASS" in doctor.collect()["gemm_backends"]
    monkeypatch.setattr(cutlass, "find_distribution", lambda: None)
    line = cutlass.describe(False, "/nowhere", key, gpu_ok=True)
    assert line.startswith("not usable:") and HINT in line and "TORCHINDUCTOR_CUTLASS_DIR" in line


# -- the real wheel ------------------------------------------------------------------------------------


def _real_site() -> str | None:
    """Where a real nvidia-cutlass is installed: this environment ("") or IK_TEST_NVIDIA_CUTLASS_SITE."""
    if cutlass.find_distribution() is not None:
        return ""
    site = os.environ.get("IK_TEST_NVIDIA_CUTLASS_SITE")
    if site and any(Path(site).glob("nvidia_cutlass-*.dist-info")):
        return site
    return None


_PROBE = textwrap.dedent(
    """
    import json, os, sys
    if sys.argv[1]:
        sys.path.insert(0, sys.argv[1])
    import torch
    import torch._inductor.config as config
    import inductor_knobs as ik
    from inductor_knobs.core import cutlass, torch_compat
    key = torch_compat.installed().cutlass_dir_key(torch_compat.release_of(torch.__version__))
    try:
        from torch._inductor.codegen.cutlass.utils import try_import_cutlass  # 2.11+
    except ImportError:
        from torch._inductor.codegen.cuda.cutlass_utils import try_import_cutlass
    from torch._inductor.codegen.cuda import compile_utils

    with ik.knobs(gemm_backends="ATEN,CUTLASS"):
        in_block = getattr(config, key)
    directory = cutlass.resolve().directory
    with config.patch({key: directory}):
        ok = try_import_cutlass()
        includes = compile_utils._cutlass_include_paths() if hasattr(compile_utils, "_cutlass_include_paths") else []
    import cutlass_library
    print(json.dumps({
        "ok": ok, "key": key, "in_block": in_block, "directory": directory,
        "includes": [[p, os.path.isdir(p)] for p in includes],
        "cutlass_library": cutlass_library.__file__, "version": cutlass.find_distribution().version,
    }))
    """
)


def test_real_wheel_satisfies_torchs_try_import_cutlass(tmp_path):
    site = _real_site()
    if site is None:
        pytest.skip(
            "nvidia-cutlass is not installed (pip install nvidia-cutlass, or --target DIR and IK_TEST_NVIDIA_CUTLASS_SITE=DIR)"
        )
    home = tmp_path / "xdg"
    home.mkdir(mode=0o700)
    env = {**os.environ, "XDG_CACHE_HOME": str(home), "TORCHINDUCTOR_CACHE_DIR": str(tmp_path / "inductor")}
    # A subprocess: try_import_cutlass is functools-cached, appends to sys.path and imports cutlass_*,
    # and cutlass_cppgen registers an atexit hook that moves files out of the working directory.
    done = subprocess.run(
        [sys.executable, "-c", _PROBE, site], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=600
    )
    assert done.returncode == 0, done.stderr[-4000:]
    result = json.loads(done.stdout.strip().splitlines()[-1])
    assert result["ok"] is True, result
    assert result["in_block"] == result["directory"] and result["directory"].startswith(str(home.resolve()))
    assert result["includes"] and all(exists for _, exists in result["includes"]), result["includes"]
    assert os.path.realpath(result["cutlass_library"]).startswith(os.path.realpath(site or sys.prefix)), result
