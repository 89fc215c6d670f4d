"""The setup snapshot: one answer to "the same setup?" for bundles, fingerprints, merges and resumes."""

from __future__ import annotations

import os
import types

import torch

import inductor_knobs as ik
from inductor_knobs.core import setup


def test_the_environment_holds_what_torch_reads_and_not_where_files_go():
    env = {
        "TORCHINDUCTOR_MAX_AUTOTUNE": "1",
        "TORCH_CUDA_ARCH_LIST": "9.0",
        "TRITON_F32_DEFAULT": "ieee",
        "TORCHINDUCTOR_CACHE_DIR": "/tmp/a",
        "TRITON_CACHE_DIR": "/tmp/b",
        "TORCH_LOGS": "+dynamo",
        "TORCHELASTIC_RUN_ID": "7",
        "HOME": "/root",
    }
    assert setup.torch_environment(env) == {
        "TORCHINDUCTOR_MAX_AUTOTUNE": "1",
        "TORCH_CUDA_ARCH_LIST": "9.0",
        "TRITON_F32_DEFAULT": "ieee",
    }


def test_a_snapshot_holds_the_knobs_in_force_and_their_sources():
    env = {"INDUCTOR_KNOBS_COORDINATE_DESCENT_TUNING": "0", "TORCHINDUCTOR_MAX_AUTOTUNE": "1"}
    found = setup.snapshot(ik.Knobs(max_autotune=False), source="bundle", environ=env, device="cpu")
    assert found.knobs == {"coordinate_descent_tuning": False, "max_autotune": False}
    assert found.sources == {"coordinate_descent_tuning": "env", "max_autotune": "bundle"}
    assert found.environment == {"TORCHINDUCTOR_MAX_AUTOTUNE": "1"}
    assert found.torch == torch.__version__ and found.cpu and found.gpu is None
    assert setup.Setup.from_dict(found.to_dict()) == found


def test_two_setups_differ_by_the_fields_that_differ():
    a = setup.snapshot(environ={"TORCHINDUCTOR_MAX_AUTOTUNE": "1"}, device="cpu")
    b = setup.snapshot(environ={}, device="cpu")
    found = setup.differences(a, b)
    assert found == [("environment.TORCHINDUCTOR_MAX_AUTOTUNE", "1", setup.ABSENT)]
    assert "TORCHINDUCTOR_MAX_AUTOTUNE: '1' (bundle) vs absent (here)" in setup.describe(found, "bundle", "here")
    assert a.digest() != b.digest() and a.digest() == setup.Setup.from_dict(a.to_dict()).digest()


def test_a_gpu_is_named_with_its_full_compute_capability(monkeypatch):
    props = types.SimpleNamespace(name="NVIDIA GB10", major=12, minor=1, multi_processor_count=48)
    monkeypatch.setattr(torch.cuda, "get_device_properties", lambda index: props)
    found = setup.snapshot(environ={}, device="cuda:0")
    assert (found.gpu, found.capability, found.sms) == ("NVIDIA GB10", "sm_121", 48)
    assert found.device == "NVIDIA GB10 sm_121 48 SMs"
    props120 = types.SimpleNamespace(name="NVIDIA GB10", major=12, minor=0, multi_processor_count=48)
    monkeypatch.setattr(torch.cuda, "get_device_properties", lambda index: props120)
    assert setup.differences(found, setup.snapshot(environ={}, device="cuda:0"))[0][0] == "capability"


def test_a_variable_the_knobs_set_is_a_knob_of_the_snapshot_not_a_torch_variable(monkeypatch):
    """The startup hook sets TORCH_CUDNN_SDPA_AVOID_RECOMPILE from INDUCTOR_KNOBS_CUDNN_SDPA_AVOID_RECOMPILE: the
    snapshot (a bundle's identity) and a worker's fingerprint name the knob, so an ablation arm with the knob
    shares one torch environment with the arms without it (--merge and --resume compare it across arms)."""
    from inductor_knobs import env as env_mod
    from inductor_knobs.ablation import fingerprint
    from inductor_knobs.core.changes import release_env
    from inductor_knobs.core.knobs import KNOBS

    if not KNOBS["cudnn_sdpa_avoid_recompile"].on(".".join(torch.__version__.split(".")[:2])):
        return  # torch < 2.9 has no such variable
    var = "TORCH_CUDNN_SDPA_AVOID_RECOMPILE"
    for name in [v for v in os.environ if v.startswith("INDUCTOR_KNOBS_")]:
        monkeypatch.delenv(name)
    monkeypatch.delenv(var, raising=False)
    monkeypatch.setenv("INDUCTOR_KNOBS_CUDNN_SDPA_AVOID_RECOMPILE", "1")
    assert env_mod.start_up() == []
    try:
        assert os.environ.get(var) == "1"
        found = setup.snapshot(device="cpu")
        assert found.knobs == {"cudnn_sdpa_avoid_recompile": True} and var not in found.environment, found
        job = {"workload": "mlp", "device": "cpu", "arm": {"name": "on"}}
        assert var not in fingerprint.collect(job)["torch_env"]
    finally:
        release_env(var, env_mod.start_up)
        os.environ.pop(var, None)  # set by start_up, not by monkeypatch (which restores a value it removed)


def test_what_torchs_compile_sets_by_itself_is_not_part_of_the_setup():
    """A GPU compile sets TRITON_PTXAS_PATH to torch's own ptxas: a bundle built after it was refused by a fresh
    process that had not compiled (seen on an H200, torch 2.11)."""
    import os

    ptxas = os.path.join(os.path.dirname(torch.__file__), "bin", "ptxas")
    env = {
        "TRITON_PTXAS_PATH": ptxas,
        "TRITON_LIBDEVICE_PATH": "/usr/local/cuda/nvvm/libdevice/libdevice.10.bc",
        "TORCH_WARM_POOL": "0",
    }
    assert setup.torch_environment(env) == {}
    assert setup.torch_environment({"TRITON_PTXAS_PATH": "/opt/ptxas"}) == {"TRITON_PTXAS_PATH": "/opt/ptxas"}
    assert setup.torch_environment({"TORCHDYNAMO_CAPTURE_SCALAR_OUTPUTS": "1", "PYTORCH_TUNABLEOP_ENABLED": "1"}) == {
        "PYTORCH_TUNABLEOP_ENABLED": "1",
        "TORCHDYNAMO_CAPTURE_SCALAR_OUTPUTS": "1",
    }
