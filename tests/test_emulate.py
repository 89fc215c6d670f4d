"""Small-GPU emulation (``ik.emulate_gpu``): presets, argument checks, refusal on this CPU-only
machine, the SM view on a fake CUDA device, the compile_fx wrapper, env activation and ablate."""

from __future__ import annotations

import contextlib
import importlib
import subprocess
import sys
import threading
import types
import warnings
from dataclasses import dataclass, field
from typing import Any, ClassVar

import pytest
import torch
import torch._dynamo.device_interface as device_interface
import torch._inductor.compile_fx as inductor_compile_fx
import torch._inductor.config as inductor_config
import torch._inductor.cudagraph_trees as cudagraph_trees
import torch._inductor.utils as inductor_utils
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from torch._dynamo.device_interface import CudaInterface
from torch._inductor.codecache import CacheBase, PersistentCache
from torch._inductor.runtime.hints import DeviceProperties

import inductor_knobs as ik
from inductor_knobs import cli
from inductor_knobs.ablation import build, command, options
from inductor_knobs.ablation.plan import Plan
from inductor_knobs.core import torch_compat
from inductor_knobs.core.knobs import EMULATE_SHARED_MEMORY_VAR, EMULATE_SMS_VAR, Knobs
from inductor_knobs.core.recorder import Subscription
from inductor_knobs.emulation import block as emulation_plan
from inductor_knobs.emulation import confine, sm_view
from inductor_knobs.emulation.confine import capture_stream
from inductor_knobs.emulation.gpus import PRESETS, EmulationSpec, find_preset, resolve_spec
from inductor_knobs.env import activate_from_env, active_env_knobs, deactivate_env, emulation_from_env
from inductor_knobs.errors import (
    EmulationConflict,
    EmulationUnavailable,
    EmulationWarning,
    InvalidKnobValue,
    NotSupportedOnThisTorch,
    UnknownKnob,
)

# The fakes model torch 2.6+ (cache_key_tag salt, DeviceProperties); 2.4-2.5 lack both.
compiler_config = pytest.importorskip("torch.compiler.config", reason="emulation's fakes model torch >= 2.6")

#: Why this torch cannot make a confining green context (None from 2.11): emulation then refuses with
#: NotSupportedOnThisTorch before it looks for a GPU, so tests of what it does on a (fake) GPU, or of
#: its "no GPU" error, do not apply.
GREEN_PROBLEM = torch_compat.installed(strict=False).green_context_problem()
GREEN_SKIP = f"emulation needs GreenContext with Stream() (torch >= 2.11); torch {torch.__version__} has {GREEN_PROBLEM}"
needs_green_streams = pytest.mark.skipif(GREEN_PROBLEM is not None, reason=GREEN_SKIP)
#: The 2.14/2.15 patch modules read Inductor config where torch keeps it from 2.12 (per-thread
#: ContextVars); their fakes cannot run over an older torch's config storage.
ERA_SKIP = f"the 2.14/2.15 era fakes need torch >= 2.12's config storage; torch {torch.__version__}"

PHYSICAL_SMS = 132
PHYSICAL_SMEM = 232448
#: The real green_stream, before any fixture replaces it.
REAL_GREEN_STREAM = confine.green_stream

HYPOTHESIS = settings(
    max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow]
)


# -- helpers ------------------------------------------------------------------------------------


def _resolve(path: str) -> Any:
    module_name, _, dotted = path.partition(":")
    value: Any = importlib.import_module(module_name)
    for part in dotted.split("."):
        value = getattr(value, part)
    return value


def clear_sm_caches() -> None:
    patches = torch_compat.installed(strict=False)
    for path in patches.sm_count_caches:
        _resolve(path).cache_clear()
    device_interface.caching_worker_device_properties.pop("cuda", None)


def torch_state() -> dict[str, Any]:
    """Everything emulation may change: objects compared by identity, config by value and raw state."""
    patches = torch_compat.installed(strict=False)
    return {
        "get_device_properties": torch.cuda.get_device_properties,
        "CudaInterface.get_device_properties": CudaInterface.__dict__["get_device_properties"],
        "compile_fx": inductor_compile_fx.compile_fx,
        "CUDAGraphTreeManager.__init__": cudagraph_trees.CUDAGraphTreeManager.__dict__["__init__"],
        "graph.__init__": torch.cuda.graphs.graph.__dict__["__init__"],
        "cache_key_tag": compiler_config.cache_key_tag,
        "autotune_local_cache": inductor_config.autotune_local_cache,
        "CacheBase.get_local_cache_path": CacheBase.__dict__["get_local_cache_path"],
        "autotune_in_subproc": inductor_config.autotune_in_subproc,
        "raw cache_key_tag": patches.read_override(compiler_config, "cache_key_tag"),
        "raw autotune_local_cache": patches.read_override(inductor_config, "autotune_local_cache"),
        "raw autotune_in_subproc": patches.read_override(inductor_config, "autotune_in_subproc"),
        "raw triton.cudagraph_trees": patches.read_override(inductor_config, "triton.cudagraph_trees"),
    }


IDENTITY_KEYS = (
    "get_device_properties",
    "CudaInterface.get_device_properties",
    "compile_fx",
    "CUDAGraphTreeManager.__init__",
    "graph.__init__",
    "CacheBase.get_local_cache_path",
)


def assert_unchanged(before: dict[str, Any]) -> None:
    after = torch_state()
    for key in IDENTITY_KEYS:
        assert after[key] is before[key], f"{key} was left replaced"
    for key in before:
        if key not in IDENTITY_KEYS:
            assert after[key] == before[key], f"{key}: {before[key]!r} -> {after[key]!r}"
    assert sm_view.active_spec() is None


# -- 1. presets -----------------------------------------------------------------------------------


def test_every_preset_is_well_formed():
    assert PRESETS
    for name, preset in PRESETS.items():
        assert preset.name == name
        assert isinstance(preset.sms, int) and preset.sms >= 1
        assert preset.shared_memory_per_block > 0 and preset.shared_memory_per_block % 1024 == 0
        assert len(preset.compute_capability) == 2


@pytest.mark.parametrize(
    ("name", "sms"),
    [("T4", 40), ("L4", 58), ("RTX3070", 46), ("RTX4060", 24), ("GB10", 48)],
)
def test_preset_sm_counts(name, sms):
    assert PRESETS[name].sms == sms


@pytest.mark.parametrize(
    ("text", "name"),
    [("t4", "T4"), ("rtx-3070", "RTX3070"), ("RTX 4060", "RTX4060"), ("gb10", "GB10"), (" l-4 ", "L4")],
)
def test_find_preset_ignores_case_spaces_and_dashes(text, name):
    assert find_preset(text) is PRESETS[name]


def test_unknown_preset_lists_the_known_ones_and_names_the_source():
    with pytest.raises(UnknownKnob) as info:
        find_preset("T9", "some_source")
    message = str(info.value)
    assert "some_source" in message and "'T9'" in message
    assert "T4 (40 SMs)" in message and "GB10 (48 SMs)" in message
    for name in PRESETS:
        assert name in message


# -- 2. resolve_spec / emulate_gpu arguments -----------------------------------------------------


def test_sm_count_by_keyword_or_position():
    assert ik.emulate_gpu(sms=40).spec == EmulationSpec(40)
    assert ik.emulate_gpu(40).spec == EmulationSpec(40)
    assert ik.emulate_gpu(40, shared_memory_per_block=2048, device=0).spec == EmulationSpec(40, 2048, None, 0)


def test_preset_supplies_sms_and_shared_memory():
    assert ik.emulate_gpu("T4").spec == EmulationSpec(40, 65536, "T4", None)
    assert ik.emulate_gpu("rtx-4060").spec == EmulationSpec(24, 99 * 1024, "RTX4060", None)


def test_explicit_shared_memory_overrides_the_preset():
    assert ik.emulate_gpu("T4", shared_memory_per_block=32768).spec == EmulationSpec(40, 32768, "T4", None)


@pytest.mark.parametrize(
    ("args", "kwargs", "match"),
    [
        ((), {"sms": 0}, r"sms=0 is not allowed.*int >= 1"),
        ((), {"sms": -3}, r"sms=-3 is not allowed.*int >= 1"),
        ((), {"sms": 1.5}, r"sms=1\.5 is not allowed.*int >= 1"),
        ((), {"sms": True}, r"sms=True is not allowed.*int >= 1"),
        ((0,), {}, r"sms=0 is not allowed"),
        ((40,), {"sms": 40}, r"given twice.*give it once"),
        (("T4",), {"sms": 40}, r"preset 'T4' fixes sms=40.*drop"),
        ((), {}, r"give an SM count"),
        ((), {"shared_memory_per_block": 65536}, r"give an SM count"),
        ((), {"sms": 40, "shared_memory_per_block": 0}, r"shared_memory_per_block=0 is not allowed.*>= 1024"),
        ((), {"sms": 40, "shared_memory_per_block": 512}, r"shared_memory_per_block=512 is not allowed.*>= 1024"),
        ((), {"sms": 40, "shared_memory_per_block": 1.5}, r"shared_memory_per_block=1\.5 is not allowed"),
        ((), {"sms": 40, "shared_memory_per_block": True}, r"shared_memory_per_block=True is not allowed"),
        (("T4",), {"shared_memory_per_block": 100}, r"shared_memory_per_block=100 is not allowed"),
        ((), {"sms": 40, "device": -1}, r"device=-1 is not allowed.*int >= 0"),
        ((), {"sms": 40, "device": True}, r"device=True is not allowed.*int >= 0"),
        ((), {"sms": 40, "device": "cuda:0"}, r"device='cuda:0' is not allowed"),
    ],
)
def test_bad_arguments_are_refused_at_once(args, kwargs, match):
    with pytest.raises(InvalidKnobValue, match=match) as info:
        ik.emulate_gpu(*args, **kwargs)
    assert "emulate_gpu" in str(info.value)


def test_a_string_sm_count_is_a_preset_name():
    with pytest.raises(UnknownKnob, match=r"unknown GPU preset '40'.*T4 \(40 SMs\)"):
        ik.emulate_gpu("40")


def test_resolve_spec_names_its_source():
    with pytest.raises(InvalidKnobValue, match=r"^MY_SOURCE: sms=0"):
        resolve_spec(0, source="MY_SOURCE")
    with pytest.raises(UnknownKnob, match=r"^MY_SOURCE: unknown GPU preset"):
        resolve_spec("nope", source="MY_SOURCE")


@HYPOTHESIS
@given(sms=st.integers(min_value=1, max_value=2**40))
def test_any_positive_int_sm_count_is_accepted(sms):
    assert resolve_spec(sms=sms) == EmulationSpec(sms)
    assert ik.emulate_gpu(sms).spec.sms == sms


@HYPOTHESIS
@given(sms=st.integers(max_value=0))
def test_any_non_positive_sm_count_is_refused(sms):
    with pytest.raises(InvalidKnobValue, match=f"sms={sms} is not allowed"):
        resolve_spec(sms=sms)
    with pytest.raises(InvalidKnobValue, match=f"sms={sms} is not allowed"):
        ik.emulate_gpu(sms)


@HYPOTHESIS
@given(smem=st.integers(min_value=1024, max_value=2**40))
def test_shared_memory_from_1024_is_accepted(smem):
    assert resolve_spec(sms=1, shared_memory_per_block=smem).shared_memory_per_block == smem


@HYPOTHESIS
@given(smem=st.integers(max_value=1023))
def test_shared_memory_below_1024_is_refused(smem):
    with pytest.raises(InvalidKnobValue, match=f"shared_memory_per_block={smem} is not allowed"):
        resolve_spec(sms=1, shared_memory_per_block=smem)


@HYPOTHESIS
@given(device=st.integers())
def test_device_index_must_be_non_negative(device):
    if device >= 0:
        assert resolve_spec(sms=1, device=device).device_index == device
    else:
        with pytest.raises(InvalidKnobValue, match=f"device={device} is not allowed"):
            resolve_spec(sms=1, device=device)


def test_constructing_changes_nothing():
    before = torch_state()
    contexts = [ik.emulate_gpu(sms=40), ik.emulate_gpu("T4"), ik.emulate_gpu(24, shared_memory_per_block=4096)]

    @ik.emulate_gpu(sms=40)
    def decorated():  # pragma: no cover - never called
        raise AssertionError

    assert all(not c.active for c in contexts)
    assert repr(contexts[1]) == "emulate_gpu(T4: 40 SMs, 64 KB smem/block)"
    assert_unchanged(before)


def test_constructing_imports_no_torch():
    code = (
        "import sys, inductor_knobs as ik\n"
        "ik.emulate_gpu(sms=40); ik.emulate_gpu('T4'); ik.emulate_gpu(24, shared_memory_per_block=4096)\n"
        "assert 'torch' not in sys.modules, sorted(m for m in sys.modules if m.startswith('torch'))\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr


# -- 3. entering on this CPU-only machine -------------------------------------------------------


@pytest.fixture
def no_cuda(monkeypatch):
    """This machine has no GPU; make that explicit so the tests hold on a GPU machine too."""
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    assert sm_view.active_spec() is None
    yield
    assert sm_view.active_spec() is None


@needs_green_streams
def test_enter_without_a_gpu_is_unavailable(no_cuda):
    before = torch_state()
    context = ik.emulate_gpu(sms=40)
    with pytest.raises(EmulationUnavailable, match="needs a CUDA GPU") as info:
        with context:
            pytest.fail("entered without a GPU")  # pragma: no cover
    assert torch.__version__ in str(info.value)
    assert not context.active
    assert_unchanged(before)


@needs_green_streams
def test_start_without_a_gpu_is_unavailable_and_stop_says_nothing_started(no_cuda):
    before = torch_state()
    context = ik.emulate_gpu("T4")
    with pytest.raises(EmulationUnavailable):
        context.start()
    with pytest.raises(ik.KnobsError, match="not active here"):  # the failed start left nothing to stop
        context.stop()
    assert_unchanged(before)


@needs_green_streams
def test_decorated_function_without_a_gpu_is_not_called(no_cuda):
    calls = []

    @ik.emulate_gpu(sms=40)
    def work():
        calls.append(1)  # pragma: no cover

    with pytest.raises(EmulationUnavailable):
        work()
    assert calls == []


def test_torch_without_green_context(no_cuda, monkeypatch):
    monkeypatch.delattr(torch.cuda, "GreenContext", raising=False)
    before = torch_state()
    with pytest.raises(NotSupportedOnThisTorch, match="no GreenContext") as info:
        with ik.emulate_gpu(sms=40):
            pytest.fail("entered")  # pragma: no cover
    assert torch.__version__ in str(info.value) and torch_compat.installed(strict=False).green_stream_since in str(info.value)
    assert_unchanged(before)


def test_green_context_without_stream(no_cuda, monkeypatch):
    class OldGreenContext:  # torch 2.10: create() and set_context(), no Stream()
        @staticmethod
        def create(num_sms, device_id=None):  # pragma: no cover - never reached
            raise AssertionError

    monkeypatch.setattr(torch.cuda, "GreenContext", OldGreenContext, raising=False)
    before = torch_state()
    with pytest.raises(NotSupportedOnThisTorch, match="GreenContext without Stream"):
        with ik.emulate_gpu(sms=40):
            pytest.fail("entered")  # pragma: no cover
    assert_unchanged(before)


# -- 4. the SM view on a fake CUDA device -------------------------------------------------------


class FakeStream:
    def __init__(self, name: str) -> None:
        self.name = name
        self.waited_on: list[FakeStream] = []

    def wait_stream(self, other: FakeStream) -> None:
        self.waited_on.append(other)

    def __repr__(self) -> str:
        return f"FakeStream({self.name})"


@dataclass
class FakeCuda:
    props: types.SimpleNamespace
    default_stream: FakeStream
    current: FakeStream
    set_streams: list[FakeStream] = field(default_factory=list)
    green: dict[int, FakeStream] = field(default_factory=dict)
    green_calls: list[tuple[int, int]] = field(default_factory=list)
    #: sms -> the second stream of that green context, where CUDA graphs are captured
    capture: dict[int, FakeStream] = field(default_factory=dict)
    #: sms requested -> SMs the fake driver grants (default: as requested)
    granted: dict[int, int] = field(default_factory=dict)


@pytest.fixture
def fake_cuda(monkeypatch):
    """One fake H200 (132 SMs) behind every API emulation and Inductor read; green streams faked."""
    props = types.SimpleNamespace(
        name="Fake H200",
        total_memory=141 * 2**30,
        multi_processor_count=PHYSICAL_SMS,
        shared_memory_per_block_optin=PHYSICAL_SMEM,
        shared_memory_per_block=49152,
        major=9,
        minor=0,
        regs_per_multiprocessor=65536,
        max_threads_per_multi_processor=2048,
        max_threads_per_block=1024,
        warp_size=32,
    )
    if GREEN_PROBLEM is not None:
        pytest.skip(GREEN_SKIP)
    default = FakeStream("default")
    state = FakeCuda(props=props, default_stream=default, current=default)

    def get_device_properties(device=None):
        return props

    def green_stream(device_index, sms):
        state.green_calls.append((device_index, sms))
        stream = state.green.setdefault(sms, FakeStream(f"green-{sms}"))
        return stream, state.granted.get(sms, sms)

    def green_capture_stream(device_index, sms):
        return state.capture.setdefault(sms, FakeStream(f"capture-{sms}"))

    def current_stream(device=None):
        return state.current

    def set_stream(stream):
        state.set_streams.append(stream)
        state.current = stream

    assert sm_view.active_spec() is None
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 1)
    monkeypatch.setattr(torch.cuda, "current_device", lambda: 0)
    monkeypatch.setattr(torch.cuda, "get_device_properties", get_device_properties)
    monkeypatch.setattr(CudaInterface, "get_device_properties", staticmethod(get_device_properties))
    monkeypatch.setattr(CudaInterface, "get_compute_capability", staticmethod(lambda device=None: 90))
    monkeypatch.setattr(emulation_plan, "green_stream", green_stream)  # looked up by plan_emulation
    monkeypatch.setattr(emulation_plan, "green_capture_stream", green_capture_stream)
    monkeypatch.setattr(torch.cuda, "current_stream", current_stream)
    monkeypatch.setattr(torch.cuda, "set_stream", set_stream)
    clear_sm_caches()
    yield state
    clear_sm_caches()
    assert sm_view.active_spec() is None, "a test left an emulation active"


def sms_seen() -> dict[str, int]:
    """The SM count through every path Inductor reads it."""
    return {
        "torch.cuda.get_device_properties": torch.cuda.get_device_properties(0).multi_processor_count,
        "CudaInterface.get_device_properties": CudaInterface.get_device_properties(0).multi_processor_count,
        "DeviceProperties.create": DeviceProperties.create(torch.device("cuda", 0)).multi_processor_count,
        "get_max_num_sms": inductor_utils.get_max_num_sms(),
    }


def all_equal(sms: int) -> dict[str, int]:
    return dict.fromkeys(sms_seen(), sms)


def test_fake_gpu_without_emulation(fake_cuda):
    assert sms_seen() == all_equal(PHYSICAL_SMS)
    assert inductor_utils.is_big_gpu(0) is True


def salt_of_a_compile() -> str:
    """The ``cache_key_tag`` a compile through ``compile_fx`` (a :class:`FakeCompileFx` here) computes its cache keys with."""
    return inductor_compile_fx.compile_fx("gm", inner_compile=lambda gm, inputs: compiler_config.cache_key_tag)


class _Choice:
    """A GEMM choice as ``PersistentCache.lookup`` sees it: a ``hash_key``."""

    def __init__(self, name: str) -> None:
        self.name = name

    def hash_key(self) -> str:
        return self.name


def _benchmarks(choices: list[_Choice], op: str = "mm", inputs: str = "[('cuda', 'torch.bfloat16', 64, 64)]") -> int:
    """How many times torch's own ``PersistentCache.lookup`` (Inductor's GEMM autotune cache) benchmarks ``choices``."""
    ran = []

    def benchmark(cs: list[_Choice]) -> dict[_Choice, float]:
        ran.append(cs)
        return {c: 1.0 for c in cs}

    PersistentCache().lookup(choices, op, inputs, benchmark)
    return len(ran)


def test_an_emulated_gpu_reuses_its_own_autotune_timings_and_never_the_whole_gpus(fake_cuda, tmp_path, monkeypatch):
    """Torch's GEMM autotune cache, read inside torch: a GEMM seen again under the same emulation is not
    benchmarked again (as on a real small GPU; emulation used to turn that cache off, and BERT-base's 96
    GEMMs were each benchmarked), another SM count or the whole GPU does not see those timings, and the
    whole GPU's own file is untouched."""
    monkeypatch.setenv("TORCHINDUCTOR_CACHE_DIR", str(tmp_path))
    monkeypatch.setattr(torch.version, "cuda", "13.0")  # the fake GPU on a CPU build: torch names the system by it
    CacheBase.get_system.cache_clear()
    CacheBase.get_local_cache_path.cache_clear()
    assert inductor_config.autotune_local_cache is True  # torch's default
    choices = [_Choice("aten_mm"), _Choice("triton_mm_1")]
    whole = CacheBase.get_local_cache_path()
    with ik.emulate_gpu(sms=40):
        t4 = CacheBase.get_local_cache_path()
        assert t4 != whole and t4.parent == whole.parent and t4.name.endswith("-inductor_knobs-emulate-40sm-0")
        assert _benchmarks(choices) == 1
        assert _benchmarks(choices) == 0  # the same GEMM again: torch's cache answered
    assert CacheBase.get_local_cache_path() == whole
    assert not whole.exists() and t4.exists()
    assert _benchmarks(choices) == 1  # the whole GPU measures its own
    with ik.emulate_gpu(sms=58):
        assert _benchmarks(choices) == 1  # another emulated GPU too
    CacheBase.get_system.cache_clear()
    CacheBase.get_local_cache_path.cache_clear()


def test_inductor_sees_the_emulated_sm_count_and_it_all_reverts(fake_cuda, monkeypatch):
    monkeypatch.setattr(inductor_compile_fx, "compile_fx", FakeCompileFx())
    before = torch_state()
    assert sms_seen() == all_equal(PHYSICAL_SMS)  # fill every cache with the real count first
    assert inductor_utils.is_big_gpu(0) is True
    with ik.emulate_gpu(sms=40) as emu:
        assert emu.sms == 40 and emu.physical_sms == PHYSICAL_SMS and emu.granted_sms == 40
        assert emu.gpu == "Fake H200" and emu.device_index == 0 and emu.preset is None
        assert emu.shared_memory_per_block is None
        assert emu.stream is fake_cuda.green[40]
        assert fake_cuda.green_calls == [(0, 40)]
        assert sms_seen() == all_equal(40)
        assert inductor_utils.is_big_gpu(0) is False  # torch's own 68-SM threshold
        props = torch.cuda.get_device_properties(0)
        assert props.shared_memory_per_block_optin == PHYSICAL_SMEM  # not emulated: the real GPU's
        assert props.name == "Fake H200" and props.major == 9
        assert sm_view.physical_properties(0).multi_processor_count == PHYSICAL_SMS
        assert sm_view.active_spec() == EmulationSpec(40, None, None, 0)
        # the stream
        assert fake_cuda.current is fake_cuda.green[40]
        assert fake_cuda.green[40].waited_on == [fake_cuda.default_stream]
        # config
        assert inductor_config.autotune_in_subproc is False
        assert inductor_config.autotune_local_cache is True  # on, in a file of the emulated GPU's own
        assert "emulate-40sm" in salt_of_a_compile() and "emulate" not in compiler_config.cache_key_tag
        # the getters and compile_fx are wrapped
        assert torch.cuda.get_device_properties is not before["get_device_properties"]
        assert inductor_compile_fx.compile_fx is not before["compile_fx"]
    assert fake_cuda.set_streams == [fake_cuda.green[40], fake_cuda.default_stream]
    assert fake_cuda.current is fake_cuda.default_stream
    assert fake_cuda.default_stream.waited_on == [fake_cuda.green[40]]
    assert sms_seen() == all_equal(PHYSICAL_SMS)
    assert inductor_utils.is_big_gpu(0) is True  # 132 >= 68
    assert_unchanged(before)


def test_emulated_shared_memory(fake_cuda, monkeypatch):
    monkeypatch.setattr(inductor_compile_fx, "compile_fx", FakeCompileFx())
    with ik.emulate_gpu(sms=40, shared_memory_per_block=65536) as emu:
        props = torch.cuda.get_device_properties(0)
        assert emu.shared_memory_per_block == 65536
        assert props.shared_memory_per_block_optin == 65536
        assert props.shared_memory_per_block == 49152  # min(real 48 KB, 64 KB)
        assert CudaInterface.get_device_properties(0).shared_memory_per_block_optin == 65536
        assert "emulate-40sm-65536" in salt_of_a_compile()
    assert torch.cuda.get_device_properties(0).shared_memory_per_block_optin == PHYSICAL_SMEM


def test_emulated_shared_memory_below_the_default_limit(fake_cuda):
    with ik.emulate_gpu(sms=16, shared_memory_per_block=32768):
        assert torch.cuda.get_device_properties(0).shared_memory_per_block == 32768


def test_preset_on_the_fake_gpu(fake_cuda):
    with ik.emulate_gpu("t4") as emu:
        assert (emu.sms, emu.preset, emu.shared_memory_per_block) == (40, "T4", 65536)
        assert sms_seen() == all_equal(40)
        assert torch.cuda.get_device_properties(0).shared_memory_per_block_optin == 65536
    assert sms_seen() == all_equal(PHYSICAL_SMS)


def test_other_devices_are_not_emulated(fake_cuda, monkeypatch):
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 2)
    with ik.emulate_gpu(sms=40, device=1) as emu:
        assert emu.device_index == 1
        assert torch.cuda.get_device_properties(1).multi_processor_count == 40
        assert torch.cuda.get_device_properties(0).multi_processor_count == PHYSICAL_SMS
    assert torch.cuda.get_device_properties(1).multi_processor_count == PHYSICAL_SMS


def test_device_beyond_the_visible_ones(fake_cuda):
    before = torch_state()
    with pytest.raises(InvalidKnobValue, match=r"device=1 is not allowed.*1 CUDA device"):
        with ik.emulate_gpu(sms=40, device=1):
            pytest.fail("entered")  # pragma: no cover
    assert_unchanged(before)


def test_driver_rounding_warns(fake_cuda):
    fake_cuda.granted[46] = 48
    with pytest.warns(EmulationWarning, match=r"kernels run on 48 SMs while Inductor sees 46"):
        with ik.emulate_gpu("RTX3070") as emu:
            assert emu.granted_sms == 48 and emu.sms == 46
            assert torch.cuda.get_device_properties(0).multi_processor_count == 46


def test_same_spec_nests_and_stays_until_the_outer_exits(fake_cuda):
    before = torch_state()
    outer = ik.emulate_gpu(sms=40)
    with outer:
        tag = compiler_config.cache_key_tag
        with ik.emulate_gpu(sms=40) as inner:
            assert inner.physical_sms == PHYSICAL_SMS  # the real GPU's, not the emulated 40
            assert sms_seen() == all_equal(40)
        assert sms_seen() == all_equal(40)
        assert inductor_utils.is_big_gpu(0) is False
        assert compiler_config.cache_key_tag == tag
        assert fake_cuda.current is fake_cuda.green[40]
        assert sm_view.active_spec() is not None
        with outer:  # the same object re-entered (a recursive decorated function)
            assert sms_seen() == all_equal(40)
        assert sms_seen() == all_equal(40)
    assert sms_seen() == all_equal(PHYSICAL_SMS)
    assert fake_cuda.current is fake_cuda.default_stream
    assert_unchanged(before)


def test_a_different_emulation_inside_is_refused_and_the_outer_stays(fake_cuda):
    before = torch_state()
    with ik.emulate_gpu(sms=40):
        inside = torch_state()
        streams = list(fake_cuda.set_streams)
        with pytest.raises(EmulationConflict, match=r"24 SMs.*40 SMs"):
            with ik.emulate_gpu(sms=24):
                pytest.fail("entered")  # pragma: no cover
        with pytest.raises(EmulationConflict):
            with ik.emulate_gpu(sms=40, shared_memory_per_block=65536):
                pytest.fail("entered")  # pragma: no cover
        assert sms_seen() == all_equal(40)
        assert inductor_utils.is_big_gpu(0) is False
        assert fake_cuda.set_streams == streams and fake_cuda.current is fake_cuda.green[40]
        after = torch_state()
        for key in inside:
            assert after[key] is inside[key] or after[key] == inside[key], key
    assert_unchanged(before)


def test_emulation_then_knobs(fake_cuda):
    gate = inductor_utils.is_big_gpu
    with ik.emulate_gpu(sms=40), ik.knobs(min_sms=40):
        assert inductor_utils.is_big_gpu(0) is True
    with ik.emulate_gpu(sms=40), ik.knobs(min_sms=41):
        assert inductor_utils.is_big_gpu(0) is False
    assert inductor_utils.is_big_gpu is gate
    assert inductor_utils.is_big_gpu(0) is True


def test_knobs_then_emulation(fake_cuda):
    before = torch_state()
    with ik.knobs(min_sms=40):
        assert inductor_utils.is_big_gpu(0) is True  # the real 132 SMs
        with ik.emulate_gpu(sms=24):
            assert inductor_utils.is_big_gpu(0) is False
        assert inductor_utils.is_big_gpu(0) is True  # the cache holds no emulated verdict
    with ik.force_gemm_autotune(min_sms=1), ik.emulate_gpu(sms=24):
        assert inductor_utils.is_big_gpu(0) is True
        assert inductor_config.max_autotune_gemm is True
    assert_unchanged(before)


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"sms": PHYSICAL_SMS + 1}, rf"sms={PHYSICAL_SMS + 1} is not allowed on Fake H200.*1\.\.{PHYSICAL_SMS}"),
        ({"sms": 10_000}, rf"1\.\.{PHYSICAL_SMS}"),
        (
            {"sms": 40, "shared_memory_per_block": PHYSICAL_SMEM + 1024},
            rf"shared_memory_per_block={PHYSICAL_SMEM + 1024} is not allowed.*at most {PHYSICAL_SMEM}",
        ),
    ],
)
def test_values_above_the_real_gpu_are_refused(fake_cuda, kwargs, match):
    before = torch_state()
    with pytest.raises(InvalidKnobValue, match=match):
        with ik.emulate_gpu(**kwargs):
            pytest.fail("entered")  # pragma: no cover
    assert fake_cuda.set_streams == [] and fake_cuda.green_calls == []
    assert_unchanged(before)


def test_all_of_the_real_gpu_is_allowed(fake_cuda):
    with ik.emulate_gpu(sms=PHYSICAL_SMS, shared_memory_per_block=PHYSICAL_SMEM):
        assert inductor_utils.is_big_gpu(0) is True


def test_decorated_function(fake_cuda):
    @ik.emulate_gpu(sms=40)
    def count() -> int:
        return torch.cuda.get_device_properties(0).multi_processor_count

    assert count() == 40
    assert count() == 40
    assert torch.cuda.get_device_properties(0).multi_processor_count == PHYSICAL_SMS


def test_start_and_stop(fake_cuda):
    before = torch_state()
    context = ik.emulate_gpu(sms=40)
    emu = context.start()
    try:
        assert emu.sms == 40 and context.active
        assert sms_seen() == all_equal(40)
    finally:
        context.stop()
    assert not context.active
    assert_unchanged(before)


def test_an_exception_inside_reverts(fake_cuda):
    before = torch_state()
    with pytest.raises(KeyError):
        with ik.emulate_gpu(sms=40):
            raise KeyError("boom")
    assert fake_cuda.current is fake_cuda.default_stream
    assert sms_seen() == all_equal(PHYSICAL_SMS)
    assert_unchanged(before)


def test_a_failing_change_leaves_nothing_applied(fake_cuda, monkeypatch):
    """The stream change is applied last; when it fails, the SM view and config go back."""
    before = torch_state()

    def refuse(stream):
        raise RuntimeError("set_stream refused")

    monkeypatch.setattr(torch.cuda, "set_stream", refuse)
    with pytest.raises(RuntimeError, match="set_stream refused"):
        with ik.emulate_gpu(sms=40):
            pytest.fail("entered")  # pragma: no cover
    assert sms_seen() == all_equal(PHYSICAL_SMS)
    assert_unchanged(before)


# -- the real green_stream, with a fake GreenContext ---------------------------------------------


@pytest.fixture
def create_era(monkeypatch):
    """The fakes below have the 2.11-2.13 API (``create``): on a torch whose own era uses another
    green-context API (2.14+: the constructor), run them under the 2.11-2.13 patch module."""
    if torch_compat.installed(strict=False).green_context_api != "create":
        era = importlib.import_module("inductor_knobs.patches.torch_2_12").PATCHES
        monkeypatch.setattr(torch_compat, "installed", lambda strict=True: era)


@pytest.mark.usefixtures("create_era")
def test_green_stream_is_cached_and_reports_the_granted_sms(fake_cuda, monkeypatch):
    created = []

    class FakeGreenContext:
        def __init__(self, sms):
            self.sm_count = sms + 2
            self.stream = FakeStream(f"driver-{sms}")

        @classmethod
        def create(cls, num_sms, device_id=None):
            created.append((num_sms, device_id))
            return cls(num_sms)

        def Stream(self):  # torch's name
            return self.stream

    monkeypatch.setattr(torch.cuda, "GreenContext", FakeGreenContext)
    monkeypatch.setattr(confine, "_GREEN", {})
    first = REAL_GREEN_STREAM(0, 40)
    assert first[1] == 42 and first[0].name == "driver-40"
    assert REAL_GREEN_STREAM(0, 40) == first
    assert created == [(40, 0)]


@pytest.mark.usefixtures("create_era")
def test_the_capture_stream_is_a_second_cached_stream_of_the_same_green_context(fake_cuda, monkeypatch):
    contexts = []

    class FakeGreenContext:
        def __init__(self):
            self.streams: list[FakeStream] = []
            contexts.append(self)

        @classmethod
        def create(cls, num_sms, device_id=None):
            return cls()

        def Stream(self):  # torch's name: a new stream of this context at each call
            self.streams.append(FakeStream(f"green-{len(self.streams)}"))
            return self.streams[-1]

    monkeypatch.setattr(torch.cuda, "GreenContext", FakeGreenContext)
    monkeypatch.setattr(confine, "_GREEN", {})
    monkeypatch.setattr(confine, "_CAPTURE", {})
    capture = confine.green_capture_stream(0, 40)
    work, _ = REAL_GREEN_STREAM(0, 40)
    assert len(contexts) == 1 and contexts[0].streams == [work, capture] and capture is not work
    assert confine.green_capture_stream(0, 40) is capture and len(contexts[0].streams) == 2


@pytest.mark.usefixtures("create_era")
def test_driver_refusal_is_unavailable(fake_cuda, monkeypatch):
    class RefusingGreenContext:
        @staticmethod
        def create(num_sms, device_id=None):
            raise RuntimeError("CUDA_ERROR_INVALID_RESOURCE_CONFIGURATION")

        def Stream(self):  # pragma: no cover
            raise AssertionError

    monkeypatch.setattr(torch.cuda, "GreenContext", RefusingGreenContext)
    monkeypatch.setattr(confine, "_GREEN", {})
    monkeypatch.setattr(emulation_plan, "green_stream", REAL_GREEN_STREAM)
    before = torch_state()
    with pytest.raises(EmulationUnavailable, match=r"refused a green context on cuda:0.*INVALID_RESOURCE") as info:
        with ik.emulate_gpu(sms=40):
            pytest.fail("entered")  # pragma: no cover
    assert torch.__version__ in str(info.value)
    assert confine._GREEN == {}
    assert fake_cuda.set_streams == []
    assert_unchanged(before)


# -- the green-context API per torch era (fakes with the real 2.14.1 / 2.15.0 signatures) -----------
#
# Signatures copied from the wheels' torch/cuda/green_contexts.py.  The fake driver grants SMs in
# groups of 8 (as an H200 does), so 46 -> 48.  Calls that emulation must not make (create(), "kept
# for compatibility" from 2.14; the deprecated set_context/pop_context) fail the test.


def _granted(sms: int) -> int:
    return -(-sms // 8) * 8


class Fake214GreenContext:
    """torch 2.14.1 ``GreenContext`` (``cuda/green_contexts.py:81``): Python, constructor, no ``sm_count``."""

    made: ClassVar[list[Fake214GreenContext]] = []
    #: a driver error to raise instead of making the context (None: succeed)
    refuse: str | None = None

    def __init__(
        self,
        *,
        num_sms: int | None = None,
        workqueue_scope: str | None = None,
        workqueue_concurrency_limit: int | None = None,
        device_id: int | None = None,
    ) -> None:
        if self.refuse:
            raise RuntimeError(self.refuse)
        if num_sms is None and workqueue_scope is None:
            raise RuntimeError("At least one of num_sms or workqueue_scope must be specified")
        if num_sms is not None and (num_sms <= 0 or num_sms > PHYSICAL_SMS):
            raise RuntimeError(f"Invalid number of SMs requested for green context: {num_sms} (device has {PHYSICAL_SMS} SMs)")
        self._device_id = torch.cuda.current_device() if device_id is None else device_id
        self._granted = _granted(num_sms) if num_sms is not None else PHYSICAL_SMS
        self.kwargs = {"num_sms": num_sms, "device_id": device_id}
        self.streams: list[FakeStream] = []
        type(self).made.append(self)

    @staticmethod
    def create(
        *,
        num_sms: int | None = None,
        workqueue_scope: str | None = None,
        workqueue_concurrency_limit: int | None = None,
        device_id: int | None = None,
    ) -> Fake214GreenContext:  # pragma: no cover - "Kept for compatibility": emulation must not call it
        raise AssertionError("GreenContext.create() is kept for compatibility only from torch 2.14")

    @staticmethod
    def max_workqueue_concurrency(device_id: int | None = None) -> int:  # pragma: no cover
        return 0

    def set_context(self) -> None:  # pragma: no cover - @deprecated in 2.14
        raise AssertionError("set_context is deprecated (FutureWarning) and does not confine compiled kernels")

    def pop_context(self) -> None:  # pragma: no cover - @deprecated in 2.14
        raise AssertionError("pop_context is deprecated")

    def Stream(self) -> FakeStream:
        stream = FakeStream(f"green-{self.kwargs['num_sms']}-{len(self.streams)}")
        self.streams.append(stream)
        return stream


class FakeSMPartition:
    """torch 2.15.0 ``SMPartition`` (``cuda/green_contexts.py:271``)."""

    def __init__(self, _resource: Any, _device_id: int, _owner: Any = None) -> None:
        self._resource = _resource
        self._device_id = _device_id
        self._owner = _owner

    @classmethod
    def from_device(cls, device_id: int | None = None) -> FakeSMPartition:  # pragma: no cover - not used
        raise AssertionError("emulation asks GreenContext(num_sms=...), which rounds; SMPartition.split does not")

    @property
    def device_id(self) -> int:
        return self._device_id

    @property
    def sm_count(self) -> int:
        return int(self._resource)

    def split(self, *, num_sms: Any = 0, coscheduled_sm_count: Any = 0, preferred_coscheduled_sm_count: Any = 0,
              backfill: Any = False, locality_domain_ids: Any = None) -> Any:  # pragma: no cover  # fmt: skip
        raise AssertionError("not used by emulation")


class Fake215GreenContext(Fake214GreenContext):
    """torch 2.15.0 ``GreenContext`` (``cuda/green_contexts.py:502``): ``sm_partition=``, ``sm_count``, ``split``."""

    made: ClassVar[list[Fake214GreenContext]] = []

    def __init__(  # type: ignore[override]
        self,
        *,
        num_sms: int | None = None,
        sm_partition: FakeSMPartition | None = None,
        workqueue_scope: str | None = None,
        workqueue_concurrency_limit: int | None = None,
        device_id: int | None = None,
    ) -> None:
        if num_sms is not None and sm_partition is not None:
            raise ValueError("num_sms and sm_partition are mutually exclusive")
        super().__init__(num_sms=num_sms, workqueue_scope=workqueue_scope, device_id=device_id)
        self._sm_count: int | None = None

    @staticmethod
    def split(**kwargs: Any) -> tuple[Fake215GreenContext, ...]:  # pragma: no cover - not used
        raise AssertionError("not used by emulation")

    @property
    def device_id(self) -> int:
        return self._device_id

    @property
    def sm_partition(self) -> FakeSMPartition:
        return FakeSMPartition(self._granted, self._device_id, self)

    @property
    def sm_count(self) -> int:
        if self._sm_count is None:
            self._sm_count = self.sm_partition.sm_count
        return self._sm_count

    @staticmethod
    def create(  # type: ignore[override]
        *,
        num_sms: int | None = None,
        sm_partition: FakeSMPartition | None = None,
        workqueue_scope: str | None = None,
        workqueue_concurrency_limit: int | None = None,
        device_id: int | None = None,
    ) -> Fake215GreenContext:  # pragma: no cover - "Kept for compatibility"
        raise AssertionError("GreenContext.create() is kept for compatibility only")


ERAS = {
    "2.14": ("inductor_knobs.patches.torch_2_14", Fake214GreenContext),
    "2.15": ("inductor_knobs.patches.torch_2_15", Fake215GreenContext),
}


@pytest.fixture(params=sorted(ERAS))
def green_era(request, fake_cuda, monkeypatch):
    if not torch_compat.installed(strict=False).config_is_thread_local:
        pytest.skip(ERA_SKIP)
    """The fake GPU, this torch's patch module swapped for the 2.14 or 2.15 one, and that era's
    ``GreenContext``; the real ``green_stream`` (not the fixture's fake)."""
    module_name, green_class = ERAS[request.param]
    era = importlib.import_module(module_name).PATCHES
    monkeypatch.setattr(torch_compat, "installed", lambda strict=True: era)
    monkeypatch.setattr(torch.cuda, "GreenContext", green_class, raising=False)
    monkeypatch.setattr(green_class, "made", [])
    monkeypatch.setattr(confine, "_GREEN", {})
    monkeypatch.setattr(emulation_plan, "green_stream", REAL_GREEN_STREAM)
    # 2.14 cannot say what it granted: emulation asks the driver (cuda-python), faked here
    driver_calls: list[tuple[int, int]] = []

    def driver_split_sms(device_index: int, sms: int) -> int:
        driver_calls.append((device_index, sms))
        return _granted(sms)

    monkeypatch.setattr(importlib.import_module("inductor_knobs.patches.torch_2_8"), "driver_split_sms", driver_split_sms)
    return types.SimpleNamespace(release=request.param, patches=era, green=green_class, driver_calls=driver_calls)


def test_each_era_confines_to_its_green_stream_and_reverts_exactly(green_era, fake_cuda):
    before = torch_state()
    assert sms_seen() == all_equal(PHYSICAL_SMS)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # no FutureWarning from deprecated calls, no rounding warning at 40
        with ik.emulate_gpu(sms=40) as emu:
            (context,) = green_era.green.made
            assert context.kwargs == {"num_sms": 40, "device_id": 0}  # the constructor, never create()
            assert emu.stream is context.streams[0] and len(context.streams) == 1
            assert fake_cuda.current is emu.stream  # work launched here goes to the green context's stream
            assert emu.stream.waited_on == [fake_cuda.default_stream]
            assert sms_seen() == all_equal(40)
            assert inductor_utils.is_big_gpu(0) is False
            assert emu.granted_sms == 40
            assert confine._GREEN[(0, 40)][0] is context  # kept alive: 2.14+ __del__ destroys its streams
    assert fake_cuda.set_streams == [emu.stream, fake_cuda.default_stream]
    assert fake_cuda.current is fake_cuda.default_stream
    assert fake_cuda.default_stream.waited_on == [emu.stream]
    assert sms_seen() == all_equal(PHYSICAL_SMS)
    assert_unchanged(before)
    # the granted count: 2.15 reads GreenContext.sm_count, 2.14 asks the driver
    assert green_era.driver_calls == ([(0, 40)] if green_era.release == "2.14" else [])


def test_each_era_reports_the_driver_rounding(green_era, fake_cuda):
    with pytest.warns(EmulationWarning, match=r"kernels run on 48 SMs while Inductor sees 46"):
        with ik.emulate_gpu("RTX3070") as emu:
            assert (emu.sms, emu.granted_sms) == (46, 48)
            assert torch.cuda.get_device_properties(0).multi_processor_count == 46
    with pytest.warns(EmulationWarning), ik.emulate_gpu("RTX3070") as again:  # cached: no second context
        assert again.stream is emu.stream
    assert len(green_era.green.made) == 1


def test_each_era_reports_a_driver_refusal(green_era, fake_cuda, monkeypatch):
    monkeypatch.setattr(green_era.green, "refuse", "CUDA_ERROR_INVALID_RESOURCE_CONFIGURATION")
    before = torch_state()
    with pytest.raises(EmulationUnavailable, match=r"refused a green context on cuda:0.*INVALID_RESOURCE") as info:
        with ik.emulate_gpu(sms=40):
            pytest.fail("entered")  # pragma: no cover
    assert torch.__version__ in str(info.value)
    assert confine._GREEN == {} and fake_cuda.set_streams == []
    assert_unchanged(before)


def test_an_unknown_green_context_api_is_not_supported_and_names_the_release(green_era, fake_cuda, monkeypatch):
    class CppShim:  # the 2.11-2.13 API: create() and Stream() on a C++ class, no keyword constructor
        def __init__(self, *args: Any, **kwargs: Any) -> None:  # pragma: no cover
            raise AssertionError

        @staticmethod
        def create(*, num_sms=None, workqueue_scope=None, workqueue_concurrency_limit=None, device_id=None):  # pragma: no cover
            raise AssertionError

        def Stream(self):  # pragma: no cover
            raise AssertionError

    monkeypatch.setattr(torch.cuda, "GreenContext", CppShim)
    before = torch_state()
    with pytest.raises(NotSupportedOnThisTorch, match=r"GreenContext\(num_sms=, device_id=\) constructor") as info:
        with ik.emulate_gpu(sms=40):
            pytest.fail("entered")  # pragma: no cover
    assert torch.__version__ in str(info.value)
    assert_unchanged(before)
    with pytest.raises(NotSupportedOnThisTorch, match=torch.__version__.replace("+", r"\+")):
        green_era.patches.make_green_stream(0, 40)  # the patch module refuses on its own too


def test_create_era_refuses_a_constructor_only_green_context(fake_cuda, monkeypatch):
    """Torch 2.11-2.13's patch module knows ``create(num_sms=, device_id=)`` only."""

    class NoCreate:
        def __init__(self, *, num_sms=None, device_id=None) -> None:  # pragma: no cover
            raise AssertionError

        def Stream(self):  # pragma: no cover
            raise AssertionError

    era = importlib.import_module("inductor_knobs.patches.torch_2_12").PATCHES
    monkeypatch.setattr(torch_compat, "installed", lambda strict=True: era)
    monkeypatch.setattr(torch.cuda, "GreenContext", NoCreate, raising=False)
    with pytest.raises(NotSupportedOnThisTorch, match=r"without create\(num_sms=, device_id=\)"):
        with ik.emulate_gpu(sms=40):
            pytest.fail("entered")  # pragma: no cover


@pytest.mark.parametrize("module", ["torch_2_4", "torch_2_6", "torch_2_7"])
def test_eras_without_a_green_context_api_refuse(module, fake_cuda, monkeypatch):
    era = importlib.import_module(f"inductor_knobs.patches.{module}").PATCHES
    monkeypatch.setattr(torch.cuda, "GreenContext", Fake215GreenContext, raising=False)
    assert era.green_context_api is None
    with pytest.raises(NotSupportedOnThisTorch, match=rf"patches\.{module} does not know"):
        era.make_green_stream(0, 40)


def test_green_stream_without_cuda_bindings_reports_no_granted_count(fake_cuda, monkeypatch):
    """torch 2.14 has no ``sm_count``; without cuda-python the granted count is unknown (None), not a guess."""
    era = importlib.import_module("inductor_knobs.patches.torch_2_14").PATCHES
    monkeypatch.setattr(torch_compat, "installed", lambda strict=True: era)
    monkeypatch.setattr(torch.cuda, "GreenContext", Fake214GreenContext, raising=False)
    monkeypatch.setattr(Fake214GreenContext, "made", [])
    monkeypatch.setattr(confine, "_GREEN", {})
    monkeypatch.setitem(sys.modules, "cuda.bindings", None)  # import fails like a missing package
    stream, granted = REAL_GREEN_STREAM(0, 40)
    assert granted is None and stream is Fake214GreenContext.made[0].streams[0]


# -- 5. CUDA graphs kept, captured on the green stream ----------------------------------------------


class FakeCompileFx:
    """Stands in for ``compile_fx`` (no real compile on a fake CUDA device): records the
    ``config_patches`` torch would apply and runs ``inner_compile`` under them, as torch does."""

    def __init__(self) -> None:
        self.calls: list[Any] = []

    def __call__(self, model_, example_inputs_=(), inner_compile=None, config_patches=None):
        self.calls.append(config_patches)
        with inductor_config.patch(config_patches or {}):
            return inner_compile(model_, example_inputs_)


def capture_config_seen(gm: Any, inputs: Any) -> dict[str, Any]:
    """What an inner compile sees of CUDA graphs and of the keys emulation asks for them."""
    keys = ["triton.cudagraphs", *(key for key, _ in torch_compat.installed(strict=False).emulation_capture_config)]
    return {key: _resolve(f"torch._inductor.config:{key}") for key in keys}


def test_emulation_keeps_cuda_graphs_and_asks_only_for_capture_paths_it_can_redirect(fake_cuda, monkeypatch, patches):
    """A mode's CUDA graphs stay on under emulation; the graph trees are asked for (over an explicit
    ``triton.cudagraph_trees=False``, with an EmulationWarning), and from 2.14 cudagraph benchmarking off."""
    fake = FakeCompileFx()
    monkeypatch.setattr(inductor_compile_fx, "compile_fx", fake)
    raw = patches.read_override(inductor_config, "triton.cudagraph_trees")
    attestations: list[Any] = []
    receiver = type("Receiver", (), {"on_attestation": lambda self, a: attestations.append(a)})()
    asked = dict(patches.emulation_capture_config)
    assert asked["triton.cudagraph_trees"] is True
    with ik.emulate_gpu(sms=40), Subscription(receiver, hooks=False):
        mode = {"triton.cudagraphs": True}
        with warnings.catch_warnings():
            warnings.simplefilter("error", EmulationWarning)
            seen = inductor_compile_fx.compile_fx("gm", inner_compile=capture_config_seen, config_patches=mode)
        assert seen == {"triton.cudagraphs": True, **asked}
        with pytest.warns(EmulationWarning, match="triton.cudagraph_trees"):
            no_trees = {**mode, "triton.cudagraph_trees": False}
            seen = inductor_compile_fx.compile_fx("gm", inner_compile=capture_config_seen, config_patches=no_trees)
        assert seen == {"triton.cudagraphs": True, **asked}
        with ik.knobs(cudagraphs=True, min_sms=1), warnings.catch_warnings():  # a knob's CUDA graphs stay on too
            warnings.simplefilter("error", EmulationWarning)
            assert inductor_compile_fx.compile_fx("gm", inner_compile=capture_config_seen)["triton.cudagraphs"] is True
    assert [a.value("triton.cudagraph_trees") for a in attestations] == [True, True, True]
    keys = [s.key for s in attestations[1].settings]
    assert attestations[1].settings[keys.index("triton.cudagraph_trees")].overrode is False  # the value that lost
    # torch's own config.patch (here in the fake, as in compile_fx) pins the value it read on exit;
    # emulation itself changed no stored state of the key.
    patches.write_override(inductor_config, "triton.cudagraph_trees", raw)


def test_emulation_is_quiet_when_nothing_asked_conflicts(fake_cuda, monkeypatch):
    monkeypatch.setattr(inductor_compile_fx, "compile_fx", FakeCompileFx())
    with ik.emulate_gpu(sms=40), warnings.catch_warnings():
        warnings.simplefilter("error", EmulationWarning)
        inductor_compile_fx.compile_fx("gm", inner_compile=lambda gm, inputs: None, config_patches={"max_autotune": True})


@pytest.fixture
def tree_managers(monkeypatch):
    """``CUDAGraphTreeManager.__init__`` without CUDA: each manager makes a side stream of its own, as
    torch's does (``self.stream = torch.cuda.Stream()``); returns the streams made, in order."""
    made: list[FakeStream] = []

    def init(self, device_index):
        self.device_index = device_index
        self.stream = FakeStream(f"side-{device_index}-{len(made)}")
        made.append(self.stream)

    monkeypatch.setattr(cudagraph_trees.CUDAGraphTreeManager, "__init__", init)
    return made


def this_threads_managers() -> dict[int, Any]:
    return cudagraph_trees.get_obj(cudagraph_trees.local, "tree_manager_containers")


def test_the_threads_graph_tree_manager_records_on_the_green_stream_and_gets_its_own_back(fake_cuda, tree_managers, monkeypatch):
    """The manager that exists on enter and one made inside (the first compiled call) record on the green
    context's capture stream; a manager of another device or another thread keeps its side stream; exit
    restores each by identity."""
    before = torch_state()
    existing = cudagraph_trees.CUDAGraphTreeManager(0)
    monkeypatch.setitem(this_threads_managers(), 0, types.SimpleNamespace(tree_manager=existing))
    with ik.emulate_gpu(sms=40) as emu:
        assert existing.stream is emu.capture_stream is fake_cuda.capture[40]
        assert emu.capture_stream is not emu.stream
        made = cudagraph_trees.CUDAGraphTreeManager(0)
        assert made.stream is emu.capture_stream
        other_device = cudagraph_trees.CUDAGraphTreeManager(device_index=1)
        elsewhere: list[Any] = []
        thread = threading.Thread(target=lambda: elsewhere.append((cudagraph_trees.CUDAGraphTreeManager(0), capture_stream())))
        thread.start()
        thread.join()
        assert other_device.stream is tree_managers[2] and elsewhere[0][0].stream is tree_managers[3]
        assert elsewhere[0][1] is None and capture_stream() is emu.capture_stream and capture_stream(1) is None
        assert cudagraph_trees.CUDAGraphTreeManager.__dict__["__init__"] is not before["CUDAGraphTreeManager.__init__"]
    assert existing.stream is tree_managers[0] and made.stream is tree_managers[1]
    assert capture_stream() is None
    assert_unchanged(before)


def test_a_manager_made_in_an_inner_block_stays_green_until_the_outer_exits(fake_cuda, tree_managers, monkeypatch):
    before = torch_state()
    with ik.emulate_gpu(sms=40) as emu:
        with ik.emulate_gpu(sms=40):
            made = cudagraph_trees.CUDAGraphTreeManager(0)
            monkeypatch.setitem(this_threads_managers(), 0, types.SimpleNamespace(tree_manager=made))
        assert made.stream is emu.capture_stream
    assert made.stream is tree_managers[0]
    outer, inner = ik.emulate_gpu(sms=40), ik.emulate_gpu(sms=40)
    outer.start()
    inner.start()
    outer.stop()  # out of order: the inner block stays, and so does the green stream
    assert made.stream is emu.capture_stream and capture_stream() is emu.capture_stream
    inner.stop()
    assert made.stream is tree_managers[0] and capture_stream() is None
    assert_unchanged(before)


def test_a_manager_without_a_stream_attribute_is_named(fake_cuda, monkeypatch):
    monkeypatch.setattr(cudagraph_trees.CUDAGraphTreeManager, "__init__", lambda self, device_index: None)
    with ik.emulate_gpu(sms=40), pytest.warns(EmulationWarning, match=r"no 'stream' attribute.*replay on the whole GPU"):
        cudagraph_trees.CUDAGraphTreeManager(0)


def test_torch_cuda_graph_without_a_stream_captures_on_the_capture_stream(fake_cuda, monkeypatch):
    got: list[Any] = []

    def init(self, cuda_graph, pool=None, stream=None, capture_error_mode="global"):
        got.append(stream)

    monkeypatch.setattr(torch.cuda.graphs.graph, "__init__", init)
    before = torch_state()
    mine = FakeStream("mine")
    with ik.emulate_gpu(sms=40) as emu:
        torch.cuda.graph("g")
        torch.cuda.graph("g", None, None)
        torch.cuda.graph("g", pool=None, stream=mine, capture_error_mode="thread_local")
        torch.cuda.graph("g", None, mine)
        elsewhere = threading.Thread(target=lambda: torch.cuda.graph("g"))
        elsewhere.start()
        elsewhere.join()
    torch.cuda.graph("g")
    assert got == [emu.capture_stream, emu.capture_stream, mine, mine, None, None]
    assert torch.cuda.graphs.graph.__dict__["__init__"] is init
    assert_unchanged(before)


class FakeGraphCuda:
    """The ``torch.cuda`` calls ``CapturedGraphs._capture`` makes, recording the streams used."""

    def __init__(self, current: FakeStream) -> None:
        self.current = current
        self.made: list[FakeStream] = []
        self.warmup_on: list[Any] = []
        self.capture_on: list[Any] = []

    def Stream(self) -> FakeStream:  # torch's name
        self.made.append(FakeStream("side"))
        return self.made[-1]

    def current_stream(self) -> FakeStream:
        return self.current

    def stream(self, stream: Any) -> Any:
        self.warmup_on.append(stream)
        return contextlib.nullcontext()

    def CUDAGraph(self) -> object:  # torch's name
        return object()

    def graph(self, graph: Any, pool: Any = None, stream: Any = None) -> Any:
        self.capture_on.append(stream)
        return contextlib.nullcontext()


def test_capture_cuda_graphs_warms_up_and_captures_in_the_green_context(fake_cuda):
    """Warm-up on the stream work runs on, capture on the capture stream (never the one eager work used)."""
    captured = ik.serving.CapturedGraphs(lambda x: x + 1)
    with ik.emulate_gpu(sms=40) as emu:
        inside = FakeGraphCuda(fake_cuda.current)
        captured._capture(types.SimpleNamespace(cuda=inside), (torch.zeros(2),), {}, "pool", 2)
    assert inside.made == [] and inside.warmup_on == [emu.stream] and inside.capture_on == [emu.capture_stream]
    outside = FakeGraphCuda(fake_cuda.current)
    captured._capture(types.SimpleNamespace(cuda=outside), (torch.zeros(3),), {}, "pool", 2)
    assert outside.warmup_on == outside.made and len(outside.made) == 1 and outside.capture_on == [None]


def test_a_failing_capture_redirection_leaves_nothing_applied(fake_cuda, monkeypatch, tree_managers):
    """The capture record is applied last; when it fails, the stream, the SM view, the config and both
    wrapped ``__init__`` go back."""
    before = torch_state()
    patches = torch_compat.installed(strict=False)

    def refuse(device_index):
        raise RuntimeError("no managers today")

    monkeypatch.setattr(patches, "cudagraph_tree_manager", refuse)
    with pytest.raises(RuntimeError, match="no managers today"), ik.emulate_gpu(sms=40):
        pytest.fail("entered")  # pragma: no cover
    assert fake_cuda.current is fake_cuda.default_stream and capture_stream() is None
    assert sms_seen() == all_equal(PHYSICAL_SMS)
    assert_unchanged(before)


# -- 6. environment variables ----------------------------------------------------------------------


@pytest.fixture
def env_active():
    yield
    deactivate_env()


def test_env_sm_count():
    assert emulation_from_env({EMULATE_SMS_VAR: "40"}) == EmulationSpec(40)
    assert emulation_from_env({EMULATE_SMS_VAR: " 40 "}) == EmulationSpec(40)
    assert emulation_from_env({EMULATE_SMS_VAR: "40", EMULATE_SHARED_MEMORY_VAR: "65536"}) == EmulationSpec(40, 65536)


def test_env_preset():
    assert emulation_from_env({EMULATE_SMS_VAR: "T4"}) == EmulationSpec(40, 65536, "T4")
    assert emulation_from_env({EMULATE_SMS_VAR: "rtx-3070", EMULATE_SHARED_MEMORY_VAR: "32768"}) == EmulationSpec(
        46, 32768, "RTX3070"
    )


def test_env_unset():
    assert emulation_from_env({}) is None
    assert emulation_from_env({EMULATE_SMS_VAR: "  "}) is None
    assert emulation_from_env({"INDUCTOR_KNOBS_MIN_SMS": "40"}) is None


@pytest.mark.parametrize(
    ("env", "error", "match"),
    [
        ({EMULATE_SMS_VAR: "0"}, InvalidKnobValue, rf"^{EMULATE_SMS_VAR}='0': sms=0 is not allowed"),
        ({EMULATE_SMS_VAR: "-3"}, InvalidKnobValue, rf"^{EMULATE_SMS_VAR}='-3': sms=-3 is not allowed"),
        ({EMULATE_SMS_VAR: "abc"}, UnknownKnob, rf"^{EMULATE_SMS_VAR}='abc': unknown GPU preset.*T4 \(40 SMs\)"),
        ({EMULATE_SHARED_MEMORY_VAR: "65536"}, InvalidKnobValue, rf"{EMULATE_SHARED_MEMORY_VAR}='65536' needs {EMULATE_SMS_VAR}"),
        (
            {EMULATE_SMS_VAR: "40", EMULATE_SHARED_MEMORY_VAR: "lots"},
            InvalidKnobValue,
            rf"{EMULATE_SHARED_MEMORY_VAR}='lots' is not allowed.*int",
        ),
        (
            {EMULATE_SMS_VAR: "40", EMULATE_SHARED_MEMORY_VAR: "1.5"},
            InvalidKnobValue,
            rf"{EMULATE_SHARED_MEMORY_VAR}='1.5' is not allowed",
        ),
    ],
)
def test_bad_env_values_name_the_variable(env, error, match):
    with pytest.raises(error, match=match):
        emulation_from_env(env)


def test_out_of_range_shared_memory_names_its_own_variable():
    with pytest.raises(InvalidKnobValue, match=EMULATE_SHARED_MEMORY_VAR):
        emulation_from_env({EMULATE_SMS_VAR: "40", EMULATE_SHARED_MEMORY_VAR: "512"})


def test_knobs_from_env_ignores_the_emulation_variables():
    env = {EMULATE_SMS_VAR: "T4", EMULATE_SHARED_MEMORY_VAR: "65536"}
    assert Knobs.from_env(env) == Knobs()
    assert Knobs.from_env({**env, "INDUCTOR_KNOBS_MIN_SMS": "40"}) == Knobs(min_sms=40)


@needs_green_streams
def test_activate_from_env_without_a_gpu(env_active, no_cuda):
    before = torch_state()
    try:
        with pytest.raises(EmulationUnavailable, match=torch.__version__.replace("+", r"\+")):
            activate_from_env({EMULATE_SMS_VAR: "40"})
        assert active_env_knobs() is None
        with pytest.raises(EmulationUnavailable):  # and again: nothing half-activated
            activate_from_env({EMULATE_SMS_VAR: "40", "INDUCTOR_KNOBS_MIN_SMS": "40"})
        assert active_env_knobs() is None
        assert_unchanged(before)
    finally:
        deactivate_env()


def test_activate_from_env_with_a_bad_value_changes_nothing(env_active):
    before = torch_state()
    with pytest.raises(InvalidKnobValue, match=EMULATE_SMS_VAR):
        activate_from_env({EMULATE_SMS_VAR: "0", "INDUCTOR_KNOBS_MIN_SMS": "40"})
    assert active_env_knobs() is None
    assert_unchanged(before)


def test_activate_from_env_on_the_fake_gpu(env_active, fake_cuda):
    before = torch_state()
    env = {EMULATE_SMS_VAR: "T4", "INDUCTOR_KNOBS_MIN_SMS": "40"}
    try:
        assert activate_from_env(env) == Knobs(min_sms=40)
        assert active_env_knobs() == Knobs(min_sms=40)
        assert activate_from_env(env) == Knobs(min_sms=40)  # idempotent
        assert sms_seen() == all_equal(40)
        assert inductor_utils.is_big_gpu(0) is True  # 40 SMs, gate at 40
        assert torch.cuda.get_device_properties(0).shared_memory_per_block_optin == 65536
        assert fake_cuda.current is fake_cuda.green[40]
        with pytest.raises(EmulationConflict):
            with ik.emulate_gpu(sms=24):
                pytest.fail("entered")  # pragma: no cover
        with ik.emulate_gpu("T4", device=0):  # the same GPU composes
            assert sms_seen() == all_equal(40)
        assert sms_seen() == all_equal(40)
    finally:
        deactivate_env()
    assert active_env_knobs() is None
    assert fake_cuda.current is fake_cuda.default_stream
    assert sms_seen() == all_equal(PHYSICAL_SMS)
    assert_unchanged(before)


# -- 7. ablate ---------------------------------------------------------------------------------------


def plan_for(*argv: str) -> Plan:
    parser = cli.argparse.ArgumentParser()
    options.add_parser(parser.add_subparsers(dest="command"))
    return build.build_plan(parser.parse_args(["ablate", *argv]))


@pytest.fixture
def no_arm_runs(monkeypatch):
    def execute(plan):  # pragma: no cover - the point is that it is not reached
        raise AssertionError("an arm ran")

    monkeypatch.setattr(command, "execute", execute)


def test_ablate_emulation_needs_cuda(no_arm_runs):
    with pytest.raises(InvalidKnobValue, match=r"--emulate-sms='40' needs --device cuda"):
        plan_for("--emulate-sms", "40", "--device", "cpu")


def test_ablate_emulation_needs_cuda_from_the_command_line(no_arm_runs, capsys):
    assert cli.main(["ablate", "--emulate-sms", "40", "--device", "cpu"]) == 2
    assert "--device cuda" in capsys.readouterr().err


def test_ablate_unknown_preset(no_arm_runs, capsys):
    with pytest.raises(UnknownKnob, match=r"--emulate-sms='T9'.*unknown GPU preset 'T9'.*T4 \(40 SMs\)"):
        plan_for("--emulate-sms", "T9", "--device", "cpu")
    assert cli.main(["ablate", "--emulate-sms", "T9", "--device", "cpu"]) == 2
    assert "--emulate-sms" in capsys.readouterr().err


@pytest.mark.parametrize("value", ["0", "-3"])
def test_ablate_bad_sm_count(no_arm_runs, value):
    with pytest.raises(InvalidKnobValue, match=rf"--emulate-sms='{value}'.*int >= 1"):
        plan_for("--emulate-sms", value, "--device", "cpu")


def test_ablate_plan_on_the_fake_gpu(no_arm_runs, fake_cuda, transformers_present):
    plan = plan_for("--emulate-sms", "T4", "--device", "cuda")
    assert plan.emulate == "T4" and plan.device == "cuda" and plan.gpus == [0]
    assert plan.arms[-1].knobs == {"preset": "force_gemm_autotune", "min_sms": "40", "cudagraphs": "1"}  # graphs under emulation
    assert {j["emulate"] for j in plan.jobs()} == {"T4"}
    with pytest.raises(InvalidKnobValue, match=rf"allowed 1\.\.{PHYSICAL_SMS}"):
        plan_for("--emulate-sms", str(PHYSICAL_SMS + 1), "--device", "cuda")


@pytest.mark.parametrize("text", ["¹", "-²"])
def test_a_non_ascii_digit_is_not_an_sm_count(text):
    """``str.isdigit`` accepts superscripts, which ``int`` refuses: found by the env fuzz test."""
    from inductor_knobs.emulation import gpus

    with pytest.raises(ik.errors.KnobsError, match="INDUCTOR_KNOBS_EMULATE_SMS"):
        gpus.spec_from_text(text, source="INDUCTOR_KNOBS_EMULATE_SMS")
