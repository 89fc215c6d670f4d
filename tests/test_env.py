"""INDUCTOR_KNOBS_* activation: in process, and in a fresh interpreter through the installed .pth."""

from __future__ import annotations

import os
import re
import site
import subprocess
import sys
import sysconfig
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
import torch
import torch._inductor.utils as inductor_utils
from hypothesis import given, settings
from hypothesis import strategies as st

import inductor_knobs as ik
from inductor_knobs.core import torch_compat
from inductor_knobs.core.knobs import KNOBS
from inductor_knobs.errors import InvalidKnobValue, KnobsError


@pytest.fixture
def env_active():
    yield
    ik.deactivate_env()


def test_activation_is_process_wide_and_reverts(env_active, patches, cfg, fake_gpu):
    fake_gpu(40)
    gate = inductor_utils.is_big_gpu
    env = {"INDUCTOR_KNOBS_PRESET": "force_gemm_autotune", "INDUCTOR_KNOBS_MIN_SMS": "40"}
    knobs = ik.activate_from_env(env)
    assert knobs == ik.Knobs(min_sms=40, max_autotune_gemm=True, gemm_backends="ATEN,TRITON")
    assert ik.activate_from_env(env) == knobs  # idempotent
    with ThreadPoolExecutor(1) as pool:  # every thread sees process-wide defaults
        seen = pool.submit(lambda: (cfg.max_autotune_gemm, inductor_utils.is_big_gpu(0))).result()
    assert seen == (True, True)
    with ik.knobs(max_autotune_gemm=False, min_sms=41):  # a block still wins on its thread
        assert cfg.max_autotune_gemm is False and inductor_utils.is_big_gpu(0) is False
    assert cfg.max_autotune_gemm is True and inductor_utils.is_big_gpu(0) is True
    with pytest.raises(KnobsError, match="already activated"):
        ik.activate_from_env({"INDUCTOR_KNOBS_MIN_SMS": "50"})
    ik.deactivate_env()
    assert cfg.max_autotune_gemm is False and inductor_utils.is_big_gpu is gate


def test_disable_and_nothing_set(env_active):
    assert ik.activate_from_env({}) is None
    assert ik.activate_from_env({"INDUCTOR_KNOBS_MIN_SMS": "40", "INDUCTOR_KNOBS_DISABLE": "1"}) is None


def test_bad_value_applies_nothing(env_active, cfg):
    with pytest.raises(InvalidKnobValue, match="INDUCTOR_KNOBS_CUDAGRAPHS"):
        ik.activate_from_env({"INDUCTOR_KNOBS_CUDAGRAPHS": "maybe", "INDUCTOR_KNOBS_MAX_AUTOTUNE": "1"})
    assert ik.active_env_knobs() is None and cfg.max_autotune is False


def _installed_pth() -> Path | None:
    dirs = {sysconfig.get_paths()["purelib"], *site.getsitepackages()}
    for d in dirs:
        if (Path(d) / "inductor_knobs_startup.pth").exists():
            return Path(d) / "inductor_knobs_startup.pth"
    return None


needs_install = pytest.mark.skipif(
    _installed_pth() is None, reason="the startup .pth is only present once the package is installed (pip install .)"
)

PROBE = """
import sys, threading
print('early', 'torch' in sys.modules, 'inductor_knobs' in sys.modules)
import torch._inductor.compile_fx  # Inductor's compile entry: activation happens at its import
import torch._inductor.config as cfg, torch._inductor.utils as utils, wrapt
box = []
t = threading.Thread(target=lambda: box.append(cfg.max_autotune_gemm)); t.start(); t.join()
print('late', cfg.max_autotune_gemm, cfg.max_autotune_gemm_backends, cfg.triton.cudagraphs,
      isinstance(utils.is_big_gpu, wrapt.FunctionWrapper), box[0])
"""


def _run(env_vars: dict[str, str], probe: str = PROBE) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("INDUCTOR_KNOBS_")}
    env.update(env_vars)
    return subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, env=env, timeout=300)


@needs_install
def test_explicit_activation_before_inductor_import_does_not_deadlock_with_the_hook():
    # activate_from_env() imports torch._inductor.utils while planning; the startup hook then
    # activates inside it.  This hung on a non-reentrant lock once (found by the ablation worker).
    probe = (
        "import inductor_knobs as ik; k = ik.activate_from_env(); import torch._inductor.utils as u, wrapt; "
        "print(k.min_sms, isinstance(u.is_big_gpu, wrapt.FunctionWrapper))"
    )
    out = _run({"INDUCTOR_KNOBS_MIN_SMS": "40"}, probe)
    assert out.returncode == 0, out.stderr
    assert out.stdout.split() == ["40", "True"]


@needs_install
def test_startup_hook_activates_in_a_fresh_interpreter():
    out = _run({"INDUCTOR_KNOBS_PRESET": "force_gemm_autotune", "INDUCTOR_KNOBS_MIN_SMS": "40",
                "INDUCTOR_KNOBS_CUDAGRAPHS": "0"})  # fmt: skip
    assert out.returncode == 0, out.stderr
    lines = out.stdout.splitlines()
    assert lines[0] == "early False True"  # the hook imported the package, not torch
    assert lines[1] == "late True ATEN,TRITON False True True"


@needs_install
def test_startup_hook_costs_no_imports_when_unset_or_disabled():
    for env in ({}, {"INDUCTOR_KNOBS_MIN_SMS": "40", "INDUCTOR_KNOBS_DISABLE": "1"}):
        out = _run(env)
        assert out.returncode == 0, out.stderr
        assert out.stdout.splitlines()[0] == "early False False"
        assert out.stdout.splitlines()[1].startswith("late False ") and out.stdout.splitlines()[1].endswith(" False False")


@needs_install
def test_inductors_own_child_processes_say_nothing_at_start_up(tmp_path):
    """Inductor's compile workers run as scripts under ``torch/_inductor/`` (torch 2.4-2.8 start them when Inductor is
    imported): a bad variable is said by the process the user started, not again by each of them."""
    script = tmp_path / "torch" / "_inductor" / "compile_worker" / "__main__.py"
    script.parent.mkdir(parents=True)
    script.write_text("import torch\nprint('ran')\n")
    env = {k: v for k, v in os.environ.items() if not k.startswith("INDUCTOR_KNOBS_")}
    env["INDUCTOR_KNOBS_MIN_SMS"] = "abc"
    child = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, env=env, timeout=300)
    assert child.returncode == 0 and "ran" in child.stdout, child.stderr
    assert "INDUCTOR_KNOBS_MIN_SMS" not in child.stderr
    parent = subprocess.run([sys.executable, "-c", "import torch"], capture_output=True, text=True, env=env, timeout=300)
    assert parent.stderr.count("INDUCTOR_KNOBS_MIN_SMS") == 1, parent.stderr


@needs_install
def test_a_bad_variable_never_breaks_an_import_and_fails_the_first_compile_once():
    probe = """
import torch, torch._dynamo, torch._inductor.compile_fx  # importing never fails
import inductor_knobs.errors as errors
for attempt in (1, 2):
    try:
        torch.compile(lambda x: x + 1)(torch.ones(2))
        print(attempt, "compiled")
    except Exception as err:
        cause = err
        while cause is not None and not isinstance(cause, errors.KnobsError):
            cause = cause.__cause__ or getattr(cause, "inner_exception", None)
        print(attempt, type(cause).__name__, str(cause))
print("dynamo usable", hasattr(torch._dynamo, "utils"))
"""
    out = _run({"INDUCTOR_KNOBS_MIN_SMS": "abc"}, probe)
    assert out.returncode == 0, out.stderr
    assert "Traceback" not in out.stderr and out.stderr.count("INDUCTOR_KNOBS_MIN_SMS") == 1  # said once, at start
    first, second, usable = out.stdout.strip().splitlines()[-3:]
    assert first.startswith("1 InvalidKnobValue") and "INDUCTOR_KNOBS_MIN_SMS='abc'" in first
    assert "allowed" in first and "INDUCTOR_KNOBS_DISABLE=1" in first
    assert second == "2 compiled" and usable == "dynamo usable True"


@needs_install
def test_a_bad_variable_is_said_at_start_and_torch_is_not_imported_in_a_process_that_never_compiles():
    probe = "import sys; print(sorted(m for m in sys.modules if m.split('.')[0] in ('torch', 'wrapt')))"
    out = _run({"INDUCTOR_KNOBS_MIN_SMS": "abc"}, probe)
    assert out.returncode == 0
    assert out.stdout.strip() == "[]"  # the start-up check imports light modules of the package only
    torch_version = re.escape(torch.__version__)  # torch/version.py, as the error says it (2.4.1+cu121: metadata says 2.4.1)
    assert re.fullmatch(
        rf"inductor_knobs: INDUCTOR_KNOBS_MIN_SMS='abc' is invalid on torch {torch_version}: allowed an int SM count "
        r"from 1 to \d+; fix the variable, or set INDUCTOR_KNOBS_DISABLE=1 to run without inductor_knobs \(nothing applied\)\n",
        out.stderr,
    ), out.stderr


@needs_install
def test_empty_values_and_disable_alone_do_nothing():
    probe = "import sys; print('inductor_knobs' in sys.modules)"
    for env in (
        {"INDUCTOR_KNOBS_MIN_SMS": ""},
        {"INDUCTOR_KNOBS_DISABLE": "0"},
        {"INDUCTOR_KNOBS_DISABLE": "1", "INDUCTOR_KNOBS_MIN_SMS": "4"},
    ):
        out = _run(env, probe)
        assert out.stdout.strip() == "False", env


def test_explicit_activation_names_the_variable_and_the_way_out():
    with pytest.raises(ik.errors.InvalidKnobValue, match=r"INDUCTOR_KNOBS_MIN_SMS='abc'.*INDUCTOR_KNOBS_DISABLE=1"):
        ik.activate_from_env({"INDUCTOR_KNOBS_MIN_SMS": "abc"})
    assert ik.activate_from_env({"INDUCTOR_KNOBS_MIN_SMS": "  "}) is None  # empty means unset


@needs_install
# Each example is a fresh interpreter (about 8 CPU-seconds); the same rules are fuzzed in-process with many
# more examples in test_hardening.test_fuzzed_env_applies_all_or_nothing.
@settings(max_examples=3, deadline=None)
@given(
    env=st.dictionaries(
        st.sampled_from(
            ["INDUCTOR_KNOBS_MIN_SMS", "INDUCTOR_KNOBS_CUDAGRAPHS", "INDUCTOR_KNOBS_GEMM_BACKENDS", "INDUCTOR_KNOBS_NOPE"]
        ),
        st.sampled_from(["abc", "-3", "maybe", "ATEN,BOGUS", "{", "2000"]),
        min_size=1,
        max_size=2,
    )
)
def test_fuzzed_bad_env_in_real_processes_leaves_torch_untouched(env):
    """Real interpreters with the .pth: a bad variable never breaks an import, applies nothing, fails one compile."""
    probe = """
import torch, torch._inductor.compile_fx, torch._inductor.config as cfg, torch._inductor.utils as u, wrapt
from inductor_knobs.core import torch_compat
patches = torch_compat.installed(strict=False)  # where this torch stores overrides
raw = {k: repr(patches.read_override(cfg, k)) for k in ("triton.cudagraphs", "max_autotune_gemm_backends")}
try:
    torch.compile(lambda x: x * 2)(torch.ones(2))
    print("compiled")
except Exception as err:
    print("refused")
print(isinstance(u.is_big_gpu, wrapt.FunctionWrapper), sorted(set(raw.values())))
"""
    out = _run(env, probe)
    assert out.returncode == 0, out.stderr
    verdict, state = out.stdout.strip().splitlines()[-2:]
    assert verdict == "refused" and state.startswith("False")  # nothing applied: no gate wrapper, raw config untouched
    assert "Traceback" not in out.stderr


def test_activation_with_a_thread_that_compiled_warns_on_thread_local_torch(patches, fresh_inductor):
    import threading

    import torch

    if not patches.config_is_thread_local:
        pytest.skip("before torch 2.12 config is process-global: no per-thread hash to go stale")
    stop, compiled = threading.Event(), threading.Event()

    def compile_then_wait():
        try:
            torch.compile(lambda x: x * 2 - 1)(torch.randn(3))  # caches this thread's config hash/dict
        finally:
            compiled.set()
        stop.wait()

    worker = threading.Thread(target=compile_then_wait, name="compiling-worker")
    worker.start()
    compiled.wait(300)
    try:
        with pytest.warns(ik.errors.StaleConfigHashWarning, match="compiling-worker"):
            ik.activate_from_env({"INDUCTOR_KNOBS_MAX_AUTOTUNE": "1"})
        with pytest.warns(ik.errors.StaleConfigHashWarning):
            ik.deactivate_env()
    finally:
        stop.set()
        worker.join()


# -- process settings torch reads from its environment: set at interpreter start ------------------------------

AVOID = "INDUCTOR_KNOBS_CUDNN_SDPA_AVOID_RECOMPILE"
needs_avoid_recompile = pytest.mark.skipif(
    not KNOBS["cudnn_sdpa_avoid_recompile"].on(torch_compat.release_of(torch.__version__)),
    reason=f"torch {torch.__version__} has no cudnn_sdpa_avoid_recompile (2.9+)",
)


@needs_install
@needs_avoid_recompile
def test_a_process_whose_cuda_starts_before_its_first_compile_compiles_with_the_variable():
    """torch reads TORCH_CUDNN_SDPA_AVOID_RECOMPILE at its first cuDNN attention call: the hook sets it at start, so
    activation at the first compile finds it in force, raises no SettingAlreadyRead, and attests it from env."""
    probe = """
import os, sys
print(os.environ.get("TORCH_CUDNN_SDPA_AVOID_RECOMPILE"), "torch" in sys.modules)
import torch
import inductor_knobs as ik
from inductor_knobs.core import torch_compat
type(torch_compat.installed()).cuda_started = lambda self: True  # as after model.cuda(): torch may have read it
with ik.record_compiles() as rec:
    torch.compile(lambda x: x.sin())(torch.ones(2))
(setting,) = [s for s in rec.attestations[0].settings if s.key == "cudnn_sdpa_avoid_recompile"]
print(setting.compiled_with, setting.source, os.environ["TORCH_CUDNN_SDPA_AVOID_RECOMPILE"])
"""
    out = _run({AVOID: "1"}, probe)
    assert out.returncode == 0, out.stderr
    assert out.stdout.splitlines()[-2:] == ["1 False", "True env 1"], out.stdout
    # a CUDA wheel on a host without CUDA logs this at its first compile (torch/utils/cpp_extension.py:118, 2.10)
    assert [line for line in out.stderr.splitlines() if "No CUDA runtime is found" not in line] == [], out.stderr


@needs_install
@needs_avoid_recompile
def test_an_eager_process_gets_the_variable_and_its_children_of_an_ablation_do_not():
    probe = """
import os, sys
import torch
torch.ones(2).sin()
print(os.environ.get("TORCH_CUDNN_SDPA_AVOID_RECOMPILE"), [m for m in ("torch._inductor", "torch._dynamo") if m in sys.modules])
from inductor_knobs.core.changes import environ_before_knobs
print("TORCH_CUDNN_SDPA_AVOID_RECOMPILE" in environ_before_knobs())  # what an ablation's runs start from
"""
    out = _run({AVOID: "1"}, probe)
    assert out.returncode == 0 and out.stderr == "", out.stderr
    assert out.stdout.splitlines() == ["1 []", "False"]
    for user in ("1", "0"):  # the user's own variable is theirs: kept, and inherited
        out = _run({AVOID: user, "TORCH_CUDNN_SDPA_AVOID_RECOMPILE": user}, probe)
        assert out.stdout.splitlines()[-1] == "True" and out.stderr == ""


@needs_install
@needs_avoid_recompile
def test_a_conflicting_torch_variable_is_left_as_set_and_reported_once():
    probe = (
        "import os, torch; print(os.environ['TORCH_CUDNN_SDPA_AVOID_RECOMPILE'])\n"
        "torch.compile(lambda x: x + 1)(torch.ones(2)); print(os.environ['TORCH_CUDNN_SDPA_AVOID_RECOMPILE'])"
    )
    out = _run({AVOID: "on", "TORCH_CUDNN_SDPA_AVOID_RECOMPILE": "0"}, probe)
    assert out.returncode == 0 and out.stdout.split() == ["0", "0"], out  # before and after the activating compile
    (line,) = out.stderr.splitlines()
    assert line.startswith("inductor_knobs: ") and AVOID in line and "TORCH_CUDNN_SDPA_AVOID_RECOMPILE='0'" in line


def test_a_knob_the_installed_torch_lacks_is_said_at_start_naming_the_release(monkeypatch):
    from inductor_knobs import env as env_mod

    release = ".".join(torch.__version__.split(".")[:2])
    missing = [n for n, row in KNOBS.items() if not row.on(release) and n == "cudagraph_dynamic_shape_rerecord_limit"]
    if not missing:
        pytest.skip(f"torch {torch.__version__} has cudagraph_dynamic_shape_rerecord_limit")
    for name in [v for v in os.environ if v.startswith("INDUCTOR_KNOBS_")]:
        monkeypatch.delenv(name)
    monkeypatch.setenv("INDUCTOR_KNOBS_CUDAGRAPH_DYNAMIC_SHAPE_RERECORD_LIMIT", "4")
    lines = env_mod.start_up()
    assert len(lines) == 1 and "INDUCTOR_KNOBS_CUDAGRAPH_DYNAMIC_SHAPE_RERECORD_LIMIT" in lines[0], lines
    assert "torch 2.15 or newer" in lines[0] and torch.__version__ in lines[0], lines


@pytest.fixture
def avoid_recompile_at_start_up(monkeypatch):
    """Only ``INDUCTOR_KNOBS_CUDNN_SDPA_AVOID_RECOMPILE=1`` set, and start-up run: it exports the torch variable."""
    from inductor_knobs import env as env_mod

    if not KNOBS["cudnn_sdpa_avoid_recompile"].on(".".join(torch.__version__.split(".")[:2])):
        pytest.skip(f"torch {torch.__version__} has no cudnn_sdpa_avoid_recompile")
    for name in [v for v in os.environ if v.startswith("INDUCTOR_KNOBS_")]:
        monkeypatch.delenv(name)
    monkeypatch.delenv("TORCH_CUDNN_SDPA_AVOID_RECOMPILE", raising=False)
    monkeypatch.setenv(AVOID, "1")
    assert env_mod.start_up() == [] and os.environ["TORCH_CUDNN_SDPA_AVOID_RECOMPILE"] == "1"


def test_an_activation_torch_refuses_names_the_variables_and_takes_back_what_start_up_set(
    env_active, avoid_recompile_at_start_up, monkeypatch, cfg
):
    """A value only the installed torch can judge (a config value of the wrong type) fails the activation's plan:
    the error names the variables and the way out, nothing is applied, and the torch variable start-up set (the
    one torch reads once per process) is unset again."""
    monkeypatch.setenv("INDUCTOR_KNOBS_CONFIG", '{"max_autotune": "yes"}')
    with pytest.raises(InvalidKnobValue, match=r"max_autotune='yes'.*from INDUCTOR_KNOBS_CONFIG, " + AVOID + r"\).*DISABLE=1"):
        ik.activate_from_env()
    assert "TORCH_CUDNN_SDPA_AVOID_RECOMPILE" not in os.environ
    assert ik.active_env_knobs() is None and cfg.max_autotune is False


def test_a_preset_lies_under_the_explicit_variables_per_config_key(env_active, cfg, fake_gpu):
    fake_gpu(40)
    env = {"INDUCTOR_KNOBS_PRESET": "force_gemm_autotune", "INDUCTOR_KNOBS_CONFIG": '{"max_autotune_gemm_backends": "ATEN"}'}
    knobs = ik.activate_from_env(env)
    assert knobs is not None and knobs.min_sms == 1 and knobs.max_autotune_gemm is True
    assert cfg.max_autotune_gemm_backends == "ATEN"


@pytest.mark.parametrize(
    ("variable", "raw"),
    [
        ("INDUCTOR_KNOBS_CONFIG", '{"max_autotune": 1' + "0" * 5000 + "}"),  # past Python's int digit limit
        ("INDUCTOR_KNOBS_CONFIG", "[" * 100_000),  # deeper than the JSON decoder recurses
        ("INDUCTOR_KNOBS_CUDAGRAPH_CAPTURE_SIZES", "[" * 100_000),
        ("INDUCTOR_KNOBS_CONFIG", '{"cpu_gpu_bw": NaN}'),  # NaN never reads back as set
        ("INDUCTOR_KNOBS_CONFIG", '{"max_autotune": true, "max_autotune": false}'),  # which one was meant?
        ("INDUCTOR_KNOBS_CONFIG", '{"max-autotune": true, "max_autotune": false}'),  # one key, two spellings
        ("INDUCTOR_KNOBS_MIN_SMS", "\uff14\uff10"),  # full-width digits, which int() takes
        ("INDUCTOR_KNOBS_MIN_SMS", "4_0"),
    ],
    ids=["huge-int", "deep-config", "deep-sizes", "nan", "duplicate-key", "aliased-key", "full-width", "underscore"],
)
def test_json_torch_cannot_take_is_an_invalid_value_naming_the_variable(variable, raw):
    with pytest.raises(InvalidKnobValue, match=variable):
        ik.Knobs.from_env({variable: raw})


@pytest.mark.parametrize(
    ("raw", "said"),
    [
        ("-0", "INDUCTOR_KNOBS_MIN_SMS='-0' (read as 0) is invalid"),
        (" +0 ", "INDUCTOR_KNOBS_MIN_SMS='+0' (read as 0) is invalid"),
        ("0", "INDUCTOR_KNOBS_MIN_SMS=0 is invalid"),
        ("2000", "INDUCTOR_KNOBS_MIN_SMS=2000 is invalid"),
    ],
)
def test_a_refused_value_is_named_as_the_variable_wrote_it(raw, said):
    with pytest.raises(InvalidKnobValue) as caught:
        ik.Knobs.from_env({"INDUCTOR_KNOBS_MIN_SMS": raw})
    assert str(caught.value).startswith(said)


def test_a_failed_trial_activation_of_another_mapping_leaves_start_ups_variable(
    env_active, avoid_recompile_at_start_up, monkeypatch
):
    with pytest.raises(InvalidKnobValue, match="INDUCTOR_KNOBS_CONFIG"):
        ik.activate_from_env({"INDUCTOR_KNOBS_CONFIG": '{"max_autotune": "yes"}'})
    assert os.environ["TORCH_CUDNN_SDPA_AVOID_RECOMPILE"] == "1"  # the process's own variables still ask for it
    monkeypatch.setenv("INDUCTOR_KNOBS_CONFIG", '{"max_autotune": "yes"}')
    with pytest.raises(InvalidKnobValue, match="INDUCTOR_KNOBS_CONFIG"):
        ik.activate_from_env()  # the process's own variables fail: start-up's variable is taken back
    assert "TORCH_CUDNN_SDPA_AVOID_RECOMPILE" not in os.environ


def test_activation_returns_the_knobs_it_applied_without_a_setting_the_user_set_otherwise(env_active, monkeypatch):
    if not KNOBS["cudnn_sdpa_avoid_recompile"].on(".".join(torch.__version__.split(".")[:2])):
        pytest.skip(f"torch {torch.__version__} has no cudnn_sdpa_avoid_recompile")
    monkeypatch.setenv("TORCH_CUDNN_SDPA_AVOID_RECOMPILE", "0")
    knobs = ik.activate_from_env({AVOID: "1", "INDUCTOR_KNOBS_MAX_AUTOTUNE": "1"})
    assert knobs == ik.Knobs(max_autotune=True) and ik.active_env_knobs() == knobs
    assert os.environ["TORCH_CUDNN_SDPA_AVOID_RECOMPILE"] == "0"
