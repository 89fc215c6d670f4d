"""The two validation caches earn their place: a block written in a loop validates once.

Entering and leaving ``ik.knobs(...)`` costs about what ``config.patch`` of the same keys costs because the
keywords are checked once per distinct call (``blocks._KNOBS_BY_KWARGS``) and a ``Knobs`` is validated against the
live torch once (``plan._VALIDATED``); without them a block's enter + exit costs several times more
(``bench/overhead.py`` measures the ratio to ``config.patch``).  These tests count the validations, not the time.
"""

from __future__ import annotations

import inductor_knobs as ik
from inductor_knobs.core import blocks, plan
from inductor_knobs.core.knobs import Knobs


def test_a_block_written_in_a_loop_checks_its_keywords_once(monkeypatch):
    monkeypatch.setattr(blocks, "_KNOBS_BY_KWARGS", {})
    calls = []
    real = Knobs.from_kwargs.__func__

    def counting(cls, **kwargs):
        calls.append(kwargs)
        return real(cls, **kwargs)

    monkeypatch.setattr(Knobs, "from_kwargs", classmethod(counting))
    for _ in range(5):
        with ik.knobs(coordinate_descent_tuning=True):
            pass
        with ik.force_gemm_autotune(min_sms=40):
            pass
    assert len(calls) == 2, calls
    # A value of another type is another key: 1 is not True, and it is refused, not served from the cache.
    try:
        ik.knobs(coordinate_descent_tuning=1)
    except ik.errors.InvalidKnobValue:
        pass
    else:
        raise AssertionError("coordinate_descent_tuning=1 was accepted")


def test_one_knobs_entered_again_is_validated_against_torch_once(monkeypatch):
    monkeypatch.setattr(plan, "_VALIDATED", {})
    validations = []
    real = plan._validate

    def counting(*args, **kwargs):
        validations.append(args[0])
        return real(*args, **kwargs)

    monkeypatch.setattr(plan, "_validate", counting)
    block = ik.knobs(coordinate_descent_tuning=True, min_sms=40)
    for _ in range(5):
        with block:
            pass
    assert len(validations) == 1, validations
