from __future__ import annotations

import json
import os
import subprocess
import sys
from types import SimpleNamespace

import pytest

from inductor_knobs import doctor
from inductor_knobs.cli import main


def test_doctor_text(capsys):
    assert main(["doctor", "--min-sms", "40"]) == 0
    out = capsys.readouterr().out
    assert "patch module: torch_2_" in out and "GEMM backends" in out and "max-autotune" in out


def test_doctor_json(capsys, monkeypatch):
    monkeypatch.setenv("INDUCTOR_KNOBS_MIN_SMS", "nope")
    assert main(["doctor", "--json"]) == 1  # a bad variable is an error: the report still prints
    captured = capsys.readouterr()
    assert "INDUCTOR_KNOBS_MIN_SMS='nope'" in captured.err and "INDUCTOR_KNOBS_DISABLE=1" in captured.err
    report = json.loads(captured.out)
    assert report["patch_module"]["drift_ok"] is True
    assert "INDUCTOR_KNOBS_MIN_SMS" in report["env"]["error"]
    assert set(report["modes"]) >= {"default", "max-autotune"}


def test_doctor_plans_the_variables_as_the_first_compile_would(capsys, monkeypatch):
    """A value only the installed torch judges (an unknown config key) is an error now, not at the first compile;
    with INDUCTOR_KNOBS_DISABLE set the variables are reported as not applied, and nothing is an error."""
    for name in [v for v in os.environ if v.startswith("INDUCTOR_KNOBS_")]:
        monkeypatch.delenv(name)
    monkeypatch.setenv("INDUCTOR_KNOBS_CONFIG", '{"no_such_key": 1}')
    assert main(["doctor"]) == 1
    captured = capsys.readouterr()
    assert "no_such_key" in captured.err and "INDUCTOR_KNOBS_DISABLE=1" in captured.err
    monkeypatch.setenv("INDUCTOR_KNOBS_DISABLE", "1")
    assert main(["doctor", "--json"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert report["env"]["disabled"] is True and report["env"]["error"] is None


@pytest.fixture
def package(tmp_path, monkeypatch):
    """A package ``slowpkg`` on ``sys.path`` with its source only; ``compile(mode)`` writes its bytecode."""
    import importlib
    import py_compile

    root = tmp_path / "site"
    (root / "slowpkg").mkdir(parents=True)
    init = root / "slowpkg" / "__init__.py"
    init.write_text("X = 1\n")
    monkeypatch.syspath_prepend(str(root))
    monkeypatch.setattr(sys, "pycache_prefix", None)
    monkeypatch.setattr(sys, "dont_write_bytecode", True)
    importlib.invalidate_caches()

    def compile_(mode=py_compile.PycInvalidationMode.TIMESTAMP):
        py_compile.compile(str(init), doraise=True, invalidation_mode=mode)

    return SimpleNamespace(compile=compile_, root=str(root), init=init)


@pytest.mark.parametrize(("compiled", "writes", "slow"), [(False, False, True), (True, False, False), (False, True, False)])
def test_doctor_tells_a_package_without_bytecode_on_a_python_that_writes_none(package, monkeypatch, compiled, writes, slow):
    """Every process then compiles the package from source: doctor says so and gives the one command that fixes it."""
    if compiled:
        package.compile()
    monkeypatch.setattr(sys, "dont_write_bytecode", not writes)
    found = doctor.bytecode("slowpkg")
    assert (found["usable"], found["writes"], found["slow_start"]) == (compiled, writes, slow)
    assert found["directory"] == package.root and found["compile"] == [package.root]
    report = doctor.collect()
    report["bytecode"] = found
    text = doctor.render(report)
    assert (f"-m compileall -q -j 0 {package.root}" in text) is slow
    assert ("slowpkg has no bytecode here that this Python reads, and it writes none" in text) is slow


def test_doctor_judges_bytecode_as_pythons_import_does(package):
    """A timestamp file of another source (a changed file) is not used; a checked hash-based one is, whatever the
    source's mtime, until the source's bytes change; an unchecked one always is."""
    import py_compile

    package.compile()
    package.init.write_text("X = 22\n")  # another size: the file's header no longer matches
    assert doctor.bytecode("slowpkg")["usable"] is False
    package.compile(py_compile.PycInvalidationMode.CHECKED_HASH)
    os.utime(package.init, (1, 1))  # an mtime the header does not hold: a hash-based file does not care
    assert doctor.bytecode("slowpkg")["usable"] is True
    package.init.write_text("X = 23\n")
    assert doctor.bytecode("slowpkg")["usable"] is False
    package.compile(py_compile.PycInvalidationMode.UNCHECKED_HASH)
    package.init.write_text("X = 333\n")
    assert doctor.bytecode("slowpkg")["usable"] is True


def test_doctor_counts_a_directory_python_cannot_write_as_writing_none(package, monkeypatch):
    real_access = os.access
    monkeypatch.setattr(sys, "dont_write_bytecode", False)
    monkeypatch.setattr(os, "access", lambda path, mode: False if path.startswith(package.root) else real_access(path, mode))
    assert doctor.bytecode("slowpkg")["slow_start"] is True


def test_doctor_reads_bytecode_where_the_pycache_prefix_puts_it(package, monkeypatch, tmp_path):
    """With a prefix set, Python reads bytecode only there: the command compiles the standard library too."""
    import sysconfig

    monkeypatch.setattr(sys, "pycache_prefix", str(tmp_path / "prefix"))
    found = doctor.bytecode("slowpkg")
    assert found["usable"] is False and sysconfig.get_paths()["stdlib"] in found["compile"]
    package.compile()  # py_compile follows the prefix, as Python's imports do
    assert (tmp_path / "prefix").is_dir()
    assert doctor.bytecode("slowpkg")["usable"] is True


@pytest.mark.parametrize("name", ["no_such_package_here", "no_such_package_here.sub", "sys"])
def test_doctor_reads_a_module_without_source_as_not_found_and_never_raises(package, name):
    found = doctor.bytecode(name)
    assert found["usable"] is None and found["slow_start"] is False and found["compile"] == []


def test_doctor_json_says_which_backends_the_sm_gate_governs(capsys):
    assert main(["doctor", "--json"]) == 0
    report = json.loads(capsys.readouterr().out)
    gate = report["sm_gate"]
    assert {"TRITON", "CUTLASS"} <= set(gate["gated"])
    assert {"ATEN", "CPP"} <= set(gate["not_gated"])
    assert not set(gate["gated"]) & set(gate["not_gated"])
    assert set(gate["gated"]) | set(gate["not_gated"]) == set(report["gemm_backends"])
    assert isinstance(gate["checked_last"], bool)
    assert report["patch_module"]["config_patch_restores_unset"] in (True, False)


SMALL_NVIDIA = [{"index": 0, "name": "Fake L4", "sms": 58, "capability": "8.9", "gate_at_torch_threshold": False}]
BIG_NVIDIA = [{"index": 0, "name": "Fake H200", "sms": 132, "capability": "9.0", "gate_at_torch_threshold": True}]


@pytest.mark.parametrize(
    ("version", "gated", "checked_last", "modules"),
    [
        ("2.10.0", {"TRITON", "CUTLASS", "CUTEDSL"}, False, []),
        ("2.11.0", {"TRITON", "CUTLASS", "CUTEDSL"}, False, ["cutlass", "cutlass_api"]),
        ("2.13.0", {"TRITON", "CUTLASS", "CUTEDSL"}, False, ["cutlass", "cutlass_api"]),
        ("2.14.1", {"TRITON", "CUTLASS", "CUTEDSL"}, False, ["cutlass", "cutlass.operators"]),
        ("2.15.0", {"TRITON", "CUTLASS", "CUTEDSL", "FLYDSL"}, True, ["cutlass", "cutlass.operators"]),
    ],
)
def test_sm_gate_facts_per_release(monkeypatch, version, gated, checked_last, modules):
    monkeypatch.setattr(doctor, "_importable", lambda module: True)
    gate = doctor._sm_gate(version, SMALL_NVIDIA)
    assert set(gate["gated"]) == gated and gate["checked_last"] is checked_last
    assert gate["nvgemm_modules"] == modules
    if modules:  # NVGEMM is known: on a small NVIDIA GPU with its modules it is the no-patch route
        assert "NVGEMM" in gate["not_gated"]
        assert "GPU 0 (58 SMs)" in gate["nvgemm_alternative"] and "ATEN,NVGEMM" in gate["nvgemm_alternative"]
    else:
        assert gate["nvgemm_alternative"] is None and "NVGEMM" not in gate["not_gated"]


def test_nvgemm_is_no_alternative_on_a_big_gpu_or_without_its_modules(monkeypatch):
    monkeypatch.setattr(doctor, "_importable", lambda module: True)
    assert doctor._sm_gate("2.15.0", BIG_NVIDIA)["nvgemm_alternative"] is None
    assert doctor._sm_gate("2.15.0", [])["nvgemm_alternative"] is None
    monkeypatch.setattr(doctor, "_importable", lambda module: module != "cutlass.operators")
    gate = doctor._sm_gate("2.15.0", SMALL_NVIDIA)
    assert gate["nvgemm_alternative"] is None and gate["nvgemm_missing"] == ["cutlass.operators"]
    assert "pip install nvidia-cutlass-operators" in gate["nvgemm_hint"] and "torch 2.15.0" in gate["nvgemm_hint"]


def test_doctor_text_renders_the_gate_and_the_alternative(monkeypatch):
    monkeypatch.setattr(doctor, "_importable", lambda module: True)
    report = doctor.collect()
    report["sm_gate"] = doctor._sm_gate("2.15.0", SMALL_NVIDIA)
    report["patch_module"]["config_patch_restores_unset"] = True
    text = doctor.render(report)
    assert "SM gate (is_big_gpu) governs: CUTEDSL, CUTLASS, FLYDSL, TRITON" in text
    assert "torch asks the gate last" in text and "no-patch alternative: GPU 0 (58 SMs)" in text
    assert "torch._inductor.config.patch on exit: restores a key it found unset" in text
    assert "small-GPU emulation makes its green context with: " in text


@pytest.mark.parametrize("value", ["-1", "0", "99999"])
def test_doctor_refuses_a_min_sms_the_knob_refuses(capsys, value):
    assert main(["doctor", "--min-sms", value]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and f"--min-sms={int(value)!r} is invalid" in err and "from 1 to 1024" in err


#: The modules of the [ablate] extra (pyproject.toml).
ABLATE_EXTRA = ("scipy", "tqdm", "matplotlib", "submitit")


def _cli_without(blocked, argv, *, as_module=False):
    """The CLI in a fresh interpreter where ``import`` of each of ``blocked`` fails as for a module that is not
    installed (None in ``sys.modules``): through ``python -m inductor_knobs`` or the console script's ``main``."""
    run = (
        "import runpy; runpy.run_module('inductor_knobs', run_name='__main__', alter_sys=True)"
        if as_module
        else "from inductor_knobs.cli import main; sys.exit(main(sys.argv[1:]))"
    )
    code = "\n".join(
        [
            "import sys",
            f"for name in {list(blocked)!r}: sys.modules[name] = None",
            f"sys.argv = ['inductor-knobs', *{list(argv)!r}]",
            run,
        ]
    )
    env = {k: v for k, v in os.environ.items() if not k.startswith("INDUCTOR_KNOBS_")}
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=600)


@pytest.mark.parametrize("as_module", [False, True], ids=["console-script", "python-m"])
@pytest.mark.parametrize("missing", ["scipy", "tqdm"])
def test_ablate_without_its_extra_names_the_install_in_one_line(missing, as_module):
    done = _cli_without([missing], ["ablate", "--smoke", "--device", "cpu", "--arm", "eager"], as_module=as_module)
    assert done.returncode == 2, done.stderr
    assert done.stderr.count("\n") == 1, done.stderr
    assert "pip install 'inductor-knobs[ablate]'" in done.stderr and f"needs {missing}," in done.stderr


def test_doctor_works_without_the_ablate_extra():
    done = _cli_without(ABLATE_EXTRA, ["doctor", "--json"])
    assert done.returncode == 0, done.stderr
    assert "GEMM" in json.dumps(json.loads(done.stdout))
