"""ik.serving.warmup's probes and cold report, and the bucket helpers it recommends."""

from __future__ import annotations

import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import inductor_knobs as ik
from inductor_knobs.core.events import RuntimeEvent
from inductor_knobs.serving import warm_up as serving
from inductor_knobs.serving.warm_up_report import WarmupStep


def _step(index, shape, first_ms, last_ms, *kinds):
    causes = [RuntimeEvent(kind, first_ms / 1000, "", None) for kind in kinds]
    return WarmupStep(index, [f"torch.int64[1, {shape}]"], first_ms / 1000, last_ms / 1000, causes=causes, shape=shape)


def test_probes_default_to_the_middle_of_the_largest_gaps():
    assert serving._probe_shapes("auto", [128, 512, 1024, 2048]) == [321, 769, 1537]
    assert serving._probe_shapes("auto", [560]) == []  # one shape: no gap to probe
    assert serving._probe_shapes("auto", ["a", "b"]) == []  # not ints: no guess
    assert serving._probe_shapes(None, [1, 9]) == [] and serving._probe_shapes([7], [1, 9]) == [7]
    with pytest.raises(ik.errors.InvalidKnobValue, match="probes='some'"):
        serving._probe_shapes("some", [1, 9])


def test_a_per_shape_cost_at_the_probes_is_reported_cold_with_the_fixes():
    steps = [_step(i, n, 60.0, 1.0) for i, n in enumerate((128, 512, 1024, 2048))]
    probes = [_step(0, 321, 52.0, 1.0, "cudnn_sdpa_plan"), _step(1, 769, 1.2, 1.0), _step(2, 1537, 49.0, 1.1, "cudnn_sdpa_plan")]
    cold, fixes, buckets = serving._cold(steps, probes, steady_ms=1.0)
    (cause,) = cold
    assert cause.kind == "cudnn_sdpa_plan"
    assert cause.cold_shapes == 2048 - 128 + 1 - 4
    assert [p[0] for p in cause.probes] == [321, 1537]  # 769 cost 1.2x: warm enough
    assert "1,917 shapes in [128, 2048] are cold" in cause.text and "52.0x" in cause.text
    assert buckets == ik.serving.suggest_buckets(128, 2048)
    assert fixes[0].startswith("pad each request to a bucket") and "buckets=[128, 256," in fixes[0]
    assert any("sdpa_backends='FLASH_ATTENTION,EFFICIENT_ATTENTION,MATH'" in f for f in fixes)


def test_fast_probes_mean_nothing_is_cold():
    steps = [_step(0, 128, 60.0, 1.0), _step(1, 2048, 60.0, 1.0)]
    assert serving._cold(steps, [_step(0, 1089, 1.5, 1.0)], steady_ms=1.0) == ([], [], None)


def test_a_slow_probe_with_no_named_cause_is_cold_and_unattributed():
    steps = [_step(0, 128, 60.0, 1.0), _step(1, 2048, 60.0, 1.0)]
    (cause,), fixes, _ = serving._cold(steps, [_step(0, 1089, 30.0, 1.0)], steady_ms=1.0)
    assert cause.kind == "unattributed" and fixes


def test_warmup_reports_probes_steady_state_and_first_call_causes(fresh_inductor):
    weight = torch.randn(4, 16, 8)

    def f(x):
        return torch.bmm(x, weight).relu()

    def make(n):
        x = torch.randn(4, n, 16)
        torch._dynamo.mark_dynamic(x, 1)
        return x

    report = ik.serving.warmup(torch.compile(f), shapes=[8, 40], factory=make)
    assert [s.shape for s in report.steps] == [8, 40] and [p.shape for p in report.probes] == [25]
    assert report.steps[0].causes[0].kind == "dynamo_compile"  # the first call compiled, timed by its hook
    assert report.steady_state_ms is not None and report.steady_state_ms > 0
    text = report.table()
    assert "probe torch.float32[4, 25, 16]" in text and "steady state:" in text
    assert report.to_dict()["probes"][0]["shape"] == 25


def test_probes_need_a_factory():
    with pytest.raises(ik.errors.InvalidKnobValue, match=r"needs shapes=\.\.\. with factory"):
        ik.serving.warmup(lambda x: x, inputs=[torch.ones(2)], probes=[3])


@pytest.mark.parametrize("buckets", [[], [4, 2], [2, 2], [0, 4], [1.5, 4], [True, 4], "ab", 7])
def test_bad_buckets_are_refused_naming_the_value(buckets):
    with pytest.raises(ik.errors.InvalidKnobValue, match=r"buckets=.* is invalid on torch .*strictly increasing"):
        ik.serving.bucket_for(3, buckets)


def test_bucket_for_and_pad_to_bucket():
    assert ik.serving.bucket_for(1, [4, 8]) == 4 and ik.serving.bucket_for(5, [4, 8]) == 8
    with pytest.raises(ik.errors.InvalidKnobValue, match="at most the largest bucket, 8"):
        ik.serving.bucket_for(9, [4, 8])
    with pytest.raises(ik.errors.InvalidKnobValue, match="length=0"):
        ik.serving.bucket_for(0, [4, 8])
    ids = torch.arange(1, 6).reshape(1, 5)
    padded = ik.serving.pad_to_bucket(ids, [4, 8], dim=1, value=0)
    assert padded.tolist() == [[1, 2, 3, 4, 5, 0, 0, 0]]
    assert ik.serving.pad_to_bucket(torch.ones(3, 4), [4], dim=1) is not None and ik.serving.pad_to_bucket(
        torch.ones(3, 4), [4]
    ).shape == (3, 4)
    assert ik.serving.pad_to_bucket(torch.ones(3, 2), [4, 8], dim=0).shape == (4, 2)


@settings(deadline=None, suppress_health_check=[HealthCheck.too_slow])  # no wall-clock limits: a busy machine is not a failure
@given(st.integers(1, 5000), st.integers(0, 5000), st.integers(1, 64))
def test_suggested_buckets_cover_the_range(low, width, count):
    high = low + width
    buckets = ik.serving.suggest_buckets(low, high, count=count)
    assert ik.serving.buckets.check_buckets(buckets) == buckets
    assert all(b % 8 == 0 for b in buckets[:-1]) and (buckets[-1] % 8 == 0 or buckets[-1] == high)
    assert buckets[0] >= low and buckets[-1] == high  # no bucket beyond the largest size the model accepts
    assert ik.serving.bucket_for(low, buckets) <= ik.serving.bucket_for(high, buckets)
    step = buckets[1] - buckets[0] if len(buckets) > 1 else 0
    assert all(b - a <= step for a, b in zip(buckets, buckets[1:]))
    assert len(buckets) <= count + 2


def test_suggest_buckets_of_the_serving_range():
    assert ik.serving.suggest_buckets(128, 2048) == tuple(range(128, 2049, 128))


def test_suggested_buckets_end_at_the_largest_size_the_model_accepts():
    # A model that accepts at most 100 positions: a bucket of 104 would pad requests beyond it.
    assert ik.serving.suggest_buckets(1, 100)[-1] == 100
    assert ik.serving.suggest_buckets(100, 100) == (100,)
    assert ik.serving.suggest_buckets(56, 204)[-2:] == (200, 204)
    with pytest.raises(ik.errors.InvalidKnobValue, match=r"suggest_buckets\(low=9, high=3"):
        ik.serving.suggest_buckets(9, 3)
