"""ik.serving.save_serving_bundle / ik.serving.load_serving_bundle: a fresh process serves with every Inductor compile a cache
hit,
proven from torch's own counters and the attestations; and every bundle that does not fit is refused with nothing loaded.

The bundle is built once per module in a subprocess (bundle_worker.py), and loaded in a second fresh process
on an empty TORCHINDUCTOR_CACHE_DIR, as on a new serving host.  The refusals run in this process, each
checking inside torch that nothing was loaded: ``torch.compiler.load_cache_artifacts`` never called,
torch's cache directory still empty, Dynamo never traced the model, torch's cache counters unchanged.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
import sys
import types
from pathlib import Path

import pytest
import torch

import inductor_knobs as ik
from inductor_knobs.core.events import RuntimeEvent
from inductor_knobs.errors import InvalidKnobValue
from inductor_knobs.serving import bundle_format, compile_cache, first_call_costs
from inductor_knobs.serving.cold_start import ColdStartProof, ColdStartRecorder
from inductor_knobs.serving.signature import from_json, input_signature, to_json

WORKER = Path(__file__).with_name("bundle_worker.py")
sys.path.insert(0, str(WORKER.parent))


def run_worker(
    mode: str, path: Path, cache: Path, *extra: str, timeout: float = 900, variables: dict[str, str] | None = None
) -> dict:
    """One fresh process on its own (empty) Inductor and Triton cache directories, with no ``INDUCTOR_KNOBS_*``
    variable but ``variables``; one that runs past ``timeout`` seconds fails the test with what it wrote to
    stderr (a loading worker dumps its stacks there every 20 s)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("INDUCTOR_KNOBS_")}
    env.update({"TORCHINDUCTOR_CACHE_DIR": str(cache), "TRITON_CACHE_DIR": str(cache / "triton"), **(variables or {})})
    command = [sys.executable, str(WORKER), mode, str(path), *extra]
    try:
        out = subprocess.run(command, env=env, capture_output=True, text=True, timeout=timeout)
    except subprocess.TimeoutExpired as err:
        said = err.stderr.decode(errors="replace") if isinstance(err.stderr, bytes) else str(err.stderr)
        pytest.fail(f"{mode} ran past {timeout} s; its stderr ends: {said[-6000:]}")
    assert out.returncode == 0, out.stderr[-4000:]
    return json.loads(out.stdout.strip().splitlines()[-1])


@pytest.fixture(scope="module")
def built(private_base, tmp_path_factory):
    """The bundle, built once in its own process (which autotunes the bmm: the control for the load)."""
    if not torch_compat_has_artifacts():
        pytest.skip(f"torch {torch.__version__} has no cache artifacts API")
    if torch.backends.cpu.get_cpu_capability() not in ("AVX2", "AVX512"):
        pytest.skip("Inductor's C++ GEMM template needs AVX2 or AVX512")
    path = private_base / "model.bundle"
    result = run_worker("build", path, tmp_path_factory.mktemp("inductor-build"))
    assert result["benchmarked"] == 2, result  # one bmm per length: the build paid for autotuning
    return path, result


def torch_compat_has_artifacts() -> bool:
    from inductor_knobs.core import torch_compat

    return bool(torch_compat.installed().has_cache_artifacts)


@pytest.fixture
def bundle(built, private_dir):
    """A private copy of the built bundle that a test may damage."""
    path = private_dir / "model.bundle"
    shutil.copyfile(built[0], path)
    path.chmod(0o600)
    return path


def rewrite_header(path: Path, edit, *, reseal: bool = True) -> None:
    """Apply ``edit(header)``; with ``reseal`` also recompute the header's sha256 (a genuinely foreign file)."""
    magic, line, payload = path.read_bytes().split(b"\n", 2)
    header = json.loads(line)
    edit(header)
    if reseal:
        header["header_sha256"] = compile_cache._header_digest(header)
    path.write_bytes(magic + b"\n" + json.dumps(header, sort_keys=True).encode() + b"\n" + payload)


# --- the round trip: a fresh process on an empty cache directory ---------------------------------------


def test_a_fresh_process_compiles_nothing_cold_from_the_bundle(built, tmp_path):
    cache = tmp_path / "empty-inductor-cache"
    loaded = run_worker("load", built[0], cache)
    proof, counters = loaded["proof"], loaded["counters"]
    # torch's own counters in the loading process: every FX graph and AOTAutograd lookup hit, none missed.
    assert counters.get("inductor.fxgraph_cache_hit", 0) >= 2, counters
    assert counters.get("aot_autograd.autograd_cache_hit", 0) >= 2, counters
    for missed in ("inductor.fxgraph_cache_miss", "inductor.fxgraph_cache_bypass", "aot_autograd.autograd_cache_miss"):
        assert counters.get(missed, 0) == 0, counters
    # The attestations read inside each compile: Dynamo traced both lengths, Inductor compiled nothing.
    assert len(proof["dynamo_compiles"]) == 2
    assert proof["inductor_compiles"] == 2 and proof["inductor_compiled"] == 0, proof["attestations"]
    assert all(a["cache"] in ("aot_autograd", "fx_graph") for a in proof["attestations"])
    assert all(s["compiled_with"] == 1 for a in proof["attestations"] for s in a["settings"] if s["key"] == "compile_threads")
    # Nothing autotuned (the build benchmarked twice), nothing cold, the guard seeded and quiet.
    assert proof["autotune_benchmarks"] == 0 and not [r for r in proof["autotune"] if not r["from_cache"]]
    assert proof["cold"] == [], proof["cold"]
    assert loaded["buckets"] == [48, 56]
    assert loaded["guard_calls"] == 1
    # A loaded machine may delay the call (host_slower, thread_off_cpu, a collection); nothing cold may cause it.
    host_only = ("host_slower", "thread_off_cpu", "python_gc", "unattributed")
    assert all(c["kind"] in host_only for s in loaded["guard_stalls"] for c in s["causes"]), loaded["guard_stalls"]
    assert "nothing compiled, autotuned or Triton-compiled cold" in loaded["table"]
    # A CPU build has no Triton kernels to carry: the field is there, empty, and the load restored none.
    header, _ = compile_cache.read_file(str(built[0]), False, "test")
    assert header["serving"]["triton_kernels"] == {"kernels": [], "carried": 0, "bytes": 0, "not_found": 0}
    assert proof["triton_kernels_restored"] == 0


def test_a_bundle_written_before_the_triton_kernels_still_loads(built, private_dir, tmp_path):
    old = private_dir / "v1.bundle"
    shutil.copyfile(built[0], old)
    old.chmod(0o600)

    def version_1(header):
        header["serving"]["version"] = 1
        del header["serving"]["triton_kernels"]

    rewrite_header(old, version_1)
    loaded = run_worker("load", old, tmp_path / "empty")
    assert loaded["proof"]["cold"] == [] and loaded["proof"]["inductor_compiled"] == 0, loaded["table"]
    assert loaded["proof"]["triton_kernels_restored"] == 0


@pytest.mark.parametrize("key", ["..", "../../escaped", "/tmp/abs"])
def test_a_bundle_whose_triton_kernel_escapes_the_cache_is_refused_with_nothing_written(
    bundle, nothing_loaded, monkeypatch, tmp_path, key
):
    triton = tmp_path / "triton-cache"
    monkeypatch.setenv("TRITON_CACHE_DIR", str(triton))
    magic, line, payload = bundle.read_bytes().split(b"\n", 2)
    header = json.loads(line)
    header["serving"]["triton_kernels"] = {
        "kernels": [{"key": key, "device": 0, "files": [["k.cubin", 4]]}],
        "carried": 1,
        "bytes": 4,
        "not_found": 0,
    }
    payload += b"ELF!"
    header["payload_sha256"] = hashlib.sha256(payload).hexdigest()  # a tampered file resealed: only the names can tell
    header["header_sha256"] = compile_cache._header_digest(header)
    bundle.write_bytes(magic + b"\n" + json.dumps(header, sort_keys=True).encode() + b"\n" + payload)
    with pytest.raises(
        ik.serving.CompileCacheRefused, match=rf"load_serving_bundle\('{bundle}'\) refused: its Triton kernels entry names kernel"
    ):
        load(bundle, nothing_loaded)
    nothing_loaded.check()
    assert not triton.exists() and not (tmp_path.parent / "escaped").exists()


def test_a_bundle_that_does_not_cover_the_model_raises_naming_the_cold_compiles(built, tmp_path):
    refused = run_worker("load-other", built[0], tmp_path / "empty")
    assert refused["proof"]["inductor_compiled"] == 2
    assert "2 Inductor compile(s) no cache served" in refused["raised"] and "on_cold='warn'" in refused["raised"]
    assert refused["counters"].get("inductor.fxgraph_cache_miss", 0) >= 1


def test_the_guard_is_seeded_with_the_builds_per_shape_baselines(built):
    header, _ = compile_cache.read_file(str(built[0]), False, "test")
    spec = bundle_format.decode("test", header)
    guard = ik.serving.no_stalls(lambda x: x, on="record", warmup=spec.report)
    written = {from_json(s): v for s, v in header["serving"]["baselines"]["shape_seconds"]}
    assert len(written) == 2 and guard.shape_seconds() == written
    # A warmed shape is neither new nor profiled: it is judged against its own median from the first call.
    assert guard.seen_shapes() >= set(written)


def test_signatures_read_back_as_torch_objects():
    signature = input_signature((torch.zeros(2, 3), 5), {"mask": torch.ones(1, 4, dtype=torch.bfloat16)})
    back = from_json(json.loads(json.dumps(to_json(signature))))
    assert back == signature and hash(back) == hash(signature)
    assert to_json(input_signature((object(),), {})) is None  # a type a file cannot name: left out, not guessed
    with pytest.raises(ValueError, match="not a torch dtype"):
        from_json([{"dtype": "torch.nonsense", "shape": [1], "device": "cpu"}])


# --- refusals: nothing loaded ------------------------------------------------------------------------


@pytest.fixture
def nothing_loaded(monkeypatch, tmp_path):
    """Refusals run here: a spy on torch's loader, a private cache directory, a model that records its calls."""
    if not torch_compat_has_artifacts():
        pytest.skip(f"torch {torch.__version__} has no cache artifacts API")
    cache = tmp_path / "inductor-in-process"
    monkeypatch.setenv("TORCHINDUCTOR_CACHE_DIR", str(cache))
    loads = []
    real = torch.compiler.load_cache_artifacts
    monkeypatch.setattr(torch.compiler, "load_cache_artifacts", lambda payload: loads.append(payload) or real(payload))
    from bundle_worker import Model
    from torch._dynamo.utils import counters

    calls = []

    class Recorded(Model):
        def forward(self, x):
            calls.append(x.shape)
            return super().forward(x)

    before = {group: dict(counters[group]) for group in ("inductor", "aot_autograd", "stats")}

    def check():
        assert loads == [], "torch.compiler.load_cache_artifacts was called"
        assert not cache.exists() or not any(cache.rglob("*")), list(cache.rglob("*"))
        assert calls == [], "Dynamo traced (or ran) the model"
        assert {group: dict(counters[group]) for group in before} == before

    return types.SimpleNamespace(model=Recorded(), check=check)


def load(path, nothing_loaded, **kwargs):
    from bundle_worker import factory

    return ik.serving.load_serving_bundle(path, nothing_loaded.model, factory=factory, **kwargs)


@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("torch", "2.99.0"),
        ("triton", "9.9.9"),
        ("device", "cuda:NVIDIA H200 sm_90 132 SMs"),
        ("knobs_digest", "0123456789abcdef"),
    ],
)
def test_a_foreign_bundle_is_refused_naming_the_difference(bundle, nothing_loaded, field, value):
    here = compile_cache.identity(ik.Knobs())[field] if field != "knobs_digest" else None
    rewrite_header(bundle, lambda h: h.update({field: value}))
    with pytest.raises(ik.serving.CompileCacheRefused) as err:
        load(bundle, nothing_loaded)
    assert f"load_serving_bundle({str(bundle)!r}) refused: built for another setup" in str(err.value)
    assert f"{field}: file {value!r}, here " in str(err.value)
    if here is not None:
        assert f"here {here!r}" in str(err.value)
    nothing_loaded.check()


def test_a_bundle_from_another_gpu_torch_and_knob_set_names_each_difference(bundle, nothing_loaded):
    foreign = {"torch": "2.99.0", "device": "cuda:NVIDIA H100 80GB HBM3 sm_90 132 SMs", "knobs_digest": "0" * 16}
    rewrite_header(bundle, lambda h: h.update(foreign))
    with pytest.raises(ik.serving.CompileCacheRefused) as err:
        load(bundle, nothing_loaded)
    for field, value in foreign.items():
        assert f"{field}: file {value!r}" in str(err.value)
    nothing_loaded.check()


def test_a_bundle_whose_compile_call_this_torch_lacks_is_refused_naming_it_with_the_rest(bundle, nothing_loaded):
    def from_a_newer_torch(header):
        header.update(torch="2.99.0")
        header["serving"]["compile"]["mode"] = "max-autotune-ultra"  # a mode this torch does not know

    rewrite_header(bundle, from_a_newer_torch)
    with pytest.raises(ik.serving.CompileCacheRefused) as err:
        load(bundle, nothing_loaded)
    assert "torch: file '2.99.0'" in str(err.value)
    assert "knobs_digest: file " in str(err.value) and "does not build here" in str(err.value)
    assert "max-autotune-ultra" in str(err.value)
    nothing_loaded.check()


def test_knobs_other_than_the_bundles_are_refused_naming_each(bundle, nothing_loaded):
    with pytest.raises(
        ik.serving.CompileCacheRefused,
        match=r"gemm_backends: bundle 'ATEN,CPP', here 'ATEN'; min_sms: bundle '\(unset\)', here 40",
    ):
        load(bundle, nothing_loaded, knobs=ik.Knobs(gemm_backends="ATEN", min_sms=40))
    nothing_loaded.check()


def _built_under(**setup):
    def change(header):
        for field, entries in setup.items():
            header["setup"][field].update(entries)

    return change


@pytest.mark.parametrize(
    ("change", "message"),
    [
        (
            _built_under(knobs={"min_sms": 40}, sources={"min_sms": "env"}),
            r"INDUCTOR_KNOBS_MIN_SMS: file 40, here absent",
        ),
        (
            _built_under(environment={"TORCHINDUCTOR_MAX_AUTOTUNE": "1"}),
            r"environment.TORCHINDUCTOR_MAX_AUTOTUNE: file '1', here absent",
        ),
    ],
    ids=["env-knob", "torch-variable"],
)
def test_a_bundle_built_under_another_setup_is_refused_naming_each_difference(bundle, nothing_loaded, change, message):
    rewrite_header(bundle, change)
    with pytest.raises(ik.serving.CompileCacheRefused, match=rf"built for another setup \(.*{message}"):
        load(bundle, nothing_loaded)
    nothing_loaded.check()


def test_a_bundle_of_another_compute_capability_is_refused(bundle, nothing_loaded):
    rewrite_header(bundle, lambda h: h["setup"].update(capability="sm_121"))
    with pytest.raises(ik.serving.CompileCacheRefused, match=r"capability: file 'sm_121', here None"):
        load(bundle, nothing_loaded)
    nothing_loaded.check()


CDT = "INDUCTOR_KNOBS_COORDINATE_DESCENT_TUNING"


@pytest.fixture(scope="module")
def built_under_a_variable(private_base, tmp_path_factory):
    """A one-kernel bundle built in a fresh process under ``INDUCTOR_KNOBS_COORDINATE_DESCENT_TUNING=0``."""
    if not torch_compat_has_artifacts():
        pytest.skip(f"torch {torch.__version__} has no cache artifacts API")
    path = private_base / "small-under-a-variable.bundle"
    result = run_worker("build-small", path, tmp_path_factory.mktemp("inductor-build-small"), variables={CDT: "0"})
    assert result["knobs"] == {"coordinate_descent_tuning": False} and result["sources"] == {"coordinate_descent_tuning": "env"}
    return path


@pytest.mark.parametrize(
    ("variables", "refused"),
    [
        ({CDT: "0"}, None),
        ({CDT: "1"}, f"{CDT}: file False, here True"),
        ({}, f"{CDT}: file False, here absent"),
    ],
    ids=["same", "other-value", "unset"],
)
def test_a_fresh_process_loads_a_bundle_built_under_the_same_variables(built_under_a_variable, tmp_path, variables, refused):
    """The load compares the knobs this process's variables ask for, which activation applies only at the first
    compile (after the check; never for an AOT load): the same variables load, others are refused naming each."""
    loaded = run_worker("load-small", built_under_a_variable, tmp_path / "cache", variables=variables)
    if refused is None:
        assert loaded["refused"] is None
    else:
        assert refused in loaded["refused"] and "built for another setup" in loaded["refused"]


@pytest.mark.parametrize(
    ("damage", "message"),
    [
        (lambda p: p.write_bytes(p.read_bytes()[:-100]), "the payload does not match its sha256"),
        (lambda p: p.write_bytes(p.read_bytes()[:-1] + bytes([p.read_bytes()[-1] ^ 1])), "the payload does not match its sha256"),
        (
            lambda p: rewrite_header(p, lambda h: h["serving"].update(buckets=[8, 16]), reseal=False),
            "header does not match its sha256",
        ),
        (lambda p: rewrite_header(p, lambda h: h.update(torch="2.99.0"), reseal=False), "header does not match its sha256"),
        (lambda p: p.write_bytes(p.read_bytes()[:20]), "not an inductor_knobs compile cache file"),
        (lambda p: p.write_bytes(b"garbage\n{}\n"), "not an inductor_knobs compile cache file"),
        (lambda p: rewrite_header(p, lambda h: h["serving"].pop("shapes")), "serving section does not read back"),
        (lambda p: rewrite_header(p, lambda h: h["serving"].update(version=5)), "serving section version 5"),
        (lambda p: rewrite_header(p, lambda h: h.pop("serving")), "a compile cache without a serving section"),
    ],
    ids=[
        "truncated",
        "byte-flipped",
        "serving-edited",
        "identity-edited",
        "cut-in-header",
        "not-a-cache",
        "malformed",
        "version",
        "cache",
    ],
)
def test_a_damaged_bundle_is_refused_with_nothing_loaded(bundle, nothing_loaded, damage, message):
    damage(bundle)
    with pytest.raises(ik.serving.CompileCacheRefused, match=message) as err:
        load(bundle, nothing_loaded)
    assert str(bundle) in str(err.value)
    nothing_loaded.check()


def test_a_missing_bundle_is_refused(private_dir, nothing_loaded):
    with pytest.raises(ik.serving.CompileCacheRefused, match=r"load_serving_bundle\('.*absent\.bundle'\): no such file"):
        load(private_dir / "absent.bundle", nothing_loaded)
    nothing_loaded.check()


def test_a_symlinked_bundle_is_refused(bundle, private_dir, nothing_loaded):
    link = private_dir / "link.bundle"
    link.symlink_to(bundle)
    with pytest.raises(
        ik.serving.CompileCacheRefused, match=r"load_serving_bundle\(.*link\.bundle'\) refused: .*is a symbolic link"
    ):
        load(link, nothing_loaded)
    nothing_loaded.check()


@pytest.mark.parametrize("mode", [0o775, 0o777])
def test_a_bundle_in_a_group_writable_directory_is_refused(bundle, private_dir, nothing_loaded, mode):
    shared = private_dir / "shared"
    shared.mkdir()
    moved = shared / "model.bundle"
    bundle.rename(moved)
    shared.chmod(mode)
    with pytest.raises(
        ik.serving.CompileCacheRefused, match=rf"the directory {shared} is writable by group or others without the sticky bit"
    ):
        load(moved, nothing_loaded)
    nothing_loaded.check()


def test_a_bundle_writable_by_others_is_refused(bundle, nothing_loaded):
    bundle.chmod(0o666)
    with pytest.raises(ik.serving.CompileCacheRefused, match="the file is writable by group or others"):
        load(bundle, nothing_loaded)
    nothing_loaded.check()


def test_bad_arguments_are_refused_before_the_file_is_read(bundle, nothing_loaded):
    from bundle_worker import factory

    with pytest.raises(InvalidKnobValue, match=r"on_cold='never'.*allowed 'raise' or 'warn'"):
        load(bundle, nothing_loaded, on_cold="never")
    with pytest.raises(InvalidKnobValue, match=r"model/factory"):
        ik.serving.load_serving_bundle(bundle, nothing_loaded.model, factory=None)  # type: ignore[arg-type]
    with pytest.raises(InvalidKnobValue, match=r"load_serving_bundle\(on='loud'\)"):
        ik.serving.load_serving_bundle(bundle, nothing_loaded.model, factory=factory, on="loud")
    nothing_loaded.check()


# --- saving: what cannot be written is refused -------------------------------------------------------


def test_save_refuses_what_is_not_an_ik_compile_result_or_a_shaped_report(tmp_path):
    if not torch_compat_has_artifacts():
        pytest.skip(f"torch {torch.__version__} has no cache artifacts API: every save is refused first")
    report = ik.serving.warmup(lambda x: x, shapes=[1], factory=torch.zeros, probes=None)
    with pytest.raises(InvalidKnobValue, match=r"served=.*an ik.compile result"):
        ik.serving.save_serving_bundle(tmp_path / "b", lambda x: x, report)
    compiled = ik.compile(torch.nn.Linear(2, 2))
    unshaped = ik.serving.warmup(lambda x: x, inputs=[torch.zeros(1)], probes=None)
    with pytest.raises(InvalidKnobValue, match=r"report=.*shapes=..., factory="):
        ik.serving.save_serving_bundle(tmp_path / "b", compiled, unshaped)
    odd = ik.serving.warmup(lambda x: x, shapes=[object()], factory=lambda s: torch.zeros(1), probes=None)
    with pytest.raises(InvalidKnobValue, match=r"shape=.*plain data that JSON writes and reads back"):
        ik.serving.save_serving_bundle(tmp_path / "b", compiled, odd)
    assert not (tmp_path / "b").exists()


def test_shapes_and_buckets_read_back_type_for_type():
    assert bundle_format._unitem(json.loads(json.dumps(bundle_format._item((1, [2, (3,)]))))) == (1, [2, (3,)])
    compiled = ik.compile(torch.nn.Linear(2, 2), dynamic=False)
    report = ik.serving.warmup(lambda x: x, shapes=[4, 2], factory=torch.zeros, probes=None)
    section, _ = bundle_format.encode(compiled, report, None)
    assert section["buckets"] == [2, 4] and section["shapes"] == [4, 2]
    assert section["compile"] == {"knobs": {}, "mode": None, "options": None, "torch_compile": {"dynamic": False}}


# --- the proof ------------------------------------------------------------------------------------------


def test_the_proof_names_every_cold_thing():
    hit = types.SimpleNamespace(cache="fx_graph", graph="inference", compile_id="0/0")
    miss = types.SimpleNamespace(cache=None, graph="inference", compile_id="1/0")
    tuned = RuntimeEvent("runtime_benchmark", 0.2, "triton_red_fused_0")
    captured = RuntimeEvent("cudagraph_recording", 0.01, "ik.serving.capture_cuda_graphs: shape 128")
    proof = ColdStartProof(attestations=[hit, miss], runtime=[tuned, captured], triton=(3, 40))  # type: ignore[list-item]
    assert proof.inductor_hits == {"fx_graph": 1} and proof.captures == 1 and proof.triton_compiled == 3
    assert proof.cold() == [
        "1 Inductor compile(s) no cache served (inference 1/0)",
        "1 runtime benchmark(s) (triton_red_fused_0)",
        "3 Triton compile(s) (Triton's cache missed)",
    ]
    clean = ColdStartProof(attestations=[hit], runtime=[captured], triton=(0, 40))  # type: ignore[list-item]
    assert clean.cold() == [] and "Triton: 0 compiled, 40 from Triton's cache" in clean.table()
    unknown = ColdStartProof(attestations=[hit], triton=None)  # type: ignore[list-item]
    assert "not observable" in unknown.table()


def test_the_bundle_exports_are_public():
    for name in ("save_serving_bundle", "load_serving_bundle", "ServingBundle", "ColdStartProof", "ColdStartCompiled"):
        assert name in ik.serving.__all__ and getattr(ik.serving, name) is not None


# --- Triton's compilation listener (a stand-in Triton: none is installed with the CPU wheel) -------------


@pytest.fixture
def fake_triton(monkeypatch):
    """``triton.knobs.compilation`` as Triton 3.4+ has it, with a listener already there (the CPU wheel has no Triton)."""
    previous_calls = []

    def previous(**kwargs):
        previous_calls.append(kwargs["cache_hit"])

    compilation = types.SimpleNamespace(listener=previous)
    monkeypatch.setattr(first_call_costs, "triton_compilation", lambda *triton: compilation)
    # Imported, as the listener's hook waits for Triton's import (on_import).
    monkeypatch.setitem(sys.modules, "triton", sys.modules.get("triton") or types.ModuleType("triton"))
    return types.SimpleNamespace(compilation=compilation, previous=previous, calls=previous_calls)


def compile_heard(compilation, cache_hit):
    compilation.listener(src=None, metadata={}, metadata_group={}, times=None, cache_hit=cache_hit)


def test_triton_compiles_are_counted_by_whether_tritons_cache_served_them(fake_triton):
    assert first_call_costs.triton_compiles() is None
    with ColdStartRecorder():
        assert fake_triton.compilation.listener is not fake_triton.previous
        before = first_call_costs.triton_compiles()
        compile_heard(fake_triton.compilation, False)
        compile_heard(fake_triton.compilation, True)
        after = first_call_costs.triton_compiles()
    assert after is not None and before is not None and (after[0] - before[0], after[1] - before[1]) == (1, 1)
    assert fake_triton.calls == [False, True]  # the listener that was there still hears every compile
    assert fake_triton.compilation.listener is fake_triton.previous  # put back by identity
    assert first_call_costs.triton_compiles() is None


@pytest.mark.parametrize(("cache_hit", "kind"), [(True, "triton_load"), (False, "triton_compile")])
def test_a_precompile_without_a_triton_compile_is_named_a_load(fake_triton, fake_clock, cache_hit, kind):
    from inductor_knobs.core.recorder import Subscription

    heard = []

    class Listener:
        patches = (first_call_costs.FIRST_CALL_HOOKS,)

        def on_runtime(self, event):
            heard.append(event)

    def precompile():
        compile_heard(fake_triton.compilation, cache_hit)
        fake_clock.spend(0.5)

    with Subscription(Listener()):
        timed = first_call_costs._timed_wrapper("triton_compile")
        timed(precompile, types.SimpleNamespace(fn=types.SimpleNamespace(__name__="triton_poi_0")), (), {})
    assert [(e.kind, e.seconds, e.detail) for e in heard if e.kind.startswith("triton")] == [(kind, 0.5, "triton_poi_0")]


# --- GPU: the whole load path, CUDA graphs and Triton included ----------------------------------------------


@pytest.mark.gpu
def test_on_a_gpu_the_load_compiles_nothing_and_captures_one_graph_per_shape(private_dir, tmp_path):
    if not torch.cuda.is_available():
        pytest.skip("needs a CUDA GPU")
    path = private_dir / "gpu.bundle"
    run_worker("build", path, tmp_path / "build", "cuda")
    loaded = run_worker("load", path, tmp_path / "empty", "cuda")  # empty TORCHINDUCTOR_CACHE_DIR and TRITON_CACHE_DIR
    proof = loaded["proof"]
    assert proof["inductor_compiled"] == 0 and proof["autotune_benchmarks"] == 0, loaded["table"]
    assert proof["triton_compiled"] in (0, None), loaded["table"]  # None: Triton < 3.4 cannot say
    # The coordinate-descent winners, compiled after the FX graph cache entry was written, came from the bundle.
    assert proof["triton_kernels_restored"] >= 1, loaded["table"]
    header, _ = compile_cache.read_file(str(path), False, "test")
    assert header["serving"]["triton_kernels"]["carried"] >= proof["triton_kernels_restored"], header["serving"]["triton_kernels"]
    assert proof["captures"] == 2 and loaded["replays"] == 1, loaded["table"]
    assert proof["cold"] == [] and loaded["guard_stalls"] == [], loaded["table"]


def test_sha_of_the_built_header_is_checked(built):
    header, _ = compile_cache.read_file(str(built[0]), False, "test")
    rest = {k: v for k, v in header.items() if k != "header_sha256"}
    assert header["header_sha256"] == hashlib.sha256(json.dumps(rest, sort_keys=True).encode()).hexdigest()


@pytest.mark.parametrize("on_cold", ["raise", "warn"])
def test_a_cold_load_raises_or_warns_by_policy_with_the_proof(bundle, nothing_loaded, monkeypatch, on_cold):
    from inductor_knobs.serving import bundle as bundle_module

    miss = types.SimpleNamespace(cache=None, graph="inference", compile_id="0/0")
    cold = ColdStartProof(attestations=[miss])  # type: ignore[list-item]

    def fake_load(label, header, payload, spec, compiled, factory, kernels):
        return bundle_module.ServingBundle(compiled, compiled, None, cold, spec.buckets, spec.report, header)

    monkeypatch.setattr(bundle_module, "_load", fake_load)
    if on_cold == "raise":
        with pytest.raises(
            ik.serving.ColdStartCompiled, match=r"the load compiled cold: 1 Inductor compile\(s\) no cache served"
        ) as err:
            load(bundle, nothing_loaded, on_cold=on_cold)
        assert err.value.proof is cold and err.value.bundle.guard is not None
    else:
        with pytest.warns(ik.serving.ColdStartWarning, match="inference 0/0"):
            loaded = load(bundle, nothing_loaded, on_cold=on_cold)
        assert loaded.proof is cold and loaded.buckets == (48, 56)
