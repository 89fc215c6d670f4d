"""save_compile_cache / load_compile_cache: warm restart with zero autotuning, and what gets refused."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import torch

import inductor_knobs as ik
from inductor_knobs import compile_cache, torch_compat

WORKER = Path(__file__).with_name("cache_worker.py")


def run_worker(mode, path, min_sms, tmp_path):
    env = {**os.environ, "TORCHINDUCTOR_CACHE_DIR": str(tmp_path / f"inductor-{mode}-{min_sms}")}
    out = subprocess.run([sys.executable, str(WORKER), mode, str(path), str(min_sms)], env=env, capture_output=True, text=True)
    assert out.returncode == 0, out.stderr[-3000:]
    return json.loads(out.stdout.strip().splitlines()[-1])


@pytest.fixture
def artifacts_api(patches):
    if not patches.has_cache_artifacts:
        pytest.skip(f"torch {torch.__version__} has no cache artifacts API")


@pytest.fixture(scope="module")
def saved_once(tmp_path_factory):
    """One cache file per test module: building it costs a subprocess and a CPU autotune."""
    patches = torch_compat.installed()
    if not patches.has_cache_artifacts:
        pytest.skip(f"torch {torch.__version__} has no cache artifacts API")
    if torch.backends.cpu.get_cpu_capability() not in ("AVX2", "AVX512"):
        pytest.skip("Inductor's C++ GEMM template needs AVX2 or AVX512")
    tmp = tmp_path_factory.mktemp("cache")
    path = tmp / "compile.cache"
    assert run_worker("save", path, 1, tmp)["benchmarked"] == 1
    return path


@pytest.fixture
def saved(saved_once, tmp_path):
    """A private copy of the cache file that a test may damage."""
    path = tmp_path / "compile.cache"
    shutil.copyfile(saved_once, path)
    path.chmod(0o600)
    return path


def test_second_process_compiles_with_zero_autotuning(saved, tmp_path):
    # Each process gets its own empty Inductor cache directory: only the loaded file can help.
    assert run_worker("cold", saved, 1, tmp_path)["benchmarked"] == 1
    assert run_worker("load", saved, 1, tmp_path)["benchmarked"] == 0


def test_other_knobs_are_refused_naming_the_difference(saved):
    with pytest.raises(ik.CompileCacheRefused, match=r"knobs_digest.*File knobs: .*'min_sms': 1.*here: .*'min_sms': 2"):
        ik.load_compile_cache(saved, ik.Knobs(max_autotune=True, gemm_backends="ATEN,CPP", min_sms=2))


def test_other_torch_or_device_is_refused(saved, monkeypatch):
    knobs = ik.Knobs(max_autotune=True, gemm_backends="ATEN,CPP", min_sms=1)
    real = compile_cache.identity
    monkeypatch.setattr(compile_cache, "identity", lambda k: {**real(k), "torch": "2.99.0", "device": "cuda:H200"})
    with pytest.raises(ik.CompileCacheRefused, match=r"torch: file .*here '2.99.0'; device: file 'cpu:.*here 'cuda:H200'"):
        ik.load_compile_cache(saved, knobs)


@pytest.mark.parametrize("mode", [0o664, 0o646])
def test_file_writable_by_others_is_refused(artifacts_api, tmp_path, mode):
    path = tmp_path / "c.cache"
    path.write_bytes(compile_cache.MAGIC)
    path.chmod(mode)
    with pytest.raises(ik.CompileCacheRefused, match=r"pickled data.*writable by group or others.*allow_unsafe"):
        ik.load_compile_cache(path)


def test_shared_directory_without_sticky_bit_is_refused(artifacts_api, tmp_path):
    shared = tmp_path / "shared"
    shared.mkdir()
    path = shared / "c.cache"
    path.write_bytes(compile_cache.MAGIC)
    path.chmod(0o600)
    shared.chmod(0o777)
    with pytest.raises(ik.CompileCacheRefused, match="without the sticky bit"):
        ik.load_compile_cache(path)
    shared.chmod(0o1777)  # sticky, like /tmp: others cannot replace our file
    with pytest.raises(ik.CompileCacheRefused, match="not an inductor_knobs compile cache"):
        ik.load_compile_cache(path)


def test_allow_unsafe_skips_only_the_permission_check(artifacts_api, tmp_path):
    path = tmp_path / "c.cache"
    path.write_bytes(b"something else\n")
    path.chmod(0o666)
    with pytest.raises(ik.CompileCacheRefused, match="not an inductor_knobs compile cache"):
        ik.load_compile_cache(path, allow_unsafe=True)


def test_corrupt_payload_is_refused(saved):
    data = saved.read_bytes()
    saved.write_bytes(data[:-10])
    with pytest.raises(ik.CompileCacheRefused, match="sha256"):
        ik.load_compile_cache(saved, ik.Knobs(max_autotune=True, gemm_backends="ATEN,CPP", min_sms=1))


def test_saved_file_is_private(saved_once):
    assert saved_once.stat().st_mode & 0o077 == 0


def test_old_torch_gets_not_supported(patches, monkeypatch, tmp_path):
    monkeypatch.setattr(type(patches), "has_cache_artifacts", False)
    with pytest.raises(ik.NotSupportedOnThisTorch, match=r"save_cache_artifacts.*2\.7"):
        ik.save_compile_cache(tmp_path / "x")
    with pytest.raises(ik.NotSupportedOnThisTorch):
        ik.load_compile_cache(tmp_path / "x")
