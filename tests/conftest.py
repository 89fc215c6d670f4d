from __future__ import annotations

import types
import warnings

import pytest
import torch
import torch._inductor.config as inductor_config
import torch._inductor.utils as inductor_utils

from inductor_knobs import torch_compat

warnings.filterwarnings("ignore", message="Failed to initialize NumPy")


@pytest.fixture
def patches():
    return torch_compat.installed()


@pytest.fixture
def cfg():
    return inductor_config


@pytest.fixture
def fake_gpu(monkeypatch):
    """Make torch read a CUDA device with N SMs, through the same APIs is_big_gpu reads."""

    def install(sms: int, major: int = 9):
        props = types.SimpleNamespace(multi_processor_count=sms, major=major, minor=0, name=f"Fake{sms}", type="cuda")
        monkeypatch.setattr(torch.cuda, "get_device_properties", lambda *a, **k: props)
        try:
            from torch._inductor.runtime.hints import DeviceProperties
        except ImportError:  # pragma: no cover - every supported torch has it
            return
        monkeypatch.setattr(DeviceProperties, "create", lambda device: props)
        inductor_utils.is_big_gpu.cache_clear()

    yield install
    inductor_utils.is_big_gpu.cache_clear()


@pytest.fixture(autouse=True)
def _no_leaks():
    """Every test must leave torch exactly as it found it: the gate object, by identity."""
    gate = inductor_utils.is_big_gpu
    yield
    assert inductor_utils.is_big_gpu is gate, "a test left is_big_gpu patched"
