"""Regression tests for six precedence/identity defects found on torch 2.13.

Every check of what Inductor compiles with reads torch's config *inside* the compile (a spy on
``GraphLowering.__init__``, or ``ik.record_compiles()`` attestations, which read the config inside
``compile_fx_inner``), or torch's raw config entries (``cfg._config[key]``), never only the
library's own bookkeeping.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
import warnings

import pytest
import torch
import torch._inductor.config as cfg
from conftest import inside_compile
from hypothesis import given, settings
from hypothesis import strategies as st

import inductor_knobs as ik
from inductor_knobs.core import interception
from inductor_knobs.env import activate_from_env, deactivate_env
from inductor_knobs.errors import InvalidKnobValue, StaleConfigHashWarning

MODE = "max-autotune-no-cudagraphs"


def _f(x):
    return (x @ x).relu() + 1


def _mode_sets(key: str) -> bool:
    return key in torch._inductor.list_mode_options(MODE)


@pytest.fixture
def seen(monkeypatch, fresh_inductor):
    """(coordinate_descent_tuning, max_autotune) as each graph compile read them inside Inductor."""
    return inside_compile(monkeypatch, lambda: (cfg.coordinate_descent_tuning, cfg.max_autotune))


@pytest.fixture
def env_off():
    yield
    deactivate_env()


@pytest.fixture
def unpinned(patches):
    """This thread's override of max_autotune cleared ("unset") for the test, and put back after it.

    Earlier compiles on this thread may have left one: torch 2.12-2.14's ``config.patch`` pins what it read.
    """
    if not patches.config_is_thread_local:
        pytest.skip(f"torch {torch.__version__} keeps config process-global: no per-thread overrides")
    from torch.utils._config_module import _UNSET_SENTINEL

    raw = patches.read_override(cfg, "max_autotune")
    patches.write_override(cfg, "max_autotune", _UNSET_SENTINEL)
    yield _UNSET_SENTINEL
    patches.write_override(cfg, "max_autotune", raw)


def _thread_local(patches) -> None:
    if not patches.config_is_thread_local:
        pytest.skip(f"torch {torch.__version__} keeps config process-global: no per-thread overrides")


def _run_in_thread(fn):
    box: dict[str, object] = {}

    def body():
        try:
            box["result"] = fn()
        except BaseException as err:  # noqa: BLE001 - handed to the test thread
            box["error"] = err

    worker = threading.Thread(target=body, name="defect-worker")
    worker.start()
    worker.join()
    if "error" in box:
        raise box["error"]  # type: ignore[misc]
    return box.get("result")


# -- 1. ik.compile's mode/options keys lose to knobs and to env activation, as in torch.compile --------------


def test_ik_compile_mode_loses_to_an_enclosing_knobs_block(seen):
    if not _mode_sets("coordinate_descent_tuning"):
        pytest.skip(f"{MODE} does not set coordinate_descent_tuning on torch {torch.__version__}")
    compiled = ik.compile(_f, mode=MODE)
    with ik.knobs(coordinate_descent_tuning=False):
        compiled(torch.randn(8, 8))
    assert seen == [(False, True)]  # the knob won; the mode's other keys still applied
    report = compiled.knobs_report()
    assert report.compiled_with()["coordinate_descent_tuning"] is False
    assert report.compiled_with()["max_autotune"] is True


def test_ik_compile_mode_and_options_lose_to_env_activation(seen, env_off):
    activate_from_env({"INDUCTOR_KNOBS_COORDINATE_DESCENT_TUNING": "0"})
    from_mode = ik.compile(_f, mode=MODE)
    from_options = ik.compile(lambda x: (x @ x).sin(), options={"coordinate_descent_tuning": True, "max_autotune": True})
    from_mode(torch.randn(8, 8))
    from_options(torch.randn(8, 8))
    assert seen == [(False, True), (False, True)]
    for compiled, source in ((from_mode, f"mode:{MODE}"), (from_options, "options")):
        (attested,) = compiled.knobs_report().attestations
        by_key = {s.key: s for s in attested.settings}
        cdt = by_key["coordinate_descent_tuning"]
        if source == "options" or _mode_sets("coordinate_descent_tuning"):
            assert (cdt.compiled_with, cdt.source, cdt.overrode) == (False, "env", True)
        assert (by_key["max_autotune"].compiled_with, by_key["max_autotune"].source) == (True, source)


def test_ik_compile_knobs_still_beat_env_activation(seen, env_off):
    activate_from_env({"INDUCTOR_KNOBS_COORDINATE_DESCENT_TUNING": "0"})
    compiled = ik.compile(_f, ik.Knobs(coordinate_descent_tuning=True), mode=MODE)
    compiled(torch.randn(8, 8))
    assert seen == [(True, True)]
    sources = {s.key: s.source for s in compiled.knobs_report().settings}
    assert sources["coordinate_descent_tuning"] == "knobs" and sources["max_autotune"] == f"mode:{MODE}"


def test_ik_compile_without_knobs_holds_no_interception_and_matches_torch_compile(seen):
    compiled = ik.compile(_f, mode=MODE)
    compiled(torch.randn(8, 8))
    torch.compile(_f, mode=MODE)(torch.randn(9, 9))
    assert seen[0] == seen[1]
    assert not interception.INTERCEPTION.users
    assert compiled.knobs_report().compiled_with()["max_autotune"] is True


# -- 2. env activation beats TORCHINDUCTOR_<KEY>_DEFAULT (2.12+), and deactivation restores the entry ----------

DEFAULT_PROBE = r"""
import json, os
import torch, torch._inductor.config as cfg
from torch.utils._config_module import _UNSET_SENTINEL
entry = cfg._config["fx_graph_cache"]
def state():
    unset = _UNSET_SENTINEL
    return [entry.default, entry.env_value_default, entry.env_value_force is unset, entry.user_override.get() is unset]
before = state()
import torch._inductor.compile_fx  # the startup hook activates INDUCTOR_KNOBS_* here
from torch._inductor.graph import GraphLowering
import inductor_knobs as ik
seen, real = [], GraphLowering.__init__
def spy(self, *args, **kwargs):
    seen.append(cfg.fx_graph_cache)
    return real(self, *args, **kwargs)
GraphLowering.__init__ = spy
out = {"before": before}
try:
    ik.activate_from_env()  # the hook's activation, or this one (idempotent)
    out["active"] = [cfg.fx_graph_cache, entry.default, entry.env_value_default]
    with ik.record_compiles() as rec:
        torch.compile(lambda x: x * 3 + 1)(torch.randn(4))
    out["seen"] = seen
    out["attested"] = [a.value("fx_graph_cache") for a in rec.attestations]
except Exception as err:
    out["error"] = f"{type(err).__name__}: {err}"[:300]
ik.deactivate_env()
out["after"] = state()
print("RESULT", json.dumps(out))
"""


@pytest.mark.parametrize(("default_var", "knob"), [("1", False), ("0", True)])
def test_env_knob_beats_a_torchinductor_default_variable_and_restores_exactly(patches, tmp_path, default_var, knob):
    entry = cfg._config["fx_graph_cache"]
    if not patches.config_is_thread_local or not hasattr(entry, "env_value_default"):
        pytest.skip(f"torch {torch.__version__}: env activation writes overrides, which beat *_DEFAULT variables")
    env = {k: v for k, v in os.environ.items() if not k.startswith(("INDUCTOR_KNOBS_", "TORCHINDUCTOR_FX_GRAPH_CACHE"))}
    env["TORCHINDUCTOR_FX_GRAPH_CACHE_DEFAULT"] = default_var
    env["TORCHINDUCTOR_CACHE_DIR"] = str(tmp_path)  # a cold cache: the compile builds its graph
    env["INDUCTOR_KNOBS_CONFIG"] = json.dumps({"fx_graph_cache": knob})
    done = subprocess.run([sys.executable, "-c", DEFAULT_PROBE], capture_output=True, text=True, env=env, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    out = json.loads(done.stdout.split("RESULT ", 1)[1])
    assert "error" not in out, out["error"]
    assert out["before"][1] is (default_var == "1")  # torch read the *_DEFAULT variable at import
    assert out["active"][0] is knob
    assert out["seen"] == [knob] and out["attested"] == [knob]  # read inside Inductor's compile
    assert out["after"] == out["before"]  # default, env_value_default and both "unset"s exactly as before


def test_a_forcing_variable_still_beats_env_activation_and_is_named(patches, monkeypatch, env_off):
    entry = cfg._config["fx_graph_cache"]
    if not hasattr(entry, "env_value_force"):
        pytest.skip(f"torch {torch.__version__} has no env_name_force")
    before = (entry.default, entry.env_value_default, patches.read_override(cfg, "fx_graph_cache"))
    monkeypatch.setattr(entry, "env_value_force", True)  # as TORCHINDUCTOR_FX_GRAPH_CACHE=1 does at import
    with pytest.raises(ik.KnobNotApplied, match="env-forced"):
        activate_from_env({"INDUCTOR_KNOBS_CONFIG": '{"fx_graph_cache": false}'})
    assert (entry.default, entry.env_value_default, patches.read_override(cfg, "fx_graph_cache")) == before


def test_env_activation_over_a_default_variable_in_process_reverts_exactly(patches, monkeypatch, seen, unpinned, env_off):
    entry = cfg._config["max_autotune"]
    monkeypatch.setattr(entry, "env_value_default", True)  # as a TORCHINDUCTOR_MAX_AUTOTUNE_DEFAULT=1 would
    before = (entry.default, entry.env_value_default, patches.read_override(cfg, "max_autotune"))
    activate_from_env({"INDUCTOR_KNOBS_MAX_AUTOTUNE": "0"})
    torch.compile(_f)(torch.randn(8, 8))
    deactivate_env()
    assert [s[1] for s in seen] == [False]
    assert (entry.default, entry.env_value_default, patches.read_override(cfg, "max_autotune")) == before


# -- 3. deactivation from another thread leaves that thread's own overrides alone ----------------------------


def test_deactivation_from_another_thread_keeps_that_threads_override(patches, seen, unpinned, env_off):
    _thread_local(patches)
    activate_from_env({"INDUCTOR_KNOBS_MAX_AUTOTUNE": "1"})

    def worker():
        cfg.max_autotune = True  # this thread's own torch override (equal to the env's value, on purpose)
        deactivate_env()
        own = (cfg.max_autotune, cfg._config["max_autotune"].user_override.get())
        torch.compile(_f)(torch.randn(8, 8))
        return own

    assert _run_in_thread(worker) == (True, True)
    assert [s[1] for s in seen] == [True]  # the worker compiled with its own override
    assert cfg.max_autotune is False and patches.read_override(cfg, "max_autotune") is unpinned


def test_deactivation_while_another_thread_holds_a_knobs_block(patches, seen, unpinned, env_off):
    _thread_local(patches)
    activate_from_env({"INDUCTOR_KNOBS_MAX_AUTOTUNE": "1"})
    entered, deactivated = threading.Event(), threading.Event()

    def holder():
        with ik.knobs(max_autotune=True, coordinate_descent_tuning=True):
            entered.set()
            deactivated.wait(60)
            own = (cfg.max_autotune, cfg.coordinate_descent_tuning)
            torch.compile(_f)(torch.randn(8, 8))
        return own

    def deactivator():
        entered.wait(60)
        deactivate_env()
        deactivated.set()

    other = threading.Thread(target=deactivator)
    other.start()
    try:
        assert _run_in_thread(holder) == (True, True)
    finally:
        deactivated.set()
        other.join()
    assert seen == [(True, True)]
    assert ik.active_env_knobs() is None


def test_same_thread_deactivation_restores_a_pinned_override_exactly(patches, env_off):
    _thread_local(patches)
    raw_before = patches.read_override(cfg, "max_autotune")
    patches.write_override(cfg, "max_autotune", False)  # what torch's config.patch leaves behind (2.12-2.14)
    try:
        activate_from_env({"INDUCTOR_KNOBS_MAX_AUTOTUNE": "1"})
        assert cfg.max_autotune is True  # the activating thread sees the knob too
        deactivate_env()
        assert cfg._config["max_autotune"].user_override.get() is False
    finally:
        patches.write_override(cfg, "max_autotune", raw_before)


# -- 4. StaleConfigHashWarning only when another thread holds a cached config hash ---------------------------


def _parked(target_ready=None):
    """A thread that runs ``target_ready`` (if any) and then waits until released."""
    ready, release = threading.Event(), threading.Event()

    def body():
        try:
            if target_ready is not None:
                target_ready()
        finally:
            ready.set()
            release.wait(120)

    worker = threading.Thread(target=body, name="parked-worker")
    worker.start()
    ready.wait(300)
    return worker, release


def test_an_idle_thread_gives_no_stale_hash_warning(patches, env_off):
    _thread_local(patches)
    import torch._inductor.compile_fx  # noqa: F401 - as after the startup hook

    worker, release = _parked()
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("error", StaleConfigHashWarning)
            activate_from_env({"INDUCTOR_KNOBS_MAX_AUTOTUNE": "1"})
            deactivate_env()
    finally:
        release.set()
        worker.join()


def test_a_thread_that_compiled_gives_the_stale_hash_warning(patches, fresh_inductor, env_off):
    _thread_local(patches)
    worker, release = _parked(lambda: torch.compile(lambda x: x * 2 + 1)(torch.randn(4)))
    try:
        with pytest.warns(StaleConfigHashWarning, match="parked-worker"):
            activate_from_env({"INDUCTOR_KNOBS_MAX_AUTOTUNE": "1"})
        with pytest.warns(StaleConfigHashWarning):
            deactivate_env()
    finally:
        release.set()
        worker.join()


STARTUP_PROBE = r"""
import threading, warnings, json
release = threading.Event()
# daemon: a failed import must end the probe, not leave it waiting for this thread
idle = threading.Thread(target=release.wait, name="idle-worker", daemon=True); idle.start()
with warnings.catch_warnings(record=True) as caught:
    warnings.simplefilter("always")
    import torch, torch._inductor.compile_fx  # the startup hook activates here, with another thread alive
    import torch._inductor.config as cfg
    import inductor_knobs as ik
    with ik.record_compiles() as rec:
        torch.compile(lambda x: x * 5 - 1)(torch.randn(4))
release.set(); idle.join()
ours = sorted({type(w.message).__name__ for w in caught if "inductor_knobs" in type(w.message).__module__})
print("RESULT", json.dumps({"warnings": ours, "attested": [a.value("max_autotune") for a in rec.attestations]}))
"""


@pytest.mark.skipif(
    not any(os.path.exists(os.path.join(p, "inductor_knobs_startup.pth")) for p in sys.path if p),
    reason="the startup .pth is only present once the package is installed",
)
def test_startup_hook_with_an_idle_thread_gives_no_stale_hash_warning(patches):
    _thread_local(patches)
    env = {k: v for k, v in os.environ.items() if not k.startswith("INDUCTOR_KNOBS_")}
    env["INDUCTOR_KNOBS_MAX_AUTOTUNE"] = "1"
    done = subprocess.run([sys.executable, "-c", STARTUP_PROBE], capture_output=True, text=True, env=env, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    out = json.loads(done.stdout.split("RESULT ", 1)[1])
    assert out["warnings"] == []
    assert out["attested"] and all(v is True for v in out["attested"])


# -- 5. Knobs: one definition of equality and hashing (value types count) -------------------------------------


def test_config_values_of_different_types_are_different_knobs():
    one, true, one_float = (ik.Knobs(config={"k": v}) for v in (1, True, 1.0))
    assert one != true and one != one_float and true != one_float
    assert len({one, true, one_float}) == 3
    assert ik.Knobs(config={"k": [1, 2]}) != ik.Knobs(config={"k": (1, 2)})


config_values = st.recursive(
    st.one_of(
        st.none(), st.booleans(), st.integers(-3, 3), st.sampled_from([0.0, 1.0, -0.0, 2.5]), st.sampled_from(["", "a", "1"])
    ),
    lambda inner: st.one_of(
        st.lists(inner, max_size=3), st.tuples(inner, inner), st.dictionaries(st.sampled_from(["a", "b"]), inner, max_size=2)
    ),
    max_leaves=5,
)
knobs_values = st.builds(
    lambda cfg_items, cdt, sms, strict: ik.Knobs(config=cfg_items, coordinate_descent_tuning=cdt, min_sms=sms, strict=strict),
    st.dictionaries(st.sampled_from(["x", "y.z"]), config_values, max_size=2),
    st.one_of(st.none(), st.booleans()),
    st.one_of(st.none(), st.sampled_from([1, 40])),
    st.booleans(),
)


@settings(max_examples=300, deadline=None)
@given(a=knobs_values, b=knobs_values)
def test_equal_knobs_hash_alike_and_digest_alike(a, b):
    assert a == a and hash(a) == hash(a)
    if a == b:
        assert hash(a) == hash(b) and a.digest() == b.digest()
    else:
        assert a.digest() != b.digest()
    assert ik.Knobs(**a.to_dict()) == a


# -- 6. keywords override a spec, whichever way (named knob or config=) each side sets the key ----------------


def test_keyword_overrides_a_spec_that_set_the_key_through_config(seen):
    spec = ik.Knobs(config={"max_autotune": True, "coordinate_descent_tuning": True})
    with ik.knobs(spec, max_autotune=False):
        assert cfg.max_autotune is False
        torch.compile(_f)(torch.randn(8, 8))
    assert seen == [(True, False)]


def test_keyword_config_overrides_a_spec_that_set_the_key_by_name(seen):
    spec = ik.Knobs(max_autotune=True, gemm_backends="ATEN,TRITON")
    with ik.knobs(spec, config={"max_autotune": False, "max_autotune_gemm_backends": "ATEN"}) as entered:
        torch.compile(_f)(torch.randn(8, 8))
    assert seen == [(False, False)]
    assert entered == ik.Knobs(config={"max_autotune": False, "max_autotune_gemm_backends": "ATEN"})


@settings(max_examples=200, deadline=None)
@given(
    a=st.fixed_dictionaries({}, optional={"max_autotune": st.booleans(), "gemm_backends": st.sampled_from(["ATEN", "TRITON"])}),
    a_cfg=st.dictionaries(st.sampled_from(["max_autotune", "max_autotune_gemm_backends", "epilogue_fusion"]), st.booleans()),
    b=st.fixed_dictionaries({}, optional={"max_autotune": st.booleans(), "gemm_backends": st.sampled_from(["ATEN", "CPP"])}),
    b_cfg=st.dictionaries(st.sampled_from(["max_autotune", "max_autotune_gemm_backends", "epilogue_fusion"]), st.booleans()),
)
def test_merged_layers_config_keys(a, a_cfg, b, b_cfg):
    from inductor_knobs.core.plan import config_values

    def build(named, extra):
        extra = {k: ("ATEN" if k == "max_autotune_gemm_backends" else v) for k, v in extra.items()}
        knobs = ik.Knobs(**named, config=extra)
        try:
            return knobs, config_values(knobs)
        except InvalidKnobValue:  # a side that sets one key two ways is not a valid spec
            return None, None

    left, left_values = build(a, a_cfg)
    right, right_values = build(b, b_cfg)
    if left is None or right is None:
        return
    merged = left.merged(right)
    assert config_values(merged) == {**left_values, **right_values}


def test_deactivation_elsewhere_names_the_override_it_cannot_reach(patches, unpinned, env_off):
    """The activating thread held an override of its own (True, not the default): activation rewrote it to
    the knob's value.  Deactivating on another thread restores the defaults, leaves every thread's override
    alone and names the one it cannot reach."""
    entry = cfg._config["max_autotune"]
    patches.write_override(cfg, "max_autotune", True)
    activate_from_env({"INDUCTOR_KNOBS_MAX_AUTOTUNE": "0"})
    assert cfg.max_autotune is False

    def worker():
        with pytest.warns(ik.errors.KnobsWarning, match=r"max_autotune \(thread MainThread\)"):
            deactivate_env()
        return cfg.max_autotune, entry.user_override.get() is unpinned

    assert _run_in_thread(worker) == (False, True)  # the worker's own state: untouched
    assert entry.default is False and entry.user_override.get() is False  # the knob's value, kept


def test_deactivation_elsewhere_gives_a_pinned_thread_its_old_value_back(patches, unpinned, seen, env_off):
    """A pin of the old default (what torch's config.patch leaves) is cleared at activation, so the
    activating thread reads the old value again whichever thread deactivates."""
    entry = cfg._config["max_autotune"]
    patches.write_override(cfg, "max_autotune", False)
    activate_from_env({"INDUCTOR_KNOBS_MAX_AUTOTUNE": "1"})
    assert cfg.max_autotune is True

    def worker():
        with warnings.catch_warnings():
            warnings.simplefilter("error", ik.errors.KnobsWarning)
            warnings.simplefilter("ignore", StaleConfigHashWarning)
            deactivate_env()

    _run_in_thread(worker)
    torch.compile(_f)(torch.randn(8, 8))
    assert cfg.max_autotune is False and entry.default is False
    assert [s[1] for s in seen] == [False]  # read inside the compile, on the activating thread
