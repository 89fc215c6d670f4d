"""Thread semantics follow the installed torch's config."""

from __future__ import annotations

import threading
from concurrent.futures import ThreadPoolExecutor

import pytest
import torch._inductor.utils as inductor_utils

import inductor_knobs as ik
from inductor_knobs.errors import ConcurrentKnobsError


def _in_thread(fn):
    with ThreadPoolExecutor(1) as pool:
        return pool.submit(fn).result()


def test_other_threads_see_torchs_config_and_gate_on_per_thread_torch(patches, cfg, fake_gpu):
    if not patches.config_is_thread_local:
        pytest.skip("config is process-global before torch 2.12")
    fake_gpu(40)
    with ik.force_gemm_autotune(min_sms=40):
        assert cfg.max_autotune_gemm is True and inductor_utils.is_big_gpu(0) is True
        seen = _in_thread(lambda: (cfg.max_autotune_gemm, inductor_utils.is_big_gpu(0)))
        assert seen == (False, False)  # torch's default config and torch's gate (40 < 68)


def test_threads_hold_knobs_independently_on_per_thread_torch(patches, cfg):
    if not patches.config_is_thread_local:
        pytest.skip("config is process-global before torch 2.12")
    barrier = threading.Barrier(2, timeout=60)  # a failure in one thread fails the test instead of hanging it

    def worker(value):
        with ik.knobs(max_autotune=value):
            barrier.wait()
            seen = cfg.max_autotune
            barrier.wait()
        return seen

    with ThreadPoolExecutor(2) as pool:
        results = list(pool.map(worker, [True, False]))
    assert results == [True, False]


def test_second_thread_is_refused_on_process_global_torch(patches, cfg):
    if patches.config_is_thread_local:
        pytest.skip("config is per thread from torch 2.12")
    before = cfg.triton.cudagraphs
    with ik.knobs(max_autotune=True):
        with pytest.raises(ConcurrentKnobsError, match="process-global"):
            _in_thread(lambda: ik.knobs(cudagraphs=not before).__enter__())
        assert cfg.max_autotune is True and cfg.triton.cudagraphs == before

    def enter_and_exit():
        with ik.knobs(cudagraphs=not before):
            return cfg.triton.cudagraphs

    assert _in_thread(enter_and_exit) is (not before)  # free again once the first thread left
    assert cfg.triton.cudagraphs == before
