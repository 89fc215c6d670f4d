"""Every test marked ``gpu`` owns fresh compile caches (conftest.fresh_compile_caches, its autouse fixture)."""

from __future__ import annotations

import os

import pytest
from conftest import fresh_compile_caches

try:
    from torch._inductor.runtime.cache_dir_utils import cache_dir
except ImportError:  # 2.4 has it in runtime/runtime_utils.py:134
    from torch._inductor.runtime.runtime_utils import cache_dir


def test_fresh_compile_caches_point_torch_and_triton_at_new_directories_and_put_them_back(tmp_path, monkeypatch):
    outside = (os.environ.get("TORCHINDUCTOR_CACHE_DIR"), os.environ.get("TRITON_CACHE_DIR"))
    seen = []
    for run in ("first", "second"):  # two runs on one machine: each gets its own empty directories
        with pytest.MonkeyPatch.context() as patch, fresh_compile_caches(tmp_path / run, patch) as inductor_dir:
            assert inductor_dir.is_relative_to(tmp_path / run) and not any(inductor_dir.iterdir())
            assert cache_dir() == str(inductor_dir)  # what torch reads at each use
            assert os.environ["TRITON_CACHE_DIR"].startswith(str(tmp_path / run))
            seen.append(inductor_dir)
        assert (os.environ.get("TORCHINDUCTOR_CACHE_DIR"), os.environ.get("TRITON_CACHE_DIR")) == outside
    assert seen[0] != seen[1]


@pytest.mark.gpu
def test_a_gpu_test_gets_them_from_the_autouse_fixture(tmp_path):
    """Needs no GPU: only the marker selects the fixture."""
    assert cache_dir().startswith(str(tmp_path)) and os.environ["TRITON_CACHE_DIR"].startswith(str(tmp_path))
