"""The knob table: every row is honoured on a warm cache, and adding a plain knob is one row.

Two processes share one cache directory: the first compiles under torch's defaults (cold), the second compiles
the same function under each knob of the table in turn (warm).  For every knob the warm process either shows
the knob's effect (the compile missed the defaults' cache entry, or the knob acts at run time), or its
attestation says it was not applied.  This is what a knob's row promises with its cache rule.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

import inductor_knobs as ik
from inductor_knobs.core import torch_compat
from inductor_knobs.core.knobs import CACHE_RULES, KNOBS, Config, Policy, reference_table
from inductor_knobs.core.plan import config_values
from inductor_knobs.errors import InvalidKnobValue, NotSupportedOnThisTorch

WORKER = Path(__file__).with_name("knob_table_worker.py")
RELEASE = torch_compat.release_of(torch.__version__)
#: Before 2.6 there is no ``cache_key_tag``: a salted knob switches the FX graph cache off instead
#: (``patches/config_storage.py`` ``cache_salt``), so its compile neither hits nor misses.
SALT_TURNS_CACHE_OFF = ("torch._inductor.config", "fx_graph_cache", False) in torch_compat.installed().cache_salt("t")

#: A value of each knob that changes what this CPU-only torch compiles or runs, or None where it cannot be set here
#: (with the reason).  A new row needs a sample here: test_every_row_has_a_sample says so.
SAMPLES = {
    "min_sms": 40,
    "gate_rocm_xpu": True,
    "max_autotune": True,
    "max_autotune_gemm": True,
    "gemm_backends": "ATEN,TRITON",
    "gemm_search_space": "EXHAUSTIVE",
    "coordinate_descent_tuning": True,
    "cudagraphs": True,
    "trace": "TRACE_DIR",
    "sdpa_backends": "MATH",
    "tunableop": None,  # CPU-only builds have no TunableOp (NotSupportedOnThisTorch)
    "cudnn_sdpa_avoid_recompile": True,
    "cudagraph_capture_sizes": (2, 4),
    "cudagraph_dynamic_shape_rerecord_limit": 4,
    "keep_static_cubin_raw": True,
    "lookup_table": None,  # CUDA only: torch never looks a table up for a CPU compile
}
#: Knobs that only take effect together with another (gate_rocm_xpu refines min_sms).
WITH = {"gate_rocm_xpu": {"min_sms": 40}}


def test_every_row_has_a_sample_and_a_known_cache_rule():
    for name, row in KNOBS.items():
        assert row.cache in CACHE_RULES, name
        assert isinstance(row.changes, Policy) or name in SAMPLES, f"knob {name} has no sample in {__file__}"


def _worker(args: list[str], cache: Path, variables: dict[str, str] | None = None) -> dict:
    env = {**os.environ, "TORCHINDUCTOR_CACHE_DIR": str(cache), "TRITON_CACHE_DIR": str(cache / "triton")}
    env["TORCHINDUCTOR_FX_GRAPH_CACHE"] = "1"  # off by default before torch 2.5
    env["TORCHINDUCTOR_AUTOGRAD_CACHE"] = "1"
    for var in [v for v in env if v.startswith("INDUCTOR_KNOBS_")]:
        env.pop(var)
    env.update(variables or {})
    out = subprocess.run([sys.executable, str(WORKER), *args], env=env, capture_output=True, text=True, timeout=900)
    assert out.returncode == 0, out.stderr[-4000:]
    return json.loads(out.stdout.strip().splitlines()[-1])


@pytest.fixture(scope="module")
def cold_then_warm(tmp_path_factory):
    cache, trace = tmp_path_factory.mktemp("knob-cache"), tmp_path_factory.mktemp("knob-trace")
    cold = _worker(["defaults"], cache)
    samples = {
        name: {**WITH.get(name, {}), name: (str(trace) if value == "TRACE_DIR" else value)}
        for name, value in SAMPLES.items()
        if value is not None and KNOBS[name].on(RELEASE)
    }
    warm = _worker(["knobs", json.dumps(samples), str(trace)], cache)
    # the same warm cache through env activation (the startup hook, at the first compile), no block in the code
    env_trace = tmp_path_factory.mktemp("knob-trace-env")
    by_env = _worker(["defaults"], cache, {"INDUCTOR_KNOBS_TRACE": str(env_trace), "INDUCTOR_KNOBS_SDPA_BACKENDS": "MATH"})
    by_env["trace_files"] = sum(len(files) for _, _, files in os.walk(env_trace))
    return cold, warm, by_env


def test_the_defaults_compile_uses_torchs_own_attention_kernel_cold(cold_then_warm):
    cold = cold_then_warm[0]
    assert cold["misses"] >= 1 and cold["hits"] == 0, cold
    assert any("flash_attention_for_cpu" in op for op in cold["ops"]), cold["ops"]


@pytest.mark.parametrize("name", [n for n, row in KNOBS.items() if not isinstance(row.changes, Policy)])
def test_each_knob_is_honoured_on_a_warm_cache_or_attested_as_not_applied(cold_then_warm, name):
    row = KNOBS[name]
    if SAMPLES[name] is None:
        pytest.skip(f"{name} cannot be set on this CPU-only torch {torch.__version__}")
    if not row.on(RELEASE):
        pytest.skip(f"torch {torch.__version__} has no {name} (since {row.since})")
    seen = cold_then_warm[1][name]
    not_applied = any(name in w or (isinstance(row.changes, Config) and row.changes.key in w) for w in seen["warnings"])
    if row.cache == "runtime":
        return  # torch reads it when the code runs: a hit of the defaults' entry gets it too
    # keyed, salted, bypass: this process never compiled under the knob (with this value), so a hit would be an
    # entry built without it
    assert seen["hits"] == 0 or not_applied, seen
    if row.cache == "salted" and SALT_TURNS_CACHE_OFF:
        assert seen["hits"] == seen["misses"] == 0, seen  # the salt switched the cache off
    elif row.cache in ("keyed", "salted"):
        assert seen["misses"] >= 1, seen  # the caches were on, and missed
    assert seen["attestations"] and all(a["cache"] is None for a in seen["attestations"]), seen


def test_sdpa_backends_on_a_warm_cache_runs_the_backend_it_asks_for(cold_then_warm):
    """A process with sdpa_backends='MATH' that would hit the defaults' AOTAutograd entry ran the flash kernel."""
    seen = cold_then_warm[1]["sdpa_backends"]
    assert not any("flash_attention" in op for op in seen["ops"]), seen["ops"]
    if SALT_TURNS_CACHE_OFF:
        assert seen["hits"] == seen["misses"] == 0, seen  # no cache_key_tag: the salt switched the cache off
        return
    salts = [s for a in seen["attestations"] for s in a["settings"] if "cache_key_tag" in s["key"]]
    assert salts and all("inductor_knobs-sdpa_backends-" in str(s["compiled_with"]) for s in salts), seen


def test_trace_on_a_warm_cache_writes_its_trace_files(cold_then_warm):
    """The warm process wrote 0 trace files, and its attestation said trace.enabled=True."""
    seen = cold_then_warm[1]["trace"]
    assert seen["trace_files"] > 0 and seen["hits"] == 0, seen


def test_a_bypass_knob_served_from_the_cache_is_attested_as_not_applied():
    from inductor_knobs.core.attestation import AttestedSetting, CompileAttestation, served_from_cache

    settings = (
        AttestedSetting("trace.enabled", True, True, "knobs"),
        AttestedSetting("max_autotune", True, True, "knobs"),
    )
    hit = served_from_cache(CompileAttestation("0/0", "forward", settings), "fx_graph")
    assert hit.cache == "fx_graph" and [s.key for s in hit.mismatches] == ["trace.enabled"]


def test_a_bypass_knob_asked_off_or_the_caches_asked_on_is_applied_by_a_cache_hit():
    """trace=False and config={"force_disable_caches": False} hold on a hit: nothing turns the caches off."""
    from inductor_knobs.core.attestation import AttestedSetting, CompileAttestation, served_from_cache

    settings = (
        AttestedSetting("trace.enabled", False, False, "knobs"),
        AttestedSetting("force_disable_caches", False, False, "knobs"),
    )
    hit = served_from_cache(CompileAttestation("0/0", "forward", settings), "aot_autograd")
    assert hit.cache == "aot_autograd" and not hit.mismatches, hit.mismatches


def test_a_knob_the_installed_torch_lacks_is_refused_naming_the_release():
    missing = [n for n, row in KNOBS.items() if not row.on(RELEASE)]
    if not missing:
        pytest.skip(f"torch {torch.__version__} has every knob")
    name = missing[0]
    with pytest.raises(NotSupportedOnThisTorch, match=rf"{name} needs torch {KNOBS[name].since}"):
        with ik.knobs(**{name: SAMPLES[name] or 1}):
            pass


def test_the_reference_table_is_the_knob_table():
    doc = (Path(__file__).parents[1] / "docs" / "reference.md").read_text()
    start = doc.index("<!-- knob table")
    table = doc[doc.index("\n", start) + 1 : doc.index("\n<!-- end of knob table -->")]
    assert table == reference_table(), "docs/reference.md: paste inductor_knobs.core.knobs.reference_table()"


@pytest.mark.parametrize(
    "knobs",
    [
        {"trace": True, "config": {"force_disable_caches": False}},
        {"config": {"trace.enabled": True, "force_disable_caches": False}},
    ],
    ids=["named", "config"],
)
def test_turning_the_caches_on_beside_a_bypass_knob_is_refused_either_way(knobs):
    with pytest.raises(InvalidKnobValue, match=r"trace.enabled=True needs Inductor's caches off.*force_disable_caches=False"):
        config_values(ik.Knobs(**knobs))


def test_env_activation_on_a_warm_cache_honours_trace_and_sdpa_backends(cold_then_warm):
    """INDUCTOR_KNOBS_TRACE and INDUCTOR_KNOBS_SDPA_BACKENDS, applied by the startup hook at the first compile of a
    process whose cache the defaults' compile warmed: trace files are written and the attention runs as asked."""
    seen = cold_then_warm[2]
    assert seen["trace_files"] > 0 and seen["hits"] == 0, seen
    assert not any("flash_attention" in op for op in seen["ops"]), seen["ops"]
    sources = {s["source"] for a in seen["attestations"] for s in a["settings"]}
    assert sources == {"env"}, seen
