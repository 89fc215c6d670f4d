"""Applying and reverting every knob, the gate, cache salting, and the safety checks."""

from __future__ import annotations

import asyncio
import sys
import types
import warnings

import pytest
import torch
import torch._inductor.utils as inductor_utils

import inductor_knobs as ik
from inductor_knobs.core import cutlass
from inductor_knobs.core import gate as gate_mod
from inductor_knobs.errors import (
    ExternalChangeWarning,
    InvalidKnobValue,
    KnobNotApplied,
    KnobsError,
    NoFallbackWarning,
    UnknownKnob,
)

KEYS = [
    "max_autotune",
    "max_autotune_gemm",
    "max_autotune_gemm_backends",
    "max_autotune_gemm_search_space",
    "coordinate_descent_tuning",
    "triton.cudagraphs",
    "trace.enabled",
    "trace.debug_dir",
    "epilogue_fusion",
    "fx_graph_cache",
]


def snapshot(patches, cfg):
    """The raw stored state and the effective value of every key the knobs touch."""
    state = {k: (patches.read_override(cfg, k), getattr(cfg, k)) for k in KEYS}
    if hasattr(torch.compiler, "config") and hasattr(torch.compiler.config, "cache_key_tag"):
        state["cache_key_tag"] = torch.compiler.config.cache_key_tag
    return state


@pytest.mark.parametrize(
    ("knob", "value", "key", "expected"),
    [
        ("max_autotune", True, "max_autotune", True),
        ("max_autotune_gemm", True, "max_autotune_gemm", True),
        ("gemm_backends", "aten,triton", "max_autotune_gemm_backends", "ATEN,TRITON"),
        ("gemm_search_space", "exhaustive", "max_autotune_gemm_search_space", "EXHAUSTIVE"),
        ("coordinate_descent_tuning", True, "coordinate_descent_tuning", True),
        ("cudagraphs", True, "triton.cudagraphs", True),
        ("trace", True, "trace.enabled", True),
        ("config", {"epilogue_fusion": False}, "epilogue_fusion", False),
    ],
)
def test_each_knob_applies_and_reverts_exactly(patches, cfg, knob, value, key, expected):
    before = snapshot(patches, cfg)
    with ik.knobs(**{knob: value}):
        assert getattr(cfg, key) == expected
    assert snapshot(patches, cfg) == before


def test_trace_directory_sets_debug_dir(patches, cfg, tmp_path):
    before = snapshot(patches, cfg)
    with ik.knobs(trace=tmp_path):
        assert cfg.trace.enabled is True and cfg.trace.debug_dir == str(tmp_path)
    assert snapshot(patches, cfg) == before


def test_revert_keeps_defaults_unpinned(patches, cfg):
    """torch's config.patch writes the value back as an override; knobs restore 'unset'."""
    raw_before = patches.read_override(cfg, "max_autotune")
    with ik.knobs(max_autotune=not cfg.max_autotune):
        pass
    assert patches.read_override(cfg, "max_autotune") is raw_before


def test_gate_opens_at_min_sms_and_is_restored_by_identity(fake_gpu, patches):
    fake_gpu(40)
    original = inductor_utils.is_big_gpu
    arg = 0
    assert original(arg) is False  # 40 < 68: torch's own verdict
    with ik.force_gemm_autotune(min_sms=40):
        wrapper = inductor_utils.is_big_gpu
        assert wrapper is not original and wrapper.__wrapped__ is original
        assert wrapper(arg) is True
        if patches.gate_parameters[0][1] == 0:
            assert wrapper() is True and wrapper(torch.device("cuda", 0)) is True
        with ik.knobs(min_sms=41):
            assert wrapper(arg) is False  # inner wins
        assert wrapper(arg) is True  # outer restored
    assert inductor_utils.is_big_gpu is original
    assert original(arg) is False


def test_gate_keeps_torchs_signature(patches):
    import inspect

    with ik.knobs(min_sms=1):
        params = inspect.signature(inductor_utils.is_big_gpu).parameters
        assert tuple((p.name, p.default) for p in params.values()) == patches.gate_parameters


def test_gate_cache_is_cleared_on_apply_and_revert(fake_gpu):
    fake_gpu(100)
    inductor_utils.is_big_gpu(0)
    assert inductor_utils.is_big_gpu.cache_info().currsize == 1
    with ik.knobs(min_sms=1):
        assert inductor_utils.is_big_gpu.cache_info().currsize == 0
        inductor_utils.is_big_gpu(0)
    assert inductor_utils.is_big_gpu.cache_info().currsize == 0


def test_rocm_keeps_torchs_rule_unless_asked(fake_gpu, monkeypatch):
    fake_gpu(40)
    calls = []
    monkeypatch.setattr(torch.version, "hip", "6.2")
    with ik.knobs(min_sms=1):
        wrapped = inductor_utils.is_big_gpu.__wrapped__
        monkeypatch.setattr(inductor_utils.is_big_gpu, "__wrapped__", wrapped)  # sanity: proxy intact
        gate_mod._STATE.original = lambda *a, **k: calls.append(a) or False  # observe delegation
        try:
            assert gate_mod._gate(gate_mod._STATE.original, None, (0,), {}) is False
            assert calls
        finally:
            gate_mod._STATE.original = wrapped
    with ik.knobs(min_sms=1, gate_rocm_xpu=True):
        assert inductor_utils.is_big_gpu(0) is True


def test_modules_that_bound_the_gate_by_name_are_handled(fake_gpu):
    fake_gpu(40)
    user = types.ModuleType("user_code_with_alias")
    exec("from torch._inductor.utils import is_big_gpu", user.__dict__)
    sys.modules[user.__name__] = user
    try:
        original = user.is_big_gpu
        with ik.knobs(min_sms=40):
            assert user.is_big_gpu is inductor_utils.is_big_gpu and user.is_big_gpu(0) is True
            late = types.ModuleType("imported_inside_block")
            exec("from torch._inductor.utils import is_big_gpu", late.__dict__)
            sys.modules[late.__name__] = late
        assert user.is_big_gpu is original and late.is_big_gpu is original
    finally:
        sys.modules.pop("user_code_with_alias", None)
        sys.modules.pop("imported_inside_block", None)


@pytest.fixture
def cache_keys(monkeypatch, fresh_inductor):
    """The ``cache_key_tag`` of every FX graph and AOTAutograd cache key torch computes, read as torch reads it.

    ``FxGraphHashDetails.__init__`` (``_inductor/codecache.py``) holds what the FX graph cache key
    hashes; ``AOTAutogradCacheDetails`` calls it too.  On 2.4-2.5 (no ``cache_key_tag``) the salt is
    the FX graph cache switched off: no key is computed at all, so nothing is recorded.
    """
    from torch._inductor import codecache

    seen: list[str | None] = []
    original = codecache.FxGraphHashDetails.__init__

    def spy(self, *args, **kwargs):
        original(self, *args, **kwargs)
        seen.append(getattr(self, "cache_key_tag", None))

    monkeypatch.setattr(codecache.FxGraphHashDetails, "__init__", spy)
    with torch._inductor.config.patch(fx_graph_cache=True):
        yield seen


def _compile_step(scale):
    """A fresh compiled function (its own code object, so nothing is reused) and inputs that need a backward."""
    namespace = {}
    exec(f"def step(x, w):\n    return ((x @ w) * {scale}).relu().sum()", namespace)
    return torch.compile(namespace["step"], backend="inductor"), torch.randn(8, 8, requires_grad=True), torch.randn(8, 8)


def test_every_cache_key_computed_under_a_gate_override_is_salted(patches, cfg, cache_keys):
    salted_on = patches.cache_salt("x")[0][1] == "cache_key_tag"  # 2.6+; 2.4-2.5 switch the cache off
    before = snapshot(patches, cfg)
    step, x, w = _compile_step(1)
    step(x, w).backward()
    outside = list(cache_keys)
    assert outside and not any("inductor_knobs" in (tag or "") for tag in outside)  # the spy sees keys
    cache_keys.clear()
    step, x, w = _compile_step(2)
    with ik.knobs(min_sms=40):
        loss = step(x, w)
        assert snapshot(patches, cfg) == before  # the salt is written by the compile, for the compile
        inner_step, ix, iw = _compile_step(3)
        with ik.knobs(min_sms=41):
            inner_step(ix, iw).backward()
    loss.backward()  # compiled lazily, after the block exited: salted all the same
    if not salted_on:
        assert cache_keys == []
        return
    assert len(cache_keys) == 2 * len(outside)  # every key of both functions (AOTAutograd, forward, backward)
    gate_tags = {tag.rsplit("+", 1)[-1] for tag in cache_keys}
    assert all(tag.startswith("inductor_knobs-gate-") for tag in gate_tags) and len(gate_tags) == 2
    assert snapshot(patches, cfg) == before


def test_env_activation_salts_every_cache_key_on_every_thread(patches, cache_keys):
    """INDUCTOR_KNOBS_MIN_SMS: the process layer asks for the salt, and a compile on another thread carries it."""
    import concurrent.futures

    salted_on = patches.cache_salt("x")[0][1] == "cache_key_tag"
    user_tag = torch.compiler.config.cache_key_tag if salted_on else None
    ik.activate_from_env({"INDUCTOR_KNOBS_MIN_SMS": "40"})
    try:
        step, x, w = _compile_step(5)
        step(x, w).backward()
        other, ox, ow = _compile_step(6)
        with concurrent.futures.ThreadPoolExecutor(1) as pool:
            pool.submit(lambda: other(ox, ow).backward()).result()
        if salted_on:
            assert torch.compiler.config.cache_key_tag == user_tag  # written only around compiles
    finally:
        ik.deactivate_env()
    if not salted_on:
        assert cache_keys == []
        return
    assert len(cache_keys) >= 4 and all(tag.startswith("inductor_knobs-gate-") for tag in cache_keys)


def test_user_cache_key_tag_is_kept(patches, cache_keys):
    if patches.cache_salt("x")[0][1] != "cache_key_tag":
        pytest.skip("torch < 2.6 has no cache_key_tag")
    step, x, w = _compile_step(4)
    with torch.compiler.config.patch(cache_key_tag="mine"), ik.knobs(min_sms=40):
        step(x, w).backward()
        assert torch.compiler.config.cache_key_tag == "mine"
    assert cache_keys and all(tag.startswith("mine+inductor_knobs-gate-") for tag in cache_keys)


def test_revert_on_exception_and_keyboard_interrupt(patches, cfg, fake_gpu):
    fake_gpu(40)
    before, gate = snapshot(patches, cfg), inductor_utils.is_big_gpu
    for exc in (RuntimeError("boom"), KeyboardInterrupt()):
        with pytest.raises(type(exc)), ik.force_gemm_autotune(min_sms=40, cudagraphs=True):
            raise exc
        assert snapshot(patches, cfg) == before and inductor_utils.is_big_gpu is gate


@pytest.fixture
def no_pip_cutlass(monkeypatch):
    """These tests are about a CUTLASS that cannot be found: hide an installed nvidia-cutlass
    (the ``[cutlass]`` extra), which inductor_knobs would otherwise use."""
    monkeypatch.setattr(cutlass, "find_distribution", lambda: None)


@pytest.mark.parametrize(
    ("kwargs", "exc", "match"),
    [
        ({"config": {"epilogue_fusio": False}}, UnknownKnob, "did you mean 'epilogue_fusion'"),
        ({"config": {"epilogue_fusion": "no"}}, InvalidKnobValue, "allowed a bool"),
        ({"config": {"max_autotune_gemm": True}, "max_autotune_gemm": False}, InvalidKnobValue, "conflicts"),
        ({"gemm_backends": "ATEN,CUTLASS", "config": {}}, InvalidKnobValue, "CUTLASS"),
    ],
)
@pytest.mark.usefixtures("no_pip_cutlass")
def test_bad_input_leaves_nothing_applied(patches, cfg, kwargs, exc, match):
    before, gate = snapshot(patches, cfg), inductor_utils.is_big_gpu
    with pytest.raises(exc, match=match), ik.knobs(min_sms=40, cudagraphs=True, **kwargs):
        pass
    assert snapshot(patches, cfg) == before and inductor_utils.is_big_gpu is gate


@pytest.mark.usefixtures("no_pip_cutlass")
def test_cutlass_error_says_how_to_fix(patches):
    import torch

    with pytest.raises(InvalidKnobValue) as err, ik.knobs(gemm_backends="ATEN,CUTLASS"):
        pass
    assert "git clone https://github.com/NVIDIA/cutlass" in str(err.value) and torch.__version__ in str(err.value)


def test_cutlass_with_a_real_looking_dir_is_accepted(tmp_path, patches):
    import torch

    from inductor_knobs.core.torch_compat import release_of

    (tmp_path / "python" / "cutlass_library").mkdir(parents=True)
    key = patches.cutlass_dir_key(release_of(torch.__version__))
    with ik.knobs(gemm_backends="ATEN,CUTLASS", config={key: str(tmp_path)}):
        pass


def test_dropping_aten_warns():
    with pytest.warns(NoFallbackWarning, match="no fallback"), ik.knobs(gemm_backends="TRITON"):
        pass


def test_half_applied_failure_rolls_back(patches, cfg, monkeypatch):
    """A failure after some records applied reverts them (all or nothing)."""
    before = snapshot(patches, cfg)
    real = gate_mod.GateChange.apply

    def failing_apply(self):
        raise RuntimeError("gate install failed")

    monkeypatch.setattr(gate_mod.GateChange, "apply", failing_apply)
    with pytest.raises(RuntimeError, match="gate install failed"), ik.knobs(max_autotune=True, cudagraphs=True, min_sms=40):
        pass
    monkeypatch.setattr(gate_mod.GateChange, "apply", real)
    assert snapshot(patches, cfg) == before


def test_value_forced_by_env_raises_knob_not_applied(patches, cfg, monkeypatch):
    entry = cfg._config["fx_graph_cache"]
    if not hasattr(entry, "env_value_force"):
        pytest.skip("env_name_force arrived in torch 2.7")
    from torch.utils._config_module import _UNSET_SENTINEL

    monkeypatch.setenv("TORCHINDUCTOR_FX_GRAPH_CACHE", "1")
    monkeypatch.setattr(entry, "env_value_force", True)
    assert entry.env_value_force is not _UNSET_SENTINEL
    before = snapshot(patches, cfg)
    with (
        pytest.raises(KnobNotApplied, match="TORCHINDUCTOR_FX_GRAPH_CACHE"),
        ik.knobs(cudagraphs=True, config={"fx_graph_cache": False}),
    ):
        pass
    assert snapshot(patches, cfg) == before


def test_change_by_someone_else_inside_the_block_is_reported(patches, cfg):
    before = snapshot(patches, cfg)
    with pytest.warns(ExternalChangeWarning, match="max_autotune"), ik.knobs(max_autotune=True):
        cfg.max_autotune = False
    assert snapshot(patches, cfg) == before


def test_decorator_start_stop_and_reentrancy(patches, cfg):
    before = snapshot(patches, cfg)
    ctx = ik.knobs(cudagraphs=True)

    @ctx
    def recurse(n):
        assert cfg.triton.cudagraphs is True
        return recurse(n - 1) if n else "done"

    assert recurse(3) == "done"
    assert snapshot(patches, cfg) == before
    ctx.start()
    assert cfg.triton.cudagraphs is True
    ctx.stop()
    with pytest.raises(KnobsError, match="not active here"):  # a stop without a matching start is an error
        ctx.stop()
    assert snapshot(patches, cfg) == before
    with pytest.raises(KnobsError, match="not active here"):
        ctx.__exit__(None, None, None)


def test_async_decorator(patches, cfg):
    before = snapshot(patches, cfg)

    @ik.knobs(max_autotune_gemm=True)
    async def job():
        await asyncio.sleep(0)
        return cfg.max_autotune_gemm

    assert asyncio.run(job()) is True
    assert snapshot(patches, cfg) == before


def test_creating_knobs_imports_nothing_from_inductor():
    import subprocess

    code = (
        "import sys, inductor_knobs as ik\n"
        "ctx = ik.force_gemm_autotune(min_sms=40)\n"
        "print('torch' in sys.modules, any(m.startswith('torch._inductor') for m in sys.modules))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, env=_clean_env())
    assert out.stdout.split() == ["False", "False"]


def _clean_env():
    import os

    return {k: v for k, v in os.environ.items() if not k.startswith("INDUCTOR_KNOBS_")}


def test_no_warnings_on_a_clean_apply(fake_gpu):
    fake_gpu(40)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        warnings.filterwarnings("ignore", message="Failed to initialize NumPy")
        with ik.force_gemm_autotune(min_sms=40):
            pass


def test_the_config_hash_that_caches_key_on_sees_the_block_and_its_exit(patches, cfg):
    """``get_hash()`` is what Inductor's FX graph cache keys on; torch caches it until a write marks it
    dirty (torch marks it itself from 2.13; before, the raw write that reverts exactly does not)."""
    before = cfg.get_hash()
    with ik.knobs(coordinate_descent_tuning=not cfg.coordinate_descent_tuning):
        inside = cfg.get_hash()
    assert inside != before
    assert cfg.get_hash() == before
