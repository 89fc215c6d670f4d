"""Knobs: validation, env parsing, identity."""

from __future__ import annotations

import pytest

from inductor_knobs import Knobs
from inductor_knobs.errors import InvalidKnobValue, KnobsError, UnknownKnob

BAD = [
    ("min_sms", 0),
    ("min_sms", 1025),
    ("min_sms", 40.0),
    ("min_sms", True),
    ("min_sms", "40"),
    ("gate_rocm_xpu", 1),
    ("max_autotune", "true"),
    ("max_autotune_gemm", 1),
    ("gemm_backends", "ATEN,FOO"),
    ("gemm_backends", ""),
    ("gemm_backends", 3),
    ("gemm_search_space", "FAST"),
    ("gemm_search_space", 1),
    ("coordinate_descent_tuning", None or "no"),
    ("cudagraphs", 0),
    ("trace", 3),
    ("trace", ""),
    ("config", ["epilogue_fusion"]),
    ("config", {"": 1}),
    ("strict", "yes"),
]


@pytest.mark.parametrize(("name", "value"), BAD)
def test_bad_values_name_the_knob_value_and_torch_version(name, value):
    import torch

    with pytest.raises(InvalidKnobValue) as err:
        Knobs(**{name: value})
    message = str(err.value)
    assert name in message and repr(value) in message and torch.__version__ in message and "allowed" in message
    assert isinstance(err.value, KnobsError) and isinstance(err.value, ValueError)


def test_normalisation():
    k = Knobs(gemm_backends=["triton", " aten", "TRITON"], gemm_search_space="exhaustive")
    assert k.gemm_backends == "TRITON,ATEN" and k.gemm_search_space == "EXHAUSTIVE"


def test_frozen_hashable_and_digest_is_stable():
    a = Knobs(min_sms=40, config={"epilogue_fusion": False, "triton.cudagraphs": False})
    b = Knobs(min_sms=40, config={"triton.cudagraphs": False, "epilogue_fusion": False})
    assert a == b and hash(a) == hash(b) and a.digest() == b.digest()
    assert a.digest() != Knobs(min_sms=41).digest()
    assert len({a, b}) == 1
    with pytest.raises(AttributeError):
        a.min_sms = 1  # type: ignore[misc]


def test_unhashable_config_values_still_hash():
    assert hash(Knobs(config={"some.list": [1, 2]}))


def test_to_dict_round_trip():
    k = Knobs(min_sms=40, cudagraphs=False, config={"epilogue_fusion": False}, strict=False)
    assert Knobs(**k.to_dict()) == k
    assert k.to_dict() == {"min_sms": 40, "cudagraphs": False, "config": {"epilogue_fusion": False}, "strict": False}


def test_unknown_knob_suggests():
    with pytest.raises(UnknownKnob, match="did you mean 'min_sms'"):
        Knobs.from_kwargs(min_sm=40)


def test_from_env_every_knob():
    env = {
        "INDUCTOR_KNOBS_MIN_SMS": "40",
        "INDUCTOR_KNOBS_GATE_ROCM_XPU": "no",
        "INDUCTOR_KNOBS_MAX_AUTOTUNE": "1",
        "INDUCTOR_KNOBS_MAX_AUTOTUNE_GEMM": "TRUE",
        "INDUCTOR_KNOBS_GEMM_BACKENDS": "aten,triton",
        "INDUCTOR_KNOBS_GEMM_SEARCH_SPACE": "exhaustive",
        "INDUCTOR_KNOBS_COORDINATE_DESCENT_TUNING": "off",
        "INDUCTOR_KNOBS_CUDAGRAPHS": "0",
        "INDUCTOR_KNOBS_TRACE": "/tmp/ik-trace",
        "INDUCTOR_KNOBS_CONFIG": '{"epilogue_fusion": false}',
        "INDUCTOR_KNOBS_STRICT": "0",
        "UNRELATED": "x",
    }
    assert Knobs.from_env(env) == Knobs(
        min_sms=40,
        gate_rocm_xpu=False,
        max_autotune=True,
        max_autotune_gemm=True,
        gemm_backends="ATEN,TRITON",
        gemm_search_space="EXHAUSTIVE",
        coordinate_descent_tuning=False,
        cudagraphs=False,
        trace="/tmp/ik-trace",
        config={"epilogue_fusion": False},
        strict=False,
    )


def test_preset_supplies_defaults_that_variables_override():
    k = Knobs.from_env({"INDUCTOR_KNOBS_PRESET": "force_gemm_autotune", "INDUCTOR_KNOBS_MIN_SMS": "40"})
    assert k == Knobs(min_sms=40, max_autotune_gemm=True, gemm_backends="ATEN,TRITON")


@pytest.mark.parametrize(
    ("var", "value", "exc"),
    [
        ("INDUCTOR_KNOBS_MIN_SMS", "forty", InvalidKnobValue),
        ("INDUCTOR_KNOBS_MIN_SMS", "0", InvalidKnobValue),
        ("INDUCTOR_KNOBS_CUDAGRAPHS", "maybe", InvalidKnobValue),
        ("INDUCTOR_KNOBS_MAX_AUTOTUNE", "2", InvalidKnobValue),
        ("INDUCTOR_KNOBS_GEMM_BACKENDS", "ATEN,NOPE", InvalidKnobValue),
        ("INDUCTOR_KNOBS_GEMM_SEARCH_SPACE", "FAST", InvalidKnobValue),
        ("INDUCTOR_KNOBS_CONFIG", "{not json", InvalidKnobValue),
        ("INDUCTOR_KNOBS_CONFIG", "[1]", InvalidKnobValue),
        ("INDUCTOR_KNOBS_PRESET", "turbo", UnknownKnob),
        ("INDUCTOR_KNOBS_MIN_SM", "40", UnknownKnob),
    ],
)
def test_bad_env_names_the_variable_and_value(var, value, exc):
    with pytest.raises(exc) as err:
        Knobs.from_env({var: value})
    assert var in str(err.value) or value in str(err.value)
    assert var in str(err.value)


def test_merged_takes_the_other_side():
    merged = Knobs(min_sms=40, config={"a": 1}).merged(Knobs(cudagraphs=False, config={"b": 2}))
    assert merged == Knobs(min_sms=40, cudagraphs=False, config={"a": 1, "b": 2})


@pytest.mark.parametrize("other", [Knobs(trace=False), Knobs(config={"trace.enabled": False})])
def test_merged_trace_turned_off_turns_the_caches_back_on(other):
    """``ik.knobs(Knobs(trace="/d"), trace=False)``: the cache bypass goes with trace.enabled, which the keywords set."""
    from inductor_knobs.core.plan import config_values

    values = config_values(Knobs(trace="/tmp/trace").merged(other))
    assert values.get("trace.enabled") is False and "force_disable_caches" not in values, values


# A good value of the same knob is built first, so a cache of validated keywords that equates
# ``1 == True`` or ``40 == 40.0`` (they hash alike) would hand it back instead of refusing.
@pytest.mark.parametrize(
    ("good", "bad"),
    [
        ({"coordinate_descent_tuning": True}, {"coordinate_descent_tuning": 1}),
        ({"max_autotune_gemm": False}, {"max_autotune_gemm": 0}),
        ({"min_sms": 40}, {"min_sms": 40.0}),
        ({"min_sms": 1}, {"min_sms": True}),
    ],
)
def test_a_bad_value_equal_to_a_good_one_is_still_refused_by_knobs_and_force_gemm_autotune(good, bad):
    import inductor_knobs as ik

    ik.knobs(**good)
    with pytest.raises(InvalidKnobValue, match=next(iter(bad))):
        ik.knobs(**bad)
    ik.force_gemm_autotune(**good)
    with pytest.raises(InvalidKnobValue, match=next(iter(bad))):
        ik.force_gemm_autotune(**bad)
