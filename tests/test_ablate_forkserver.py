"""The ablation's fork server: torch imported once, every run a fresh process of its arm, nothing shared.

The state is read inside the children (tests/forkserver_probe.py): Inductor's config, the gate
function, Dynamo's and Inductor's in-memory caches, CUDA, the cache directory, the server's modules.
"""

from __future__ import annotations

import importlib.util
import json
import os
import signal
import subprocess
import sys
import time
import uuid
from pathlib import Path

import pytest
import torch

from inductor_knobs import cli
from inductor_knobs.ablation import forkserver, preload, workers
from inductor_knobs.ext import torch_compat

TESTS = Path(__file__).parent


@pytest.fixture(autouse=True)
def _probe_importable(monkeypatch):
    # The server (and so every child) finds the tests' modules on PYTHONPATH, as a user's workload
    # module is found from the current directory.
    monkeypatch.setenv("PYTHONPATH", str(TESTS))


def _run(registry: workers.Workers, module: str, args: list[str], env_for) -> tuple[dict, dict, str]:
    """Start one child, wait for it, and return its JSON output, the environment it got, and its stderr."""
    seen: dict = {}

    def env(cache: str) -> dict:
        seen.update(env_for(cache))
        return dict(seen)

    started = registry.start(module, args, env)
    assert started is not None
    proc, cache = started
    assert proc.wait(300) == 0, workers.read_output(cache)
    out, err = workers.read_output(cache)
    registry.done(proc, cache)
    assert proc.start["start"] == "forkserver", proc.start
    return json.loads(out.strip().splitlines()[-1]), seen, err


def _elsewhere(env: dict, directory: Path) -> dict:
    """``env`` with every path into the run's own directory (gone once the run is done) moved into ``directory``:
    a new interpreter compiling with the same settings must not recreate the run's directory in ``$TMPDIR``."""
    own = os.path.dirname(env["TMPDIR"])
    moved = {k: str(directory) + v[len(own) :] for k, v in env.items() if v == own or v.startswith(own + os.sep)}
    for path in moved.values():
        os.makedirs(path, exist_ok=True)
    return {**env, **moved}


def test_the_runs_environment_turns_off_the_compile_pools_warm_up_where_importing_inductor_starts_it(monkeypatch, tmp_path):
    """torch 2.4-2.8 start Inductor's compile-worker pool when it is imported (patches/hooks.py): a fork server that
    preloads Inductor would keep the pool's threads and decline, so every process of the ablation gets
    TORCH_WARM_POOL=0 there (and starts its pool at its first compile); a user's own value is kept."""
    patches = torch_compat.installed()
    monkeypatch.delenv(workers.WARM_POOL_VAR, raising=False)
    warms = patches.warms_compile_pool_at_import(torch_compat.release_of(torch.__version__))
    assert (workers.base_env(str(tmp_path)).get(workers.WARM_POOL_VAR) == "0") is warms
    monkeypatch.setattr(type(patches), "warms_compile_pool_at_import", lambda self, release: True)  # model torch 2.4
    assert workers.base_env(str(tmp_path))[workers.WARM_POOL_VAR] == "0"
    monkeypatch.setenv(workers.WARM_POOL_VAR, "1")
    assert workers.base_env(str(tmp_path))[workers.WARM_POOL_VAR] == "1"
    monkeypatch.setattr(type(patches), "warms_compile_pool_at_import", lambda self, release: False)
    monkeypatch.delenv(workers.WARM_POOL_VAR)
    assert workers.WARM_POOL_VAR not in workers.base_env(str(tmp_path))


def test_no_state_leaks_from_one_run_to_the_next(monkeypatch, tmp_path):
    """Two runs from one server: the first applies knobs and compiles; the second finds a fresh process.

    The parent's own INDUCTOR_KNOBS_* must not reach the server either (the package's startup hook would
    apply them in every process that imports Inductor).
    """
    monkeypatch.setenv("INDUCTOR_KNOBS_MAX_AUTOTUNE", "1")  # the parent's, not any run's
    registry = workers.Workers(preload=forkserver.preload_modules("gemm_mlp", "cpu"))
    try:
        server = registry.fork_server()
        assert server is not None, registry.start_note
        assert server.facts["forbidden_loaded"] == [] and server.facts["threads"] == 1
        assert "torch" in server.facts["preloaded"] and not server.facts["cuda_initialized"]
        # Dynamo and Inductor are in the server (not the startup hook's trigger), and nothing they read
        # at import differs from run to run.
        assert {"torch._dynamo", "torch._inductor.graph"} <= set(server.facts["preloaded"]) and not server.facts["stopped"]
        assert server.facts["env_kept"] == [] and "TORCHINDUCTOR_COMPILE_THREADS" in server.facts["env_read"]

        # The server and every run ask NVML, not the CUDA runtime, whether CUDA is there (importing
        # Inductor asks, and the runtime's answer poisons fork on a CUDA build).
        assert workers.base_env("/nonexistent")[workers.NVML_CHECK_VAR] == "1"

        def knobs(cache: str) -> dict:
            env = workers.base_env(cache)
            env.update(INDUCTOR_KNOBS_MAX_AUTOTUNE_GEMM="1", INDUCTOR_KNOBS_MIN_SMS="1")
            return env

        first, first_env, _ = _run(registry, "forkserver_probe", ["first"], knobs)
        # The first run changed what it could: config, gate, caches (else the second proves nothing).
        assert first["max_autotune_gemm"] is True and first["gate"]["wrapt"] is True
        assert first["dynamo_counters"] and first["inductor_modules"] > 0

        second, env, _ = _run(registry, "forkserver_probe", ["second"], workers.base_env)
        assert second["cuda_initialized"] is False
        # The server's Dynamo and Inductor, never the startup hook's trigger nor the package's knobs.
        assert second["compiler_modules"] > 0 and second["hook_module_loaded"] is False and second["knobs_loaded"] == []
        assert second["child_facts"]["hook_module_in_server"] is False and second["child_facts"]["server_threads"] == 1
        assert second["child_facts"]["compiler_modules_in_server"] == second["compiler_modules"]
        assert second["server_environ_knobs"] == []
        assert second["own_session"] is True
        assert second["cache_dir"] != first_env["TORCHINDUCTOR_CACHE_DIR"] and second["cache_dir_contents"] == []
        assert second["tempdir"] == env["TMPDIR"] != first_env["TMPDIR"]  # tempfile's cached answer was reset
        assert second["gate"]["wrapt"] is False and os.path.join("_inductor", "utils.py:") in second["gate"]["code"]
        assert second["dynamo_counters"] == {} and second["inductor_modules"] == 0
        if second["dynamo_cache_dir"] is not None:  # made at the server's import, keyed on no directory
            assert second["dynamo_cache_dir"].startswith(os.path.realpath(second["cache_dir"]))

        # Inductor's config as a fresh interpreter with the same environment reads it.
        fresh = subprocess.run(
            [sys.executable, "-m", "forkserver_probe", "config"],
            env=_elsewhere(env, tmp_path),
            capture_output=True,
            text=True,
            check=True,
        )
        expected = json.loads(fresh.stdout.strip().splitlines()[-1])
        differ = {k: (second["config"].get(k), v) for k, v in expected["config"].items() if second["config"].get(k) != v}
        assert not differ and second["config"].keys() == expected["config"].keys()
        assert second["gate"] == expected["gate"]  # the unwrapped original, as torch defines it
    finally:
        registry.remove_dirs()


def test_a_thread_in_the_server_means_new_interpreters(tmp_path, monkeypatch):
    """A preloaded module that leaves a thread running: fork() would copy only one thread, so the server is
    refused, and the runs start as new interpreters with the reason in their records."""
    (tmp_path / "starts_a_thread.py").write_text(
        "import threading, time\nthreading.Thread(target=time.sleep, args=(3600,), daemon=True).start()\n"
    )
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join([str(tmp_path), str(TESTS)]))
    registry = workers.Workers(preload=["starts_a_thread"])
    try:
        assert registry.fork_server() is None
        assert "threads" in registry.start_note and "fork() copies only one" in registry.start_note
        started = registry.start("forkserver_probe", ["config"], workers.base_env)
        assert started is not None
        proc, cache = started
        assert proc.wait(300) == 0
        assert proc.start == {"start": "subprocess", "start_note": registry.start_note}
        registry.done(proc, cache)
    finally:
        registry.remove_dirs()


def test_the_guard_keeps_the_startup_hooks_trigger_out_of_the_server():
    """Importing ``torch._inductor.compile_fx`` (on whose import a run activates its INDUCTOR_KNOBS_*) in
    the server is stopped before it starts; what was imported stays.  The server's Dynamo and Inductor
    do not import it."""
    facts = _facts(["torch", "torch._inductor.compile_fx", "json"])
    assert facts["preloaded"] == ["torch", "json"] and facts["forbidden_loaded"] == []
    assert facts["stopped"]["torch._inductor.compile_fx"].startswith("imports torch._inductor.compile_fx")
    facts = _facts(forkserver.preload_modules("gemm_mlp", "cpu"))
    assert facts["stopped"] == {} and facts["forbidden_loaded"] == [] and facts["env_kept"] == []


def test_an_arms_knobs_are_read_inside_a_forked_runs_compile_as_in_a_new_interpreter(tmp_path):
    """Inductor preloaded in the server: a forked run's INDUCTOR_KNOBS_* (activated by the package's startup
    hook alone, as in a new interpreter) are what its compile read (``ik.record_compiles``), setting for
    setting as a new interpreter's with the same environment; and Inductor's compile threads are the
    ablation's value, read at the server's import."""
    registry = workers.Workers(preload=forkserver.preload_modules("gemm_mlp", "cpu"), compile_threads=3)
    try:
        server = registry.fork_server()
        assert server is not None, registry.start_note
        assert server.env["TORCHINDUCTOR_COMPILE_THREADS"] == "3"

        def knobs(cache: str) -> dict:
            env = workers.base_env(cache, compile_threads=3)
            env.update(INDUCTOR_KNOBS_MAX_AUTOTUNE="1", INDUCTOR_KNOBS_COORDINATE_DESCENT_TUNING="1")
            return env

        forked, env, _ = _run(registry, "forkserver_probe", ["attest"], knobs)
        assert forked["hook_module_at_start"] is False and forked["compile_threads"] == 3
        fresh = subprocess.run(
            [sys.executable, "-m", "forkserver_probe", "attest"],
            env=_elsewhere(env, tmp_path),
            capture_output=True,
            text=True,
            check=True,
        )
        expected = json.loads(fresh.stdout.strip().splitlines()[-1])
        assert forked["attestations"] == expected["attestations"] and expected["compile_threads"] == 3
        settings = {s["key"]: s for a in forked["attestations"] for s in a["settings"]}
        assert settings["max_autotune"]["compiled_with"] is True and settings["max_autotune"]["source"] == "env"
        assert settings["coordinate_descent_tuning"]["compiled_with"] is True
    finally:
        registry.remove_dirs()


def test_a_run_whose_environment_differs_from_what_the_server_read_starts_as_a_new_interpreter(tmp_path, monkeypatch):
    """A variable read while the server imported (here by a module of the test; in an ablation
    TORCHINDUCTOR_COMPILE_THREADS by Inductor's config) and set otherwise for a run: the run is not forked,
    the note names the variable.  A module that reads a run's own variable at import (its cache
    directory) makes the server unfit at once."""
    (tmp_path / "reads_a_variable.py").write_text("import os\nVALUE = os.environ.get('IK_FORKSERVER_TEST')\n")
    (tmp_path / "reads_the_cache_dir.py").write_text("import os\nCACHE = os.environ.get('TRITON_CACHE_DIR')\n")
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join([str(tmp_path), str(TESTS)]))
    monkeypatch.setenv("IK_FORKSERVER_TEST", "server")
    registry = workers.Workers(preload=["reads_a_variable"])
    try:
        server = registry.fork_server()
        assert server is not None and "IK_FORKSERVER_TEST" in server.facts["env_read"], registry.start_note
        started = registry.start("forkserver_probe", ["config"], lambda c: {**workers.base_env(c), "IK_FORKSERVER_TEST": "run"})
        assert started is not None
        proc, cache = started
        assert proc.wait(300) == 0 and proc.start["start"] == "subprocess"
        assert "IK_FORKSERVER_TEST differs from the fork server's" in proc.start["start_note"]
        registry.done(proc, cache)
    finally:
        registry.remove_dirs()
    registry = workers.Workers(preload=["reads_the_cache_dir"])
    try:
        assert registry.fork_server() is None
        assert "TRITON_CACHE_DIR (importing reads_the_cache_dir)" in registry.start_note
    finally:
        registry.remove_dirs()


def test_the_proof_that_the_cache_directory_read_at_import_is_not_kept():
    """``DynamoCache`` as torch 2.13 builds it follows a run's TORCHINDUCTOR_CACHE_DIR; one that keeps the
    directory it was made with (as older torch releases' did) is found, and the server would be refused."""
    if importlib.util.find_spec("torch._dynamo.package") is None:
        pytest.skip(f"torch {torch.__version__} has no torch._dynamo.package (no DynamoCache to keep a directory)")
    code = (
        "import torch._dynamo.package as p\n"
        "from inductor_knobs.ablation.preload import not_kept_proof\n"
        "print(repr(not_kept_proof()))\n"
        "p.DynamoCache = p.DiskDynamoStore('/nonexistent/kept/dynamo')\n"
        "print(repr(not_kept_proof()))\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    follows, kept = done.stdout.strip().splitlines()[-2:]
    assert follows == "''" and "kept the server's cache directory (/nonexistent/kept/dynamo)" in kept


def test_a_module_stopped_half_way_that_a_run_cannot_import_again_means_new_interpreters(tmp_path, monkeypatch):
    """A preloaded module that registers an op and then imports torch._inductor.compile_fx: the guard stops it after the
    registration, so a run importing it again would register twice.  The server's probe child finds that
    out, and the server is refused."""
    (tmp_path / "registers_then_needs_compile_fx.py").write_text(
        "import torch\ntorch.library.define('ik_forkserver_test::twice', '(Tensor x) -> Tensor')\n"
        "import torch._inductor.compile_fx\n"
    )
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join([str(tmp_path), str(TESTS)]))
    registry = workers.Workers(preload=["torch", "registers_then_needs_compile_fx"])
    try:
        assert registry.fork_server() is None
        assert "a probe child of the fork server failed: importing" in registry.start_note
        assert "registers_then_needs_compile_fx" in registry.start_note
    finally:
        registry.remove_dirs()


def test_transformers_bert_is_preloaded_whole():
    """transformers' BERT modeling module imports torch._dynamo (transformers.masking_utils on 5.x), which
    the server now holds: it is preloaded whole, reading nothing that differs from run to run."""
    pytest.importorskip("transformers")
    modules = forkserver.preload_modules("hf:bert-base", "cpu")
    assert modules[-2:] == ["transformers", "transformers.models.bert.modeling_bert"]
    facts = _facts([*modules, "sys"])
    assert facts["preloaded"] == [*modules, "sys"] and facts["stopped"] == {} and facts["forbidden_loaded"] == []
    assert facts["env_kept"] == [] and facts["threads"] == 1 and facts["stopped_import_in_child"] is None


def _facts(modules: list[str]) -> dict:
    """What a server reports after preloading ``modules`` (:func:`.zygote.facts`), in a process of its own."""
    code = "import json, sys; from inductor_knobs.ablation import zygote; print(json.dumps(zygote.facts(sys.argv[1:])))"
    env = {k: v for k, v in os.environ.items() if not k.startswith("INDUCTOR_KNOBS_")}
    # As every process of an ablation (workers.base_env): no compile-worker pool started at import on torch 2.4-2.8.
    warm = workers.base_env("/nonexistent").get(workers.WARM_POOL_VAR)
    if warm is not None:
        env.setdefault(workers.WARM_POOL_VAR, warm)
    done = subprocess.run([sys.executable, "-c", code, *modules], env=env, capture_output=True, text=True, check=True)
    return json.loads(done.stdout.strip().splitlines()[-1])


def test_a_failing_or_killed_run_reports_as_a_new_interpreter_would(tmp_path):
    """Exit statuses come back through the server: a failing module's status and traceback; and a run
    killed as at its timeout goes with its whole process group (what it started included)."""
    registry = workers.Workers(preload=["json"])
    try:
        assert registry.fork_server() is not None, registry.start_note
        started = registry.start("forkserver_probe", ["no-such-mode"], workers.base_env)
        assert started is not None
        proc, cache = started
        assert proc.wait(300) == 1
        assert "KeyError: 'no-such-mode'" in workers.read_output(cache)[1]
        registry.done(proc, cache)

        pid_file = tmp_path / "helper.pid"
        started = registry.start("forkserver_probe", ["sleep", str(pid_file)], workers.base_env)
        assert started is not None
        proc, cache = started
        _wait_for_pid_file(proc, cache, pid_file)
        helper = int(pid_file.read_text())
        assert os.getpgid(helper) == proc.pid  # the helper is in the run's process group
        assert proc.wait(0.1) is None  # it sleeps for an hour
        workers.reap(proc)
        assert proc.returncode == -signal.SIGKILL
        registry.done(proc, cache)
        deadline = time.monotonic() + HANG_GUARD_S
        while _alive(helper) and time.monotonic() < deadline:
            time.sleep(0.05)
        assert not _alive(helper)
    finally:
        registry.remove_dirs()


def test_a_server_that_dies_mid_ablation_leaves_its_runs_and_the_rest_start_as_new_interpreters(tmp_path):
    """The server killed while one of its runs sleeps: that run can still be killed and waited for (its
    status is unknown: nobody reaps it for us), and the next run starts as a new interpreter, saying why."""
    registry = workers.Workers(preload=["json"])
    try:
        server = registry.fork_server()
        assert server is not None, registry.start_note
        pid_file = tmp_path / "helper.pid"
        started = registry.start("forkserver_probe", ["sleep", str(pid_file)], workers.base_env)
        assert started is not None
        proc, cache = started
        _wait_for_pid_file(proc, cache, pid_file)
        server.proc.kill()
        server.proc.wait()
        workers.reap(proc)
        assert proc.returncode == forkserver.UNKNOWN_EXIT
        registry.done(proc, cache)
        started = registry.start("forkserver_probe", ["config"], workers.base_env)
        assert started is not None
        proc, cache = started
        assert proc.wait(300) == 0 and proc.start["start"] == "subprocess"
        assert proc.start["start_note"].startswith("the fork server failed")
        registry.done(proc, cache)
        assert not _alive(int(pid_file.read_text()))  # the killed run's helper went with its group
    finally:
        registry.remove_dirs()


#: How long a wait for a process to start or go may last before it is a failure: a hang guard, not a
#: measurement (the waits end as soon as the condition holds; CI's 2-core machine is often busy).
HANG_GUARD_S = 120


def _wait_for_pid_file(proc, cache: str, pid_file: Path) -> None:
    """Wait until the run writes its helper's pid (``forkserver_probe sleep``), failing if it exits first."""
    deadline = time.monotonic() + HANG_GUARD_S
    while not pid_file.exists():
        assert proc.poll() is None and time.monotonic() < deadline, workers.read_output(cache)
        time.sleep(0.05)


def _alive(pid: int) -> bool:
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat.rsplit(")", 1)[1].split()[0] != "Z"


SMOKE = ["ablate", "--device", "cpu", "--workload", "gemm_mlp", "--smoke", "--arm", "eager", "--arm", "default"]


def _group_alive(pgid: int) -> list[int]:
    """The live (not zombie) processes of process group ``pgid``."""
    found = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                fields = Path(f"/proc/{entry}/stat").read_text().rsplit(")", 1)[1].split()
            except OSError:
                continue
            if int(fields[2]) == pgid and fields[0] != "Z":
                found.append(int(entry))
    return found


def _tagged(tag: str) -> list[int]:
    """The live processes whose environment holds ``IK_FORKSERVER_TAG=tag``."""
    needle = f"IK_FORKSERVER_TAG={tag}".encode()
    return [pid for pid in (int(e) for e in os.listdir("/proc") if e.isdigit()) if _environ_has(pid, needle) and _alive(pid)]


def _environ_has(pid: int, needle: bytes) -> bool:
    try:
        return needle in Path(f"/proc/{pid}/environ").read_bytes().split(b"\0")
    except OSError:
        return False


def test_a_command_refused_after_its_fork_server_started_leaves_no_process(tmp_path, monkeypatch, capsys):
    """The fork server starts as soon as the plan is known, before the command's own start-up is done; a
    bad argument found after that (here --resume on an --out that holds another plan) still ends it and
    everything it started (its process group)."""
    servers: list[forkserver.ForkServer] = []
    original = forkserver.ForkServer.__init__

    def recording(self, *args, **kwargs):
        original(self, *args, **kwargs)
        servers.append(self)

    monkeypatch.setattr(forkserver.ForkServer, "__init__", recording)
    out = tmp_path / "out"
    (out / "runs").mkdir(parents=True)
    (out / "runs" / "plan.json").write_text('{"jobs": []}')
    assert cli.main([*SMOKE, "--resume", "--out", str(out)]) == cli.ERR
    assert "this command's plan is not the one in --out" in capsys.readouterr().err
    assert len(servers) == 1  # it had started
    server = servers[0]
    assert server.proc.returncode is not None and _group_alive(server.proc.pid) == []
    assert not os.path.exists(os.path.dirname(server.log))  # its directory went with it


def test_sigint_while_the_fork_server_starts_leaves_no_process(tmp_path):
    """SIGINT to the command while its fork server imports (the command's start-up, before or at the first
    run): status 130, and no process of the ablation is left (the server is killed with its group)."""
    tag = uuid.uuid4().hex
    env = {k: v for k, v in os.environ.items() if not k.startswith("INDUCTOR_KNOBS_")}
    env.update(IK_FORKSERVER_TAG=tag, TMPDIR=str(tmp_path))
    proc = subprocess.Popen(
        [sys.executable, "-m", "inductor_knobs", *SMOKE],
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),  # as a terminal's foreground job
    )
    try:
        deadline = time.monotonic() + 300  # a hang guard, not a measurement
        while not any(b"inductor_knobs.ablation.zygote" in _cmdline(pid) for pid in _tagged(tag)):
            assert proc.poll() is None and time.monotonic() < deadline, proc.stderr.read() if proc.stderr else ""
            time.sleep(0.02)
        proc.send_signal(signal.SIGINT)
        _, err = proc.communicate(timeout=300)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 130 and "interrupted by SIGINT" in err, err
    deadline = time.monotonic() + HANG_GUARD_S
    while _tagged(tag) and time.monotonic() < deadline:  # killed processes leave /proc as they are reaped
        time.sleep(0.05)
    assert _tagged(tag) == []


def _cmdline(pid: int) -> bytes:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return b""


def test_the_preload_list_follows_the_workload():
    assert forkserver.preload_modules("gemm_mlp", "cpu") == ["torch", *forkserver.COMPILER_DEPS, *forkserver.COMPILER]
    assert forkserver.preload_modules("gemm_mlp", "cuda") == ["torch", *forkserver.COMPILER_DEPS, "triton", "torch._dynamo"]
    assert forkserver.preload_modules("hf:bert-base", "cuda")[-1] == "transformers"
    assert forkserver.preload_modules("timm:resnet50", "cpu")[-1] == "timm"
    assert forkserver.preload_modules("mymodels:factory", "cpu") == ["torch", *forkserver.COMPILER_DEPS, *forkserver.COMPILER]
    assert all(not preload.forbidden(m) for m in forkserver.preload_modules("hf:tinyllama-2layer", "cuda"))


@pytest.mark.gpu
def test_forked_runs_on_a_gpu_with_cuda_graphs_under_emulation():
    """On a GPU: the server imports torch and triton without initialising CUDA (a CUDA build may map
    libcuda.so at import: its probe child initialises CUDA and runs a kernel); two runs forked from it (the
    main job's gate arms, CUDA graphs on, under an emulated T4 where this torch emulates) initialise CUDA
    themselves, compile, replay their CUDA graphs, match eager and report GPU kernel time."""
    torch = pytest.importorskip("torch")
    if not torch.cuda.is_available():
        pytest.skip("needs a CUDA GPU")
    from inductor_knobs.ablation import job, main_job, spec
    from inductor_knobs.ablation.plan import Plan

    sms = torch.cuda.get_device_properties(0).multi_processor_count
    presets, _ = main_job._emulated_sections(sms)
    emulate = "T4" if "T4" in presets else None
    arms = spec.gate_arms(40 if emulate else sms, emulate=emulate)
    assert all(a.knobs["cudagraphs"] == "1" for a in arms)
    plan = Plan(workload="gemm_mlp", arms=arms, repeats=1, device="cuda", gpus=[0], quick=True)
    registry = workers.Workers(preload=forkserver.preload_modules("gemm_mlp", "cuda"))
    try:
        server = registry.fork_server()
        assert server is not None, registry.start_note
        assert not server.facts["cuda_initialized"] and server.facts["stopped_import_in_child"] is None
        assert "triton" in server.facts["preloaded"] and server.facts["forbidden_loaded"] == []
        # Dynamo, not Inductor's graph on CUDA: its import asks torch.cuda.is_available() (forkserver.COMPILER_FOR_CUDA)
        assert "torch._inductor.graph" not in server.facts["preloaded"] and server.facts["env_kept"] == []
        assert "torch._dynamo" in server.facts["preloaded"]
        for spec_job, arm in zip(plan.jobs(), arms):
            record = job.run_job(spec_job, arm, 0, 900, registry)
            assert record is not None and record["ok"], record.get("traceback") if record else None
            assert record["start"] == "forkserver" and record["start_facts"]["cuda_initialized_at_start"] is False
            assert not record["mismatch"] and not record["not_applied"], record["not_applied"]
            assert record["kernel_ms"] and record["kernel_ms"] > 0, record.get("kernel_ms_error")
            assert any(
                s["key"] == "triton.cudagraphs" and s["compiled_with"] is True
                for a in record["attestations"]
                for s in a["settings"]
            )
    finally:
        registry.remove_dirs()


def test_no_module_a_cuda_server_preloads_asks_cuda_at_import():
    """A server for CUDA runs must not start CUDA's or NVML's threads: nothing it imports may call
    ``torch.cuda.is_available()`` (``torch._inductor.graph`` does, through ``runtime/benchmarking.py``)."""
    pytest.importorskip("transformers")
    modules = [m for m in forkserver.preload_modules("hf:tinyllama-2layer", "cuda") if m not in ("torch", "triton")]
    code = (
        "import sys, torch\n"
        "calls = []\n"
        "torch.cuda.is_available = lambda: calls.append(1) or False\n"
        f"for name in {modules!r}: __import__(name)\n"
        "print(len(calls), 'torch._inductor.runtime.benchmarking' in sys.modules)\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout.split() == ["0", "False"]


def test_a_server_refused_for_threads_names_the_imports_that_started_them():
    from types import SimpleNamespace

    from inductor_knobs.ablation.preload import preload

    assert "new_threads" in preload(["json"])  # the preload records it for every import
    facts = {
        "preloaded": ["torch", "torch._dynamo"],
        "stopped": {},
        "stopped_import_in_child": None,
        "threads": 3,
        "python_threads": 1,
        "new_threads": {"torch._dynamo": 2},
    }
    server = SimpleNamespace(facts=facts, modules=["torch", "torch._dynamo"], lost=False)
    why = forkserver.ForkServer._unsafe(server)
    assert "kept 3 threads" in why and "threads started by: torch._dynamo +2" in why
