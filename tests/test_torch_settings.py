"""The sdpa_backends and tunableop knobs: read through torch's own API inside the block, inside Inductor's
compile, and after every exit; validated before anything changes."""

from __future__ import annotations

import threading
import warnings

import pytest
import torch
from conftest import inside_compile
from torch.nn.attention import SDPBackend, sdpa_kernel

import inductor_knobs as ik
from inductor_knobs.core import torch_compat
from inductor_knobs.env import activate_from_env, deactivate_env

WORDS = {"FLASH_ATTENTION": "flash", "EFFICIENT_ATTENTION": "mem_efficient", "CUDNN_ATTENTION": "cudnn", "MATH": "math"}


def sdpa_state():
    """What torch itself reports: each backend's flag, and its priority order where it has one."""
    flags = {name: getattr(torch._C, f"_get_{word}_sdp_enabled")() for name, word in WORDS.items()}
    order = torch._C._get_sdp_priority_order() if hasattr(torch._C, "_get_sdp_priority_order") else None
    return flags, order


@pytest.fixture(autouse=True)
def _sdpa_as_found():
    before = sdpa_state()
    yield
    assert sdpa_state() == before, "a test left the SDPA backends changed"


def _attention(q):
    return torch.nn.functional.scaled_dot_product_attention(q, q, q)


def test_inside_the_block_torch_has_exactly_those_backends_in_that_order_and_after_it_what_it_had():
    before = sdpa_state()
    with ik.knobs(sdpa_backends="math, flash_attention") as knobs:
        flags, order = sdpa_state()
        assert knobs.sdpa_backends == "MATH,FLASH_ATTENTION"
        assert flags == {"FLASH_ATTENTION": True, "EFFICIENT_ATTENTION": False, "CUDNN_ATTENTION": False, "MATH": True}
        if order is not None:
            assert order[:2] == [int(SDPBackend.MATH), int(SDPBackend.FLASH_ATTENTION)]
    assert sdpa_state() == before


def test_attested_inside_inductors_compile(monkeypatch, fresh_inductor):
    seen = inside_compile(monkeypatch, sdpa_state)
    with ik.record_compiles() as rec, ik.knobs(sdpa_backends=[SDPBackend.EFFICIENT_ATTENTION, SDPBackend.MATH]):
        torch.compile(_attention)(torch.randn(1, 2, 8, 4))
    (flags, _), *_ = seen
    assert flags["EFFICIENT_ATTENTION"] and flags["MATH"] and not flags["FLASH_ATTENTION"] and not flags["CUDNN_ATTENTION"]
    (attested,) = rec.attestations
    assert attested.value("sdpa_backends") == "EFFICIENT_ATTENTION,MATH" and attested.ok


def test_changed_by_sdpa_kernel_before_the_compile_is_a_knob_not_applied(fresh_inductor):
    with pytest.raises(ik.KnobNotApplied, match=r"sdpa_backends='MATH' .* did not take effect.*sdpa_kernel"):
        with ik.knobs(sdpa_backends="MATH"), sdpa_kernel([SDPBackend.MATH, SDPBackend.FLASH_ATTENTION]):
            torch.compile(_attention)(torch.randn(1, 2, 8, 4))


def test_a_change_inside_the_block_warns_and_is_undone():
    before = sdpa_state()
    # Without a priority order (torch < 2.6) the value read back lists the enabled backends in a fixed order.
    found = "MATH,FLASH_ATTENTION" if before[1] is not None else "FLASH_ATTENTION,MATH"
    with pytest.warns(ik.errors.ExternalChangeWarning, match=f"sdpa_backends was changed to '{found}'"):
        with ik.knobs(sdpa_backends="MATH"):
            torch.backends.cuda.enable_flash_sdp(True)
    assert sdpa_state() == before


def test_exception_and_out_of_order_exits_restore_it():
    before = sdpa_state()
    with pytest.raises(ZeroDivisionError), ik.knobs(sdpa_backends="MATH"):
        1 / 0  # noqa: B018
    assert sdpa_state() == before
    a, b = ik.knobs(sdpa_backends="MATH"), ik.knobs(sdpa_backends="EFFICIENT_ATTENTION,MATH")
    a.start()
    b.start()
    a.stop()  # b is re-applied on what is left: its own backends
    assert sdpa_state()[0]["EFFICIENT_ATTENTION"] and not sdpa_state()[0]["FLASH_ATTENTION"]
    b.stop()
    assert sdpa_state() == before


def test_a_second_thread_is_refused_while_one_holds_it(patches):
    if not patches.config_is_thread_local:
        pytest.skip("before torch 2.12 every knobs block is refused in a second thread (test_threads)")
    errors = []
    with ik.knobs(sdpa_backends="MATH"):
        inside = sdpa_state()

        def other():
            try:
                with ik.knobs(sdpa_backends="FLASH_ATTENTION"):
                    pass
            except ik.errors.ConcurrentKnobsError as err:
                errors.append(str(err))
            errors.append(sdpa_state())

        thread = threading.Thread(target=other)
        thread.start()
        thread.join()
        assert sdpa_state() == inside
    assert "torch keeps it once per process" in errors[0] and errors[1] == inside


@pytest.mark.parametrize("value", ["FLASH", "", [], 3, "MATH,ERROR"])
def test_a_bad_backend_name_is_refused(value):
    with pytest.raises(ik.errors.InvalidKnobValue, match=r"sdpa_backends=.* is invalid on torch .*: allowed a non-empty list of"):
        ik.knobs(sdpa_backends=value)


def test_a_backend_this_torch_lacks_is_refused_at_enter_with_nothing_applied(monkeypatch, cfg):
    patches = type(torch_compat.installed())
    monkeypatch.setattr(patches, "sdpa_backends_here", lambda self: ["FLASH_ATTENTION", "EFFICIENT_ATTENTION", "MATH"])
    before = cfg.coordinate_descent_tuning
    with pytest.raises(
        ik.errors.InvalidKnobValue,
        match=r"sdpa_backends='CUDNN_ATTENTION' is invalid on torch .*not in this torch",
    ):
        with ik.knobs(sdpa_backends="CUDNN_ATTENTION", coordinate_descent_tuning=not before):
            pass
    assert cfg.coordinate_descent_tuning == before


def test_env_activation(monkeypatch, fresh_inductor):
    before = sdpa_state()
    seen = inside_compile(monkeypatch, sdpa_state)
    monkeypatch.setenv("INDUCTOR_KNOBS_SDPA_BACKENDS", "efficient_attention,math")
    activate_from_env()
    try:
        assert sdpa_state()[0] == {"FLASH_ATTENTION": False, "EFFICIENT_ATTENTION": True, "CUDNN_ATTENTION": False, "MATH": True}
        torch.compile(_attention)(torch.randn(1, 2, 8, 4))  # the path a launch script takes: no block, a compile
    finally:
        deactivate_env()
    (flags, _), *_ = seen  # read inside Inductor's compile
    assert flags == {"FLASH_ATTENTION": False, "EFFICIENT_ATTENTION": True, "CUDNN_ATTENTION": False, "MATH": True}
    assert sdpa_state() == before


@pytest.fixture
def fake_tunableop(monkeypatch):
    """A CPU build has no TunableOp: give torch._C the two functions torch.cuda.tunable calls."""
    state = {"enabled": False}
    monkeypatch.setattr(torch._C, "_cuda_tunableop_enable", lambda v: state.update(enabled=v), raising=False)
    monkeypatch.setattr(torch._C, "_cuda_tunableop_is_enabled", lambda: state["enabled"], raising=False)
    return state


def test_tunableop_knob(fake_tunableop):
    with ik.knobs(tunableop=True):
        assert torch.cuda.tunable.is_enabled() is True
    assert torch.cuda.tunable.is_enabled() is False


def test_tunableop_on_a_build_without_it_is_refused_with_nothing_applied(cfg):
    if hasattr(torch._C, "_cuda_tunableop_enable"):
        pytest.skip("this torch build has TunableOp")
    before = sdpa_state()
    with pytest.raises(ik.errors.NotSupportedOnThisTorch, match=r"tunableop=True cannot be set on torch .*CPU-only build"):
        with ik.knobs(sdpa_backends="MATH", tunableop=True):
            pass
    assert sdpa_state() == before


def test_doctor_shows_the_backends():
    from inductor_knobs.serving import first_call_costs

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        section = first_call_costs.doctor_section()
    assert section["sdpa"]["enabled"]
    assert "SDPA backends enabled, in priority order" in "\n".join(first_call_costs.render_doctor_section(section))
