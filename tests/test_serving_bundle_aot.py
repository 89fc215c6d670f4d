"""ik.serving.save_serving_bundle(aot=True) / ik.serving.load_serving_bundle(path, None): an AOTInductor package serves in a fresh
process with no Dynamo trace, no Inductor compile and no autotune, proven from torch's own counters; every bundle
that does not fit is refused with nothing loaded (AOTInductor's loader never called).

The bundle is built once per module in a subprocess (bundle_worker.py build-aot) and loaded in a second fresh
process on an empty TORCHINDUCTOR_CACHE_DIR, as on a new serving host.
"""

from __future__ import annotations

import contextlib
import inspect
import json
import os
import shutil
import sys
import threading
import types
from types import SimpleNamespace

import pytest
import torch
from test_serving_bundle import rewrite_header, run_worker

import inductor_knobs as ik
from inductor_knobs.core import torch_compat
from inductor_knobs.errors import InvalidKnobValue
from inductor_knobs.serving import aot_package, compile_cache

#: AOTInductor packages (``torch._inductor.aoti_compile_and_package``/``aoti_load_package``) are torch 2.7+; before,
#: ``save_serving_bundle(aot=True)`` is refused (NotSupportedOnThisTorch) before anything here is reached.
pytestmark = pytest.mark.skipif(
    not torch_compat.installed().has_aot_packages, reason=f"torch {torch.__version__} has no AOTInductor packages (2.7+)"
)
#: Whether this torch has AOTInductor's multi-arch kernel switch (save_serving_bundle(portable=True) turns it on).
HAS_MULTI_ARCH = aot_package.MULTI_ARCH in torch_compat.installed().config_keys(torch._inductor.config)


@pytest.fixture(scope="module")
def built_aot(private_base, tmp_path_factory):
    """The AOT bundle, built once in its own process (its autotuning is the control for the load)."""
    if not torch_compat.installed().has_aot_packages:
        pytest.skip(f"torch {torch.__version__} has no AOTInductor packages")
    if torch.backends.cpu.get_cpu_capability() not in ("AVX2", "AVX512"):
        pytest.skip("Inductor's C++ GEMM template needs AVX2 or AVX512")
    path = private_base / "model-aot.bundle"
    result = run_worker("build-aot", path, tmp_path_factory.mktemp("inductor-build-aot"))
    assert result["benchmarked"] == 2, result
    return path


@pytest.fixture
def aot_bundle(built_aot, private_dir):
    path = private_dir / "model-aot.bundle"
    path.write_bytes(built_aot.read_bytes())
    path.chmod(0o600)
    return path


@pytest.fixture
def nothing_loaded(monkeypatch, tmp_path):
    """Refusals run here: spies on AOTInductor's loader and torch's cache loader, a model that records calls."""
    monkeypatch.setenv("TORCHINDUCTOR_CACHE_DIR", str(tmp_path / "inductor-in-process"))
    loads: list[object] = []
    monkeypatch.setattr(torch._inductor, "aoti_load_package", lambda *a, **k: loads.append(a))
    monkeypatch.setattr(torch.compiler, "load_cache_artifacts", lambda *a, **k: loads.append(a))
    from bundle_worker import Model

    calls = []

    class Recorded(Model):
        def forward(self, x):
            calls.append(x.shape)
            return super().forward(x)

    def check():
        assert loads == [], "a package or cache artifacts were loaded"
        assert calls == [], "the model ran"

    return types.SimpleNamespace(model=Recorded(), check=check)


def fake_loader(run, args, kwargs):
    """Stands in for torch's C++ loader of a package exported for ``(args, kwargs)``: its call specs, and
    ``boxed_run`` calling ``run`` with the flat tensors (one output)."""
    from torch.utils import _pytree

    in_spec = _pytree.treespec_dumps(_pytree.tree_flatten((args, kwargs))[1])
    out_spec = _pytree.treespec_dumps(_pytree.tree_flatten(torch.zeros(1))[1])
    return types.SimpleNamespace(get_call_spec=lambda: [in_spec, out_spec], boxed_run=lambda flat: [run(*flat)])


def load(path, model=None, **kwargs):
    from bundle_worker import factory

    return ik.serving.load_serving_bundle(path, model, factory=factory, **kwargs)


# --- the round trip ------------------------------------------------------------------------------------


def test_a_fresh_process_serves_the_package_without_dynamo_inductor_or_autotune(built_aot, tmp_path):
    cache = tmp_path / "empty-inductor-cache"
    loaded = run_worker("load-aot", built_aot, cache)
    proof, counters = loaded["proof"], loaded["counters"]
    # The load, the guard and a warmed call imported neither Inductor nor Dynamo: torch's C++ loader served, and
    # the guard's hooks wait for those modules' import (the seconds a serving host's first request pays).
    assert loaded["imported"] == [], loaded["imported"]
    # torch's own counters in the serving process: Dynamo captured no graph, Inductor looked nothing up.
    assert counters.get("stats.unique_graphs", 0) == 0 and counters.get("stats.calls_captured", 0) == 0, counters
    assert not [k for k, n in counters.items() if n and k.startswith(("inductor.", "aot_autograd."))], counters
    assert proof["dynamo_compiles"] == [] and proof["inductor_compiles"] == 0 and proof["attestations"] == []
    assert proof["autotune_benchmarks"] == 0 and proof["autotune"] == [] and proof["cold"] == []
    assert "load_package" in proof["seconds"] and "load_artifacts" not in proof["seconds"]
    # Nothing was compiled on the new host: no graph, and not torch's own CPU ISA probes either (cpu_vec_isa's
    # check_build, which aoti_load_package asks from 2.10; the load calls torch's C++ loader itself).
    written = sorted(p.name for p in cache.rglob("*") if p.is_file() and p.suffix not in (".lock",)) if cache.exists() else []
    assert written == [], written
    # The package answers as the eager model does, at a warmed length and at one inside the range it never saw.
    assert loaded["errors"] == {"52": pytest.approx(0.0, abs=1e-5), "56": pytest.approx(0.0, abs=1e-5)}
    assert "dimension 1 = 40 is not served by this package" in loaded["refused"]  # below the warmed lengths
    assert loaded["buckets"] == [48, 56] and loaded["guard_calls"] == 2
    # A CPU call of a fresh AOTInductor model can be slow on a busy host (its thread pool, the guard's own profiler
    # on a new shape, time no hook names), never cold: no compile, autotune, kernel load or first-call cost.
    cold = {"dynamo_compile", "gemm_autotune", "runtime_benchmark", "coordinate_descent", "triton_compile", "triton_load"}
    cold |= {"cudagraph_recording", "cudnn_sdpa_plan", "cublas_first_call", "tunableop", "cudnn_conv", "aten_first_call"}
    for stall in loaded["guard_stalls"]:
        assert not {c["kind"] for c in stall["causes"]} & cold, stall
    header, payload = compile_cache.read_file(str(built_aot), False, "test")
    assert header["serving"]["aot"]["bytes"] == len(payload) and header["artifacts"] == {}
    # What the package accepts: the lengths warmed (one symbol of the export's), float32 on the CPU, contiguous.
    (x,) = header["serving"]["aot"]["inputs"]["positional"]
    assert header["serving"]["aot"]["inputs"]["keywords"] == {}
    assert x["symbols"][0] is None and x["symbols"][1].startswith("s") and x["symbols"][2] is None
    assert x == {
        "name": "x", "dtype": "float32", "device": "cpu", "ndim": 3, "sizes": [[4, 4], [48, 56], [64, 64]],
        "symbols": x["symbols"], "strides": "contiguous",
    }  # fmt: skip
    compilers = aot_package.cpp_compilers()
    first = compilers[1] if len(compilers) > 1 and aot_package.links_libstdcxx_statically(compilers[0]) else compilers[0]
    assert header["serving"]["aot"]["cxx"] == first  # Inductor's own unless passed over: its package loads
    assert header["serving"]["triton_kernels"]["carried"] == 0


def test_the_package_makes_the_warmed_lengths_one_dynamic_dimension():
    from bundle_worker import Model, factory

    calls = [((factory(n),), {}) for n in (48, 56, 64)]
    spec = aot_package.dynamic_shapes("test", Model(), calls)
    (dim,) = spec["x"].values()
    assert list(spec["x"]) == [1] and (dim.min, dim.max) == (48, 64)
    program = torch.export.export(Model(), calls[-1][0], dynamic_shapes=spec, strict=False)
    aot_package._check_export("test", program, calls, spec)  # torch's own program serves every warmed length
    (bounds,) = program.range_constraints.values()
    assert bounds.lower <= 48 and bounds.upper >= 64
    assert aot_package.dynamic_shapes("test", Model(), calls[:1]) is None  # one length: a static export


def test_inputs_whose_sizes_move_together_share_one_dimension():
    class Two(torch.nn.Module):
        def forward(self, ids, mask, scale=1.0):
            return ids * mask * scale

    def call(n):
        return (), {"ids": torch.ones(1, n), "mask": torch.ones(1, n), "scale": 2.0}

    spec = aot_package.dynamic_shapes("test", Two(), [call(8), call(16)])
    assert spec["ids"][1] is spec["mask"][1] and spec["scale"] is None
    program = torch.export.export(Two(), (), call(16)[1], dynamic_shapes=spec, strict=False)
    aot_package._check_export("test", program, [call(8), call(16)], spec)
    with pytest.raises(InvalidKnobValue, match=r"test: factory=.*calls that bind to Two\.forward\(ids, mask, scale=1\.0\)"):
        aot_package.dynamic_shapes("test", Two(), [((1, 2, 3, 4), {})])
    with pytest.raises(InvalidKnobValue, match=r"factory='ids'.*each tensor passed as its own argument of forward"):
        aot_package.dynamic_shapes("test", Two(), [((), {"ids": (torch.ones(1, 8),), "mask": torch.ones(1, 8)})])
    with pytest.raises(InvalidKnobValue, match=r"test: factory='scale'.*non-tensor arguments equal at every shape"):
        aot_package.dynamic_shapes("test", Two(), [call(8), ((), {**call(16)[1], "scale": 3.0})])
    with pytest.raises(InvalidKnobValue, match=r"tensors of one dtype and number of dimensions"):
        aot_package.dynamic_shapes("test", Two(), [call(8), ((), {**call(16)[1], "mask": torch.ones(1, 16, 1)})])


class Branching(torch.nn.Module):
    """Takes another branch past length 50: export narrows the length's range to one side of it."""

    def forward(self, x):
        return x * 2 if x.shape[1] > 50 else x * 3


class SizeAsValue(torch.nn.Module):
    """Uses the length as a number: export fixes it to the example's."""

    def forward(self, y):
        return y * int(y.shape[1])


@pytest.mark.parametrize(
    ("model", "lengths", "message"),
    [
        (Branching(), (48, 56, 64), r"export serves every warmed shape"),
        (SizeAsValue(), (3, 5), r"export serves every warmed shape"),
    ],
    ids=["narrowed", "fixed"],
)
def test_an_export_that_would_serve_warmed_sizes_wrongly_is_refused(model, lengths, message):
    calls = [((torch.ones(2, n),), {}) for n in lengths]
    spec = aot_package.dynamic_shapes("save_serving_bundle('b')", model, calls)
    program = torch.export.export(model, calls[-1][0], dynamic_shapes=spec, strict=False)
    with pytest.raises(InvalidKnobValue, match=message):
        aot_package._check_export("save_serving_bundle('b')", program, calls, spec)


class Times(torch.nn.Module):
    def forward(self, x, scale):
        return x * scale


def contract(module, calls):
    """:func:`aot_package.accepted` of ``module`` exported over ``calls`` as :func:`aot_package.build` does."""
    spec = aot_package.dynamic_shapes("test", module, calls)
    args, kwargs = calls[-1]
    program = torch.export.export(module, tuple(args), dict(kwargs), dynamic_shapes=spec, strict=False)
    names = list(inspect.signature(module.forward).bind(*args, **kwargs).arguments)
    return aot_package.accepted("test", program, calls, names)


def test_the_package_refuses_calls_it_was_not_exported_for_before_running_them():
    ran = []
    calls = [((torch.ones(4, n, 64),), {"scale": torch.ones(1)}) for n in (48, 56)]
    loader = fake_loader(lambda *a: ran.append(a) or "out", *calls[0])
    checked = aot_package.ShapeCheckedPackage(loader, contract(Times(), calls))
    assert checked(torch.ones(4, 52, 64), scale=torch.ones(1)) == "out"  # inside the warmed range
    refusals = [
        ((torch.ones(4, 40, 64),), {"scale": torch.ones(1)}, r"input 'x' dimension 1 = 40 .*allowed 48\.\.56"),
        ((torch.ones(4, 48, 32),), {"scale": torch.ones(1)}, r"input 'x' dimension 2 = 32 .*allowed 64"),
        ((torch.ones(48, 64),), {"scale": torch.ones(1)}, r"input 'x' = torch.Size\(\[48, 64\]\).*3 dimensions"),
        ((torch.ones(4, 48, 64),), {}, r"arguments = 1 positional, keywords \[\].*keywords \['scale'\]"),
        ((torch.ones(4, 48, 64),), {"scale": 1.0}, r"input 'scale' = float .*allowed a tensor of torch.float32 on cpu"),
    ]
    for args, kwargs, message in refusals:
        with pytest.raises(ik.serving.BundleInputRefused, match=message):
            checked(*args, **kwargs)
    assert len(ran) == 1  # nothing refused reached the package


# --- every call is checked against the package's input contract ------------------------------------------


class Scaled(torch.nn.Module):
    """Two inputs whose lengths export ties, and a number it compiles in."""

    def __init__(self) -> None:
        super().__init__()
        torch.manual_seed(0)
        self.w = torch.nn.Parameter(torch.randn(4))

    def forward(self, x, y, scale):
        return torch.relu(x) * self.w * scale + y


def scaled_call(n, scale=2.0):
    g = torch.Generator().manual_seed(n)
    return {"x": torch.randn(n, 4, generator=g), "y": torch.randn(n, 4, generator=g), "scale": scale}


@pytest.fixture(scope="module")
def scaled(private_base, tmp_path_factory):
    """The AOT bundle of :class:`Scaled` warmed at lengths 8 and 16 with scale=2.0, saved and loaded in this process
    (the serving callable's loader counts its runs)."""
    if not torch_compat.installed().has_aot_packages:
        pytest.skip(f"torch {torch.__version__} has no AOTInductor packages")
    path = private_base / "scaled-aot.bundle"
    with pytest.MonkeyPatch.context() as patch, torch.no_grad():
        patch.setenv("TORCHINDUCTOR_CACHE_DIR", str(tmp_path_factory.mktemp("inductor-scaled")))
        compiled = ik.compile(Scaled().eval())
        report = ik.serving.warmup(compiled, shapes=[8, 16], factory=scaled_call, probes=None)
        # a real build with the multi-arch switch on where this torch has it (a CPU model: no fatbin to make)
        header = ik.serving.save_serving_bundle(path, compiled, report, aot=True, factory=scaled_call, portable=True)
        assert header["serving"]["aot"]["multi_arch"] is HAS_MULTI_ARCH
        bundle = ik.serving.load_serving_bundle(path, None, factory=scaled_call)
    served = bundle.served
    runs = []
    real = served.loader
    served.loader = types.SimpleNamespace(boxed_run=lambda tensors: runs.append(1) or real.boxed_run(tensors))
    return types.SimpleNamespace(served=served, runs=runs, inputs=bundle.header["serving"]["aot"]["inputs"])


def test_the_contract_records_dtypes_tied_sizes_layout_and_values(scaled):
    x, y, scale = (scaled.inputs["keywords"][name] for name in ("x", "y", "scale"))
    assert x["dtype"] == y["dtype"] == "float32" and x["device"] == y["device"] == "cpu"
    assert x["sizes"] == y["sizes"] == [[8, 16], [4, 4]] and x["strides"] == y["strides"] == "contiguous"
    assert x["symbols"] == y["symbols"] and x["symbols"][1] is None and x["symbols"][0]  # one symbol: tied
    assert scale == {"name": "scale", "value": 2.0}


def test_accepted_calls_answer_as_the_model(scaled):
    with torch.no_grad():
        for n in (8, 12, 16):  # warmed, and inside the range
            call = scaled_call(n)
            torch.testing.assert_close(scaled.served(**call), Scaled()(**call))


@pytest.mark.parametrize(
    ("change", "message"),
    [
        (
            lambda c: c.update(y=c["y"][:8]),
            r"input 'y' dimension 0 = 8 .*allowed 16: input 'x' dimension 0 and input 'y' dimension 0 are one size",
        ),
        (lambda c: c.update(x=c["x"].double()), r"input 'x' dtype = torch\.float64 .*allowed torch\.float32"),
        (lambda c: c.update(x=c["x"].t().contiguous().t()), r"input 'x' strides = \(1, 16\) .*allowed contiguous strides"),
        (lambda c: c.update(scale=5.0), r"input 'scale' = 5\.0 .*allowed 2\.0, the value the package was exported with"),
        (lambda c: c.update(scale=2), r"input 'scale' = 2 .*allowed 2\.0"),
        (lambda c: c.update(x=c["x"].to("meta")), r"input 'x' device = meta .*allowed a cpu device"),
    ],
    ids=["tied-size", "dtype", "transposed", "value", "value-type", "device"],
)
def test_a_call_the_package_was_not_compiled_for_is_refused_naming_the_input(scaled, change, message):
    call = scaled_call(16)
    change(call)
    before = len(scaled.runs)
    with pytest.raises(ik.serving.BundleInputRefused, match=f"^AOT bundle call: {message}"):
        scaled.served(**call)
    assert len(scaled.runs) == before  # nothing ran


def test_a_refusal_of_torchs_own_input_check_names_the_input(scaled):
    def refuse(*tensors):  # AOTInductor's generated check, where AOTI_RUNTIME_CHECK_INPUTS is set
        raise RuntimeError("input_handles[1]: unmatched dtype, expected: 6(at::kFloat), but got: 7\n")

    checked = aot_package.ShapeCheckedPackage(fake_loader(refuse, (), scaled_call(16)), scaled.inputs)
    with pytest.raises(ik.serving.BundleInputRefused, match=r"input 'y' .*AOTInductor's own input check said: unmatched dtype"):
        checked(**scaled_call(16))


def test_a_non_tensor_the_contract_cannot_record_is_refused_at_save():
    class Pair(torch.nn.Module):
        def forward(self, x, scale):
            return x * scale[0] + scale[1]

    calls = [((torch.ones(2),), {"scale": (2.0, 3.0)})]  # export takes it (two constants); the contract does not
    with pytest.raises(InvalidKnobValue, match=r"factory='scale'.*None, a bool, an int, a finite float or a string"):
        contract(Pair(), calls)


# --- what does not fit is refused, with nothing loaded ----------------------------------------------------


def test_a_model_given_for_an_aot_bundle_is_refused(aot_bundle, nothing_loaded):
    with pytest.raises(InvalidKnobValue, match=r"model=.*allowed None: this AOT bundle serves the model and weights"):
        load(aot_bundle, nothing_loaded.model)
    nothing_loaded.check()


def test_no_model_for_a_cache_bundle_is_refused(private_dir, aot_bundle, nothing_loaded):
    rewrite_header(aot_bundle, lambda h: h["serving"].update(aot=None))
    with pytest.raises(InvalidKnobValue, match=r"model=None.*allowed your model: this bundle holds torch's caches"):
        load(aot_bundle)
    nothing_loaded.check()


@pytest.mark.parametrize(
    ("field", "value"),
    [("torch", "2.99.0"), ("device", "cuda:NVIDIA H200 sm_90 132 SMs"), ("knobs_digest", "0123456789abcdef")],
)
def test_a_foreign_aot_bundle_is_refused_naming_the_difference(aot_bundle, nothing_loaded, field, value):
    rewrite_header(aot_bundle, lambda h: h.update({field: value}))
    with pytest.raises(
        ik.serving.CompileCacheRefused, match=rf"refused: built for another setup \(.*{field}: file {value!r}, here "
    ):
        load(aot_bundle)
    nothing_loaded.check()


def test_an_aot_bundle_built_under_a_variable_loads_where_the_same_variable_is_set(aot_bundle, monkeypatch):
    """An AOT load never compiles, so env activation never runs in it: the check reads what the variables ask for.
    This process never activated (it started without the variable), as a fresh serving process that only loads."""
    variable = "INDUCTOR_KNOBS_COORDINATE_DESCENT_TUNING"
    assert ik.active_env_knobs() is None

    def built_under_the_variable(header):  # as such a build records it
        header["setup"]["knobs"]["coordinate_descent_tuning"] = False
        header["setup"]["sources"]["coordinate_descent_tuning"] = "env"

    rewrite_header(aot_bundle, built_under_the_variable)
    monkeypatch.setenv(variable, "1")
    with pytest.raises(ik.serving.CompileCacheRefused, match=rf"{variable}: file False, here True"):
        load(aot_bundle)
    monkeypatch.setenv(variable, "0")
    assert load(aot_bundle).proof.attestations == []  # served from the package: nothing compiled


@pytest.mark.parametrize(
    ("damage", "message"),
    [
        (lambda p: p.write_bytes(p.read_bytes()[:-100]), "the payload does not match its sha256"),
        (lambda p: rewrite_header(p, lambda h: h["serving"].update(aot={"bytes": "many"})), "serving section does not read back"),
        (lambda p: rewrite_header(p, lambda h: h["serving"].update(aot=[1])), "serving section does not read back"),
        (
            lambda p: rewrite_header(p, lambda h: h["serving"]["aot"]["inputs"]["positional"].append({"ndim": 1, "sizes": []})),
            "serving section does not read back",
        ),
        (lambda p: rewrite_header(p, lambda h: h["serving"]["aot"].update(bytes=1)), r"package is \d+ bytes, the header says 1"),
        (lambda p: rewrite_header(p, lambda h: h["serving"]["aot"].update(cpu_flags="avx2")), "section does not read back"),
        (lambda p: rewrite_header(p, lambda h: h["serving"]["aot"].update(cpu_isa="AVX2")), "section does not read back"),
        # A bundle of the layout whose contract held sizes alone: its calls could not be checked, so it is rebuilt.
        (lambda p: rewrite_header(p, lambda h: h["serving"].update(version=3)), r"input contract holds sizes alone.*rebuild"),
    ],
    ids=["truncated", "aot-bytes", "aot-type", "aot-inputs", "aot-length", "aot-cpu-flags", "aot-unknown-key", "aot-version-3"],
)
def test_a_damaged_aot_bundle_is_refused(aot_bundle, nothing_loaded, damage, message):
    damage(aot_bundle)
    with pytest.raises(ik.serving.CompileCacheRefused, match=message):
        load(aot_bundle)
    nothing_loaded.check()


def test_the_bundle_records_the_build_cpus_extensions_and_multi_arch_kernels(aot_bundle):
    header = json.loads(aot_bundle.read_bytes().split(b"\n", 2)[1])
    assert header["serving"]["aot"]["cpu_flags"] == aot_package.cpu_isa_flags()
    # a real AOTInductor build (of a CPU model) with the switch on where this torch has it
    assert header["serving"]["aot"]["multi_arch"] is False  # portable=False by default


def test_a_bundle_built_on_a_cpu_with_an_extension_this_one_lacks_is_refused(aot_bundle, nothing_loaded):
    if aot_package.cpu_isa_flags() is None:
        pytest.skip("no /proc/cpuinfo flags here")
    rewrite_header(aot_bundle, lambda h: h["serving"]["aot"].update(cpu_flags=["avx2", "avx512_future", "amx_future"]))
    with pytest.raises(
        ik.serving.CompileCacheRefused, match=r"built on a CPU with amx_future, avx512_future, which this CPU lacks"
    ):
        load(aot_bundle)
    nothing_loaded.check()


def test_cpu_flags_are_the_instruction_set_extensions_of_the_first_processor(tmp_path):
    cpuinfo = tmp_path / "cpuinfo"
    cpuinfo.write_text("processor\t: 0\nflags\t\t: fpu avx2 sse4_2 hypervisor fma amx_tile\n\nprocessor\t: 1\nflags\t: avx512f\n")
    assert aot_package.cpu_isa_flags(str(cpuinfo)) == ["amx_tile", "avx2", "fma", "sse4_2"]
    assert aot_package.cpu_isa_flags(str(tmp_path / "missing")) is None
    aot_package.check_cpu("test", None)  # nothing recorded: nothing to compare


def test_load_compile_cache_refuses_an_aot_bundle_by_name(aot_bundle, nothing_loaded):
    with pytest.raises(
        ik.serving.CompileCacheRefused, match=r"an AOT serving bundle holds a package.*ik.serving.load_serving_bundle"
    ):
        ik.serving.load_compile_cache(aot_bundle)
    nothing_loaded.check()


def test_a_package_aotinductor_cannot_load_is_refused_naming_its_error(aot_bundle, private_dir):
    import hashlib

    magic, line, _ = aot_bundle.read_bytes().split(b"\n", 2)
    garbage = b"not a zip archive"
    aot_bundle.write_bytes(magic + b"\n" + line + b"\n" + garbage)

    def foreign_payload(header):
        header.update(payload_sha256=hashlib.sha256(garbage).hexdigest())
        header["serving"]["aot"]["bytes"] = len(garbage)

    rewrite_header(aot_bundle, foreign_payload)
    with pytest.raises(ik.serving.CompileCacheRefused, match=r"refused: AOTInductor could not load the package: "):
        load(aot_bundle)


def test_an_output_class_not_imported_here_is_named_with_the_fix(aot_bundle, monkeypatch):
    class Unregistered:  # torch's C++ loader, whose output spec names a class this process never imported
        def __init__(self, path, model_name, run_single_threaded, *rest):
            assert run_single_threaded is True  # the runner's own synchronisation conflicts with capturing CUDA graphs

        def get_call_spec(self):
            raise NotImplementedError("Deserializing transformers.modeling_outputs.X in pytree is not registered.")

    monkeypatch.setattr(torch._C._aoti, "AOTIModelPackageLoader", Unregistered)
    with pytest.raises(
        ik.serving.CompileCacheRefused, match=r"is not registered\.\. .*`import transformers\.modeling_outputs` before"
    ):
        load(aot_bundle)


def test_an_aot_bundle_on_a_torch_without_packages_names_the_release(aot_bundle, nothing_loaded, monkeypatch):
    lacking = types.SimpleNamespace(has_aot_packages=False)
    monkeypatch.setattr(torch_compat, "installed", lambda: lacking)
    with pytest.raises(ik.errors.NotSupportedOnThisTorch, match=r"aoti_compile_and_package/aoti_load_package \(torch 2\.7\+\)"):
        load(aot_bundle)
    nothing_loaded.check()


def test_save_refuses_bad_aot_arguments_before_compiling(tmp_path):
    report = ik.serving.warmup(lambda x: x, shapes=[1], factory=torch.zeros, probes=None)
    with pytest.raises(InvalidKnobValue, match=r"save_serving_bundle\(aot='yes'\).*allowed True or False"):
        ik.serving.save_serving_bundle(tmp_path / "b", object(), report, aot="yes")  # type: ignore[arg-type]
    with pytest.raises(InvalidKnobValue, match=r"save_serving_bundle\(factory=None\).*with aot=True"):
        ik.serving.save_serving_bundle(tmp_path / "b", object(), report, aot=True)
    not_a_module = types.SimpleNamespace(_inductor_knobs_backend=None)
    with pytest.raises(InvalidKnobValue, match=r"served=.*an ik.compile result of an nn.Module"):
        aot_package.build("save_serving_bundle('b')", not_a_module, torch.zeros, [1])
    assert not (tmp_path / "b").exists()


def test_the_package_serves_one_call_at_a_time_from_many_threads():
    import threading
    import time

    inside, most = [0], [0]

    def model(x):  # stands in for a runner loaded with run_single_threaded=True
        inside[0] += 1
        most[0] = max(most[0], inside[0])
        time.sleep(0.001)
        inside[0] -= 1
        return x

    call = ((torch.zeros(2),), {"scale": 2.0})
    served = aot_package.ShapeCheckedPackage(fake_loader(model, *call), contract(Times(), [call]))
    threads = [threading.Thread(target=lambda: [served(torch.zeros(2), scale=2.0) for _ in range(20)]) for _ in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert most[0] == 1


@pytest.mark.parametrize(
    ("code", "limit", "how"),
    [
        ("import os, signal; os.kill(os.getpid(), signal.SIGSEGV)", 300, "died of signal 11"),  # the GPU host's crash
        ("raise RuntimeError('no such archive')", 300, "exited with status 1"),
        # Only this case has a short limit: a child that sleeps 120 s outlasts 1 s however busy the machine is.
        ("import time; time.sleep(120)", 1, "did not finish in 1 s"),
    ],
)
def test_a_package_a_fresh_process_cannot_load_is_never_saved(tmp_path, monkeypatch, code, limit, how):
    monkeypatch.setattr(aot_package, "LOAD_CHECK_CODE", code)
    monkeypatch.setattr(aot_package, "LOAD_CHECK_PRELOAD", ())  # a child that imports nothing ahead
    monkeypatch.setattr(aot_package, "LOAD_CHECK_S", limit)
    monkeypatch.setattr(aot_package, "FALLBACK_CXX", ())  # Inductor's compiler alone (the fallbacks: below)

    def compile_and_package(program, package_path, inductor_configs):  # AOTInductor's minutes, skipped
        open(package_path, "wb").close()

    monkeypatch.setattr(torch._inductor, "aoti_compile_and_package", compile_and_package)
    model = ik.compile(torch.nn.Linear(4, 4))
    report = ik.serving.warmup(model, shapes=[2], factory=lambda n: torch.randn(n, 4), probes=None)
    fix = r"\. Inductor's C\+\+ compiler is .*CXX=" if "signal" in how else r"\. The loading process said"
    with pytest.raises(InvalidKnobValue, match=rf"aot=True.*a fresh process can load; loading the one just built {how}{fix}"):
        ik.serving.save_serving_bundle(tmp_path / "b", model, report, aot=True, factory=lambda n: torch.randn(n, 4))
    assert not (tmp_path / "b").exists()


def test_the_first_load_checks_child_imports_while_the_model_compiles(tmp_path, monkeypatch):
    """The child is started before the export: a module it imports ahead marks a file, which the (faked) compile finds
    before the package exists; a build that fails kills and reaps the child it started."""
    marker = tmp_path / "imported"
    (tmp_path / "mark_import.py").write_text(f"open({str(marker)!r}, 'w').close()\n")
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join([str(tmp_path), os.environ.get("PYTHONPATH", "")]))
    monkeypatch.setattr(aot_package, "LOAD_CHECK_PRELOAD", ("mark_import",))
    monkeypatch.setattr(aot_package, "LOAD_CHECK_CODE", "import sys; assert open(sys.argv[1]).read() == 'package'")
    monkeypatch.setattr(aot_package, "FALLBACK_CXX", ())
    seen, children = [], []
    real_check = aot_package.LoadCheck

    class LoadCheck(real_check):
        def __init__(self, scratch, into):
            super().__init__(scratch, into)
            children.append(self.process)

    def compile_and_package(program, package_path, inductor_configs):
        seen.append(_wait_for(marker))  # the child's import, before the package exists
        with open(package_path, "w") as out:
            out.write("package")

    monkeypatch.setattr(aot_package, "LoadCheck", LoadCheck)
    monkeypatch.setattr(torch._inductor, "aoti_compile_and_package", compile_and_package)
    linear_bundle(tmp_path / "b")
    assert seen == [True] and len(children) == 1 and children[0].returncode == 0

    def fails(program, package_path, inductor_configs):
        raise RuntimeError("the compile fails")

    monkeypatch.setattr(torch._inductor, "aoti_compile_and_package", fails)
    with pytest.raises(InvalidKnobValue, match="the compile fails"):
        linear_bundle(tmp_path / "c")
    assert len(children) == 2 and children[1].returncode is not None  # killed and reaped, never sent a path


def _wait_for(path, limit_s: float = 120.0) -> bool:
    """Whether ``path`` exists within ``limit_s`` (a bound for a busy machine, not a measurement)."""
    waited = threading.Event()
    for _ in range(int(limit_s * 20)):
        if path.exists():
            return True
        waited.wait(0.05)
    return False


@pytest.fixture
def compilers(tmp_path, monkeypatch):
    """Inductor's C++ compiler "bad" (what it builds crashes the loading process, as /opt/gcc/bin/g++'s packages did
    on the H100 host), then the fallbacks "worse" (the same) and "good"; AOTInductor's compile is faked: it writes
    the compiler it was given into the package, and the load check's child dies of SIGSEGV unless that is "good"."""
    paths = {}
    for name in ("bad", "worse", "good"):
        paths[name] = tmp_path / name
        paths[name].write_text("#!/bin/sh\nexit 0\n")
        paths[name].chmod(0o755)
    from torch._inductor import cpp_builder

    monkeypatch.setattr(cpp_builder, "get_cpp_compiler", lambda: str(paths["bad"]))
    monkeypatch.setattr(aot_package, "FALLBACK_CXX", (str(paths["bad"]), str(paths["worse"]), str(paths["good"])))
    compiled_with = []

    def compile_and_package(program, package_path, inductor_configs):  # AOTInductor's minutes, skipped
        cxx = inductor_configs.get("cpp.cxx") or (cpp_builder.get_cpp_compiler(),)  # unset: Inductor picks its own
        compiled_with.append(cxx)
        with open(package_path, "w") as out:
            out.write(str(cxx))

    monkeypatch.setattr(torch._inductor, "aoti_compile_and_package", compile_and_package)
    crash_unless_good = "import os, signal, sys\nif 'good' not in open(sys.argv[1]).read(): os.kill(os.getpid(), signal.SIGSEGV)"
    monkeypatch.setattr(aot_package, "LOAD_CHECK_CODE", crash_unless_good)
    monkeypatch.setattr(aot_package, "LOAD_CHECK_PRELOAD", ())  # a child that imports nothing ahead
    return types.SimpleNamespace(paths=paths, compiled_with=compiled_with)


def linear_bundle(path):
    model = ik.compile(torch.nn.Linear(4, 4))
    report = ik.serving.warmup(model, shapes=[2], factory=lambda n: torch.randn(n, 4), probes=None)
    return ik.serving.save_serving_bundle(path, model, report, aot=True, factory=lambda n: torch.randn(n, 4))


def test_a_compiler_whose_packages_do_not_load_is_passed_over_for_the_next(tmp_path, compilers):
    header = linear_bundle(tmp_path / "b")
    bad, worse, good = (str(compilers.paths[name]) for name in ("bad", "worse", "good"))
    assert compilers.compiled_with == [(bad,), (worse,), (good,)]  # Inductor's own first, each once
    assert header["serving"]["aot"]["cxx"] == good
    _, payload = compile_cache.read_file(str(tmp_path / "b"), False, "test")
    assert payload == str((good,)).encode()


def test_when_no_compiler_makes_a_loadable_package_each_one_tried_is_named(tmp_path, compilers, monkeypatch):
    monkeypatch.setattr(aot_package, "FALLBACK_CXX", (str(compilers.paths["worse"]),))
    bad, worse = str(compilers.paths["bad"]), str(compilers.paths["worse"])
    tried = rf"C\+\+ compilers tried: {bad}: died of signal 11; {worse}: died of signal 11\)"
    with pytest.raises(
        InvalidKnobValue, match=rf"a fresh process can load; loading the one just built died of signal 11 \({tried}\. .*CXX="
    ):
        linear_bundle(tmp_path / "b")
    assert not (tmp_path / "b").exists()


def test_the_load_check_loads_a_real_package_in_a_child(built_aot, tmp_path):
    _, payload = compile_cache.read_file(str(built_aot), False, "test")
    (tmp_path / "m.pt2").write_bytes(payload)
    aot_package.check_loads("test", str(tmp_path / "m.pt2"))  # raises unless a fresh process loaded it


@pytest.mark.gpu
def test_on_a_gpu_the_package_compiles_nothing_and_captures_one_graph_per_shape(private_dir, tmp_path):
    if not torch.cuda.is_available():
        pytest.skip("needs a CUDA GPU")
    path = private_dir / "gpu-aot.bundle"
    run_worker("build-aot", path, tmp_path / "build", "cuda")
    # Empty TORCHINDUCTOR_CACHE_DIR and TRITON_CACHE_DIR; 120 s is minutes more than a load of this model needs.
    loaded = run_worker("load-aot", path, tmp_path / "empty", "cuda", timeout=120)
    proof = loaded["proof"]
    assert proof["dynamo_compiles"] == [] and proof["inductor_compiles"] == 0, loaded["table"]
    assert proof["autotune_benchmarks"] == 0 and proof["triton_compiled"] in (0, None), loaded["table"]
    assert not any((tmp_path / "empty" / "triton").rglob("*.cubin")), "Triton compiled a kernel"
    assert proof["captures"] == 2 and loaded["replays"] >= 1, loaded["table"]
    assert proof["cold"] == [], loaded["table"]
    assert max(loaded["errors"].values()) < 1e-3, loaded["errors"]


@pytest.fixture
def packaged(monkeypatch):
    """AOTInductor's compile faked (it records the ``inductor_configs`` it is given), the load check a child that exits 0."""
    monkeypatch.setattr(aot_package, "LOAD_CHECK_CODE", "pass")
    monkeypatch.setattr(aot_package, "LOAD_CHECK_PRELOAD", ())  # a child that imports nothing ahead
    monkeypatch.setattr(aot_package, "FALLBACK_CXX", ())
    configs: list[object] = []  # the value of aot_package.MULTI_ARCH in each compile's inductor_configs

    def compile_and_package(program, package_path, inductor_configs):  # AOTInductor's minutes, skipped
        configs.append(inductor_configs.get(aot_package.MULTI_ARCH, "unset"))
        with open(package_path, "wb") as out:
            out.write(b"package")

    monkeypatch.setattr(torch._inductor, "aoti_compile_and_package", compile_and_package)
    return configs


def portable_bundle(path, options=None, knobs=None, **kwargs):
    model = ik.compile(torch.nn.Linear(4, 4), knobs, options=options)
    report = ik.serving.warmup(model, shapes=[2], factory=lambda n: torch.randn(n, 4), probes=None)
    header = ik.serving.save_serving_bundle(path, model, report, aot=True, factory=lambda n: torch.randn(n, 4), **kwargs)
    assert compile_cache.read_file(str(path), False, "test")[0] == header
    from inductor_knobs.serving import bundle_format

    return bundle_format.decode("test", header).aot["multi_arch"]


@pytest.mark.skipif(not HAS_MULTI_ARCH, reason=f"torch {torch.__version__} has no {aot_package.MULTI_ARCH}")
def test_an_aot_build_packages_multi_arch_kernels_and_records_it(tmp_path, packaged):
    assert portable_bundle(tmp_path / "b", portable=True) is True
    assert packaged == [True]


@pytest.mark.skipif(not HAS_MULTI_ARCH, reason=f"torch {torch.__version__} has no {aot_package.MULTI_ARCH}")
@pytest.mark.parametrize(
    ("how", "passed", "recorded"),
    [
        ({}, "unset", False),  # portable=False by default
        ({"portable": False}, "unset", False),
        ({"options": {aot_package.MULTI_ARCH: False}, "portable": True}, False, False),
        # a knob's key is entered by KnobsContext around the build, not passed: recorded as the build read it
        ({"knobs": ik.Knobs(config={aot_package.MULTI_ARCH: False}), "portable": True}, "unset", False),
        ({"knobs": ik.Knobs(config={aot_package.MULTI_ARCH: True})}, "unset", True),
    ],
)
def test_portable_off_or_the_users_own_setting_is_kept(tmp_path, packaged, how, passed, recorded):
    assert portable_bundle(tmp_path / "b", **how) is recorded
    assert packaged == [passed]


def test_a_torch_without_multi_arch_kernels_builds_as_before(tmp_path, packaged, monkeypatch):
    patches = torch_compat.installed()
    keys = [k for k in patches.config_keys(torch._inductor.config) if k != aot_package.MULTI_ARCH]
    monkeypatch.setattr(type(patches), "config_keys", lambda self, cfg: keys)
    assert portable_bundle(tmp_path / "b", portable=True) is False
    assert packaged == ["unset"]


def test_portable_must_be_a_bool_before_anything_compiles(tmp_path, packaged):
    with pytest.raises(InvalidKnobValue, match=r"save_serving_bundle\(portable='yes'\).*allowed True or False"):
        portable_bundle(tmp_path / "b", portable="yes")
    assert packaged == [] and not (tmp_path / "b").exists()


@pytest.fixture
def build_configs(monkeypatch):
    """AOTInductor's compile faked: every ``inductor_configs`` it is given, whole; the load check a child that exits 0."""
    monkeypatch.setattr(aot_package, "LOAD_CHECK_CODE", "pass")
    monkeypatch.setattr(aot_package, "LOAD_CHECK_PRELOAD", ())  # a child that imports nothing ahead
    monkeypatch.setattr(aot_package, "FALLBACK_CXX", ())
    seen: list[dict] = []

    def compile_and_package(program, package_path, inductor_configs):
        seen.append(dict(inductor_configs))
        with open(package_path, "wb") as out:
            out.write(b"package")

    monkeypatch.setattr(torch._inductor, "aoti_compile_and_package", compile_and_package)
    return seen


def aot_options_bundle(path, aot_options, knobs=None, aot=True):
    model = ik.compile(torch.nn.Linear(4, 4), knobs, mode="max-autotune-no-cudagraphs")
    report = ik.serving.warmup(model, shapes=[2], factory=lambda n: torch.randn(n, 4), probes=None)
    factory = lambda n: torch.randn(n, 4)  # noqa: E731
    return ik.serving.save_serving_bundle(path, model, report, aot=aot, factory=factory, aot_options=aot_options)


def test_aot_options_reach_the_aot_compile_only_over_the_mode_and_are_recorded(tmp_path, build_configs, fresh_inductor):
    header = aot_options_bundle(tmp_path / "b", {"coordinate_descent_tuning": False, "aot_inductor.debug_compile": False})
    assert len(build_configs) == 1
    assert build_configs[0]["coordinate_descent_tuning"] is False  # the mode's True, overridden for the build
    assert build_configs[0]["max_autotune"] is True  # the rest of the mode as it was
    assert header["serving"]["aot"]["options"] == {"coordinate_descent_tuning": "False", "aot_inductor.debug_compile": "False"}
    from inductor_knobs.serving import bundle_format

    assert bundle_format.decode("test", header).aot["options"] == header["serving"]["aot"]["options"]  # reads back
    assert torch._inductor.config.coordinate_descent_tuning is False  # nothing of the build stays set (the default)
    build_configs.clear()
    header = aot_options_bundle(tmp_path / "c", None)
    assert build_configs[0]["coordinate_descent_tuning"] is True and header["serving"]["aot"]["options"] == {}


def test_loading_a_package_starts_no_load_check(built_aot, monkeypatch):
    started = []
    monkeypatch.setattr(aot_package.LoadCheck, "__init__", lambda self, *args: started.append(args))
    header, payload = compile_cache.read_file(str(built_aot), False, "test")
    aot_package.load("test", payload, header["serving"]["aot"]["inputs"])
    assert started == []


HAS_PCH = aot_package.PRECOMPILED_HEADERS in torch_compat.installed().config_keys(torch._inductor.config)
PER_THREAD_CONFIG = torch_compat.installed().config_is_thread_local  # Inductor's config per thread (torch 2.12+)
#: torch's per-process answers about Inductor's compiler (``cpp_builder``, each a ``functools.cache``), where present.
COMPILER_ANSWERS = [
    name
    for name in ("is_gcc", "is_clang", "is_intel_compiler", "is_apple_clang", "is_msvc_cl")
    if aot_package.present(f"torch._inductor.cpp_builder:{name}")
]


#: Whether this torch's AOT build asks for its precompiled headers as ``patches/aot_headers.py`` makes them.
HEADERS_AS_TORCH = torch_compat.installed().makes_aot_headers_as_torch(torch_compat.release_of(torch.__version__))


@pytest.fixture
def headers_made(monkeypatch):
    """``make_aot_headers`` recorded (the thread that called it, its arguments), nothing compiled."""
    made: list[tuple[str, tuple]] = []
    patches = type(torch_compat.installed())
    monkeypatch.setattr(patches, "make_aot_headers", lambda self, *args: made.append((threading.current_thread().name, args)))
    return made


@pytest.mark.skipif(not HAS_PCH, reason=f"torch {torch.__version__} has no {aot_package.PRECOMPILED_HEADERS}")
def test_a_cpu_models_aot_build_makes_no_precompiled_header_unless_asked(tmp_path, build_configs, fresh_inductor, headers_made):
    header = aot_options_bundle(tmp_path / "b", None)
    assert build_configs[-1][aot_package.PRECOMPILED_HEADERS] is False and header["serving"]["aot"]["options"] == {}
    assert headers_made == []
    aot_options_bundle(tmp_path / "c", {aot_package.PRECOMPILED_HEADERS: True})  # the user's choice stands
    assert build_configs[-1][aot_package.PRECOMPILED_HEADERS] is True
    if HEADERS_AS_TORCH:  # and the probe thread makes them beside the build: Linear(4, 4)'s 80 bytes of constants
        assert headers_made == [(aot_package.PROBE_THREAD, ("cpu", 80))]
    headers_made.clear()
    aot_options_bundle(tmp_path / "d", None, knobs=ik.Knobs(config={aot_package.PRECOMPILED_HEADERS: True}))
    assert aot_package.PRECOMPILED_HEADERS not in build_configs[-1]  # a knob sets it inside the compile
    assert headers_made == []  # the thread cannot tell what the knob makes of it
    assert torch._inductor.config.aot_inductor.precompile_headers is True  # nothing of the build stays set


def _weights(device: str, *sizes: int) -> SimpleNamespace:
    """A module whose parameters sit on ``device`` with ``sizes`` bytes of storage each."""
    tensors = [
        SimpleNamespace(device=torch.device(device), untyped_storage=lambda n=n: SimpleNamespace(nbytes=lambda: n)) for n in sizes
    ]
    return SimpleNamespace(parameters=lambda: tensors, buffers=list)


#: Known to ask for its headers as patches/aot_headers.py makes them, on Linux (torch makes none on Windows).
HEADERS_HERE = HAS_PCH and HEADERS_AS_TORCH and sys.platform == "linux"
NOT_HERE = f"torch {torch.__version__}'s build is not known to ask for its headers so here"


@pytest.mark.skipif(not HEADERS_HERE, reason=NOT_HERE)
def test_headers_are_made_beside_a_gpu_models_build_where_it_turns_them_on():
    key, none = aot_package.PRECOMPILED_HEADERS, ((), {})
    assert aot_package.headers_beside(_weights("cuda", 100, 28), none, {}, set()) == ("cuda", 128)
    assert aot_package.headers_beside(_weights("cuda", 100), none, {key: False}, set()) is None  # the user's off
    assert aot_package.headers_beside(_weights("cuda", 100), none, {}, {key}) is None  # a knob decides in the compile
    assert aot_package.headers_beside(_weights("cpu", 100), none, {}, set()) is None  # a CPU model's build is short
    assert aot_package.headers_beside(_weights("cpu", 100), none, {key: True}, set()) == ("cpu", 100)
    inputs = ((torch.empty(2, device="meta"),), {})
    assert aot_package.headers_beside(_weights("cpu", 100), inputs, {}, set()) is None  # meta is no device
    two = SimpleNamespace(parameters=lambda: [*_weights("cuda", 1).parameters(), *_weights("xpu", 1).parameters()])
    two.buffers = list
    assert aot_package.headers_beside(two, none, {}, set()) is None  # torch gives the compile one device type


@pytest.mark.skipif(not HEADERS_HERE, reason=NOT_HERE)
def test_the_constants_are_counted_as_torch_counts_them_for_its_mmap_flags():
    none = ((), {})
    assert aot_package.headers_beside(_weights("cuda", 10**9 + 1), none, {}, set()) is None  # near 2 GB: flags unsure
    assert aot_package.headers_beside(_weights("cuda", 3 * 10**9), none, {}, set()) is None
    assert aot_package.headers_beside(_weights("cuda", 5 * 10**9), none, {}, set()) == ("cuda", 5 * 10**9)
    outside = {"aot_inductor.package_constants_in_so": False}  # torch's count is 0 then
    assert aot_package.headers_beside(_weights("cuda", 3 * 10**9), none, outside, set()) == ("cuda", 0)


@pytest.mark.skipif(not HEADERS_HERE, reason=NOT_HERE)
def test_weights_of_a_tensor_subclass_sparse_or_lazy_fail_no_build():
    from torch.testing._internal.two_tensor import TwoTensor

    model = torch.nn.Linear(4, 4)
    model.weight = torch.nn.Parameter(TwoTensor(torch.randn(4, 4), torch.randn(4, 4)))  # its data_ptr() raises
    key = aot_package.PRECOMPILED_HEADERS
    assert aot_package.headers_beside(model, ((), {}), {key: True}, set()) == ("cpu", 80)  # its storage's bytes
    lazy = torch.nn.LazyLinear(4)  # never called: its parameters have no storage yet
    assert aot_package.headers_beside(lazy, ((), {}), {key: True}, set()) is None
    sparse = torch.nn.Module()  # a storage that cannot be read: no headers beside, and no error
    sparse.register_buffer("eye", torch.eye(3).to_sparse())
    assert aot_package.headers_beside(sparse, ((), {}), {key: True}, set()) is None


def test_headers_beside_only_where_torch_makes_them_as_the_package_does(monkeypatch):
    from torch._inductor import config

    patches = type(torch_compat.installed())
    release = torch_compat.release_of(torch.__version__)
    none, key = ((), {}), aot_package.PRECOMPILED_HEADERS
    monkeypatch.setattr(patches, "aot_headers_by_release", {release: False})
    assert aot_package.headers_beside(_weights("cuda", 100), none, {key: True}, set()) is None
    monkeypatch.setattr(patches, "aot_headers_by_release", {})  # a release the table does not list: none
    assert not torch_compat.installed().makes_aot_headers_as_torch(release)
    monkeypatch.setattr(patches, "aot_headers_by_release", {release: True})
    if HAS_PCH:
        monkeypatch.setattr(sys, "platform", "win32")  # torch makes no precompiled header on Windows
        assert aot_package.headers_beside(_weights("cuda", 100), none, {key: True}, set()) is None
        monkeypatch.setattr(sys, "platform", "linux")
        monkeypatch.setitem(config.__dict__, "is_fbcode", lambda: True)  # another compiler and other flags there
        assert aot_package.headers_beside(_weights("cuda", 100), none, {key: True}, set()) is None


@pytest.mark.skipif(not HEADERS_HERE, reason=NOT_HERE)
def test_the_headers_are_asked_for_with_torchs_mmap_flags_for_the_bytes_of_constants(monkeypatch):
    from torch._inductor import codecache
    from torch._inductor.utils import determine_aoti_mmap_flags

    asked = []
    monkeypatch.setattr(codecache, "_precompile_header", lambda *args, **kwargs: asked.append(kwargs) or "header")
    for nbytes in (0, 5 * 10**9):
        asked.clear()
        assert torch_compat.installed().make_aot_headers("cpu", nbytes) == ["header", "header"]  # wrapper, kernels
        external, mmap = determine_aoti_mmap_flags(nbytes)
        assert [(k["use_mmap_weights"], k["use_mmap_weights_external"]) for k in asked] == [(mmap, external)] * 2
        assert list(asked[0]) == ["min_optimize", *list(asked[1])]  # torch's keyword order: its cache's key


@pytest.mark.skipif(not HAS_PCH, reason=f"torch {torch.__version__} has no {aot_package.PRECOMPILED_HEADERS}")
def test_a_gpu_models_build_turns_the_headers_on_and_the_thread_makes_them(
    tmp_path, build_configs, fresh_inductor, headers_made, monkeypatch
):
    monkeypatch.setattr(aot_package, "headers_beside", lambda *args: ("cuda", 128))  # as for a model on a GPU
    aot_options_bundle(tmp_path / "b", None)
    assert build_configs[-1][aot_package.PRECOMPILED_HEADERS] is True
    assert headers_made == [(aot_package.PROBE_THREAD, ("cuda", 128))]


def test_callers_of_the_isa_list_wait_for_the_list_not_for_the_headers(monkeypatch, slow_isa_list):
    from torch._inductor import cpu_vec_isa

    making, release = threading.Event(), threading.Event()
    patches = type(torch_compat.installed())
    monkeypatch.setattr(patches, "make_aot_headers", lambda self, *args: making.set() or release.wait(180))
    answered = []
    with aot_package.ProbesBeside({}, ("cpu", 0)):
        try:
            assert making.wait(60)  # the thread has the list and is making the headers
            caller = threading.Thread(target=lambda: answered.append(cpu_vec_isa.valid_vec_isa_list()), daemon=True)
            caller.start()
            caller.join(60)  # the headers take until release, three times as long
            done = not caller.is_alive()
        finally:
            release.set()
    assert done and len(answered) == 1  # answered while the headers were still being made


def test_a_probe_thread_that_dies_unlisted_keeps_no_caller_waiting(monkeypatch, slow_isa_list):
    from torch._inductor import cpu_vec_isa

    waiting, real = threading.Event(), aot_package._still_listing

    def still_listing():  # says when a caller looks for the threads to wait for
        found = real()
        if found and threading.current_thread().name != aot_package.PROBE_THREAD:
            waiting.set()
        return found

    monkeypatch.setattr(aot_package, "_still_listing", still_listing)
    # The thread ends, without leaving the waiters' set, once a caller waits for it.
    monkeypatch.setattr(aot_package, "_probe_isas", lambda *args: waiting.wait(60))
    answered = []
    with aot_package.ProbesBeside({}):
        caller = threading.Thread(target=lambda: answered.append(cpu_vec_isa.valid_vec_isa_list()), daemon=True)
        caller.start()
        caller.join(60)
    assert len(answered) == 1


def test_a_block_that_failed_gets_no_headers_made(monkeypatch, headers_made):
    ended, kept = threading.Event(), threading.Event()
    ended.set()  # the block failed before the thread had the list
    monkeypatch.setattr(aot_package, "_forget_isa_verdicts", lambda: None)
    aot_package._probe_isas({}, ("cpu", 0), ended, kept)
    assert headers_made == []


@pytest.mark.skipif(not HEADERS_HERE, reason=NOT_HERE)
def test_the_probe_thread_makes_the_headers_the_build_asks_torch_for(tmp_path, fresh_inductor, monkeypatch):
    """A real CPU build with the headers asked for: torch's ``_precompile_header`` (a ``functools.cache``) is asked by
    the probe thread and by the build with equal arguments, keyword order included (which asks first is a race on a
    model this small; either way the second finds the header made, or waits on torch's lock for it)."""
    from torch._inductor import codecache

    real, asked = codecache._precompile_header, []

    def recorded(*args, **kwargs):
        asked.append((threading.current_thread().name, (args, tuple(kwargs.items()))))
        return real(*args, **kwargs)

    monkeypatch.setattr(codecache, "_precompile_header", recorded)
    aot_options_bundle(tmp_path / "b", {aot_package.PRECOMPILED_HEADERS: True})
    beside = [key for name, key in asked if name == aot_package.PROBE_THREAD]
    build = [key for name, key in asked if name != aot_package.PROBE_THREAD]
    assert len(beside) == 2 and beside == build  # the wrapper's header, then the CPU kernels'


def test_the_aot_build_holds_torchs_fixes_and_releases_them(tmp_path, build_configs, fresh_inductor, monkeypatch):
    from inductor_knobs.serving import torch_fixes

    held = []
    real = torch._inductor.aoti_compile_and_package
    monkeypatch.setattr(
        torch._inductor,
        "aoti_compile_and_package",
        lambda *args, **kwargs: held.append(torch_fixes.TORCH_FIXES.users) or real(*args, **kwargs),
    )
    aot_options_bundle(tmp_path / "b", None)
    assert len(held) == 1 and held[0] >= 1  # e.g. the vector-ISA probe fix (patches/fixes.py); the probe thread's too
    assert torch_fixes.TORCH_FIXES.users == 0


@pytest.fixture
def isa_probes(monkeypatch, build_configs):
    """Inductor's ISA list faked: who asked (thread, holders of torch's fixes); the probe thread's call waits until
    the build compiles and then a little longer, so a build that did not join it would return with it alive."""
    import threading

    from torch._inductor import cpp_builder, cpu_vec_isa

    from inductor_knobs.serving import torch_fixes

    seen: list[tuple[str, int]] = []
    compiling = threading.Event()
    probes = SimpleNamespace(seen=seen, fails=False, simdlen=[], cxx=[], config_cxx=[], answered=[], calls=[])

    def valid_vec_isa_list():
        name = threading.current_thread().name
        probes.calls.append(("enter", name))
        seen.append((name, torch_fixes.TORCH_FIXES.users))
        probes.simdlen.append(torch._inductor.config.cpp.simdlen)
        probes.cxx.append((name, cpp_builder.get_cpp_compiler()))  # what torch's probes compile with
        probes.config_cxx.append((name, torch._inductor.config.cpp.cxx))  # what the thread set, if anything
        probes.answered.append((name, cpp_builder.is_gcc.cache_info().currsize))  # an answer cached before it asked
        for answer in COMPILER_ANSWERS:  # per-process answers about the compiler (functools.cache), as torch's probes ask
            with contextlib.suppress(Exception):  # e.g. an Apple or MSVC check that cannot run here
                getattr(cpp_builder, answer)()
        try:
            if name == aot_package.PROBE_THREAD:
                compiling.wait(60)
                threading.Event().wait(0.3)
                if probes.fails:
                    raise RuntimeError("a probe that raises")
            probes.listed += compiling.is_set()  # torch's cache holds what the build computed (not the warm-up's)
            return []
        finally:
            probes.calls.append(("exit", name))

    valid_vec_isa_list.cache_info = lambda: SimpleNamespace(currsize=min(probes.listed, 1))  # functools.cache's
    probes.listed = 0

    class ISA:  # an ISA the CPU lists: its verdict, who computed it and under which compiler
        def __bool__(self):
            probes.verdicts.append((threading.current_thread().name, cpp_builder.get_cpp_compiler()))
            return True

    probes.verdicts = []
    real = torch._inductor.aoti_compile_and_package
    monkeypatch.setattr(aot_package, "_listed_isas", lambda module: [ISA(), ISA(), ISA()])
    monkeypatch.setattr(cpu_vec_isa, "valid_vec_isa_list", valid_vec_isa_list)

    def compile_and_package(*args, **kwargs):  # asks for the list at once, as AOTInductor's C++ wrapper does later
        probes.calls.append(("compile", ""))
        compiling.set()
        with torch._inductor.config.patch(kwargs.get("inductor_configs") or {}):  # inside the compile, as torch asks
            cpu_vec_isa.pick_vec_isa()
        return real(*args, **kwargs)

    monkeypatch.setattr(torch._inductor, "aoti_compile_and_package", compile_and_package)
    probes.beside = lambda: [users for name, users in seen if name == aot_package.PROBE_THREAD]
    return probes


def _probe_thread_alive() -> bool:
    import threading

    return any(t.name == aot_package.PROBE_THREAD for t in threading.enumerate())


@pytest.mark.parametrize("fails", [False, True])
def test_the_aot_build_probes_the_cpus_isas_on_a_thread_it_joins(tmp_path, isa_probes, fresh_inductor, fails):
    isa_probes.fails = fails
    aot_options_bundle(tmp_path / "b", None)  # a probe that raises fails nothing: the build probes again itself
    assert len(isa_probes.beside()) == 1  # once (a CPU compile probes on its own thread too)
    assert isa_probes.beside()[0] >= 2  # the thread's own hold of torch's fixes, beside the build's
    assert not _probe_thread_alive()  # joined before save returned
    # The build's own call waited for the thread's instead of probing beside it (torch's cache has no lock).
    calls = [call for call in isa_probes.calls if call[0] != "compile"]
    thread = calls.index(("enter", aot_package.PROBE_THREAD))
    assert calls[thread : thread + 3] == [
        ("enter", aot_package.PROBE_THREAD),
        ("exit", aot_package.PROBE_THREAD),
        ("enter", "MainThread"),
    ]
    assert aot_package.ISA_LIST_AT_ONCE.users == 0
    # Each ISA's verdict at once on a pool before torch's list reads it; again for the build's own call where the
    # thread's raised (torch cached no list).
    pool = [name for name, _ in isa_probes.verdicts if name.startswith(aot_package.PROBE_THREAD + "_")]
    assert len(pool) == len(isa_probes.verdicts) == (6 if fails else 3)


def test_the_probe_thread_reads_the_config_the_build_reads(tmp_path, isa_probes, fresh_inductor):
    with torch._inductor.config.patch({"cpp.simdlen": 123}):  # per thread on torch 2.12+: the thread gets a copy
        aot_options_bundle(tmp_path / "b", None)
    assert len(isa_probes.beside()) == 1 and isa_probes.simdlen[-1] == 123


def test_a_failed_build_forgets_torchs_isa_verdicts(tmp_path, isa_probes, fresh_inductor, monkeypatch):
    forgotten = []
    monkeypatch.setattr(aot_package, "_forget_isa_verdicts", lambda: forgotten.append(True))
    aot_options_bundle(tmp_path / "ok", None)
    assert forgotten == []  # a build that succeeded keeps them

    def fails(*args, **kwargs):
        raise RuntimeError("the compile fails")

    monkeypatch.setattr(torch._inductor, "aoti_compile_and_package", fails)
    with pytest.raises(InvalidKnobValue, match="the compile fails"):
        aot_options_bundle(tmp_path / "failed", None)
    assert forgotten and not _probe_thread_alive()  # a Ctrl-C reaches the probes' children too (the thread or the join)


@pytest.mark.parametrize("key", ["cpp.vec_isa_ok", "aot_inductor.debug_compile"])
def test_no_isa_probes_beside_a_build_whose_knobs_set_what_they_read(tmp_path, isa_probes, fresh_inductor, key):
    assert aot_package.probe_reads({}, {key}) is None  # knobs apply inside Inductor's compile, not on the thread
    aot_options_bundle(tmp_path / "b", None, knobs=ik.Knobs(config={key: True}))
    assert isa_probes.beside() == [] and not _probe_thread_alive()


def test_where_config_is_process_wide_the_thread_probes_only_what_it_need_not_set(monkeypatch):
    """torch < 2.12: the thread cannot set a config value for itself alone, so it probes only where the build's probe
    keys but the compiler hold their live values (else the build's own call probes, every ISA at once, under the
    compile's config); a compiler found on PATH reaches the thread's probes through CPP_COMPILER."""
    patches = torch_compat.installed()
    monkeypatch.setattr(type(patches), "config_is_thread_local", False)
    live = torch._inductor.config.cpp.cxx
    build_only = {aot_package.PRECOMPILED_HEADERS: False, aot_package.MULTI_ARCH: True}  # the probes read neither
    assert aot_package.probe_reads({"max_autotune": True, "cpp.cxx": live, **build_only}, set()) == {}
    assert aot_package.probe_reads({"cpp.cxx": ("/usr/bin/some-other-g++",)}, set()) is None  # not found
    sh = shutil.which("sh")  # a compiler found on PATH: given to the thread's probes alone (CPP_COMPILER)
    assert aot_package.probe_reads({"cpp.cxx": (sh,)}, set()) == {"cpp.cxx": sh}
    assert aot_package.probe_reads({"cpp.cxx": (sh, sh)}, set()) is None  # a search: torch's to run, not the thread's
    if "aot_inductor.cross_target_platform" in patches.config_keys(torch._inductor.config):
        with torch._inductor.config.patch({"aot_inductor.cross_target_platform": "windows"}):  # torch's: mingw
            assert aot_package.probe_reads({"cpp.cxx": (sh,)}, set()) is None
    windows = SimpleNamespace(aot_inductor=SimpleNamespace(cross_target_platform="windows"))
    assert not aot_package._compiler_from_cxx(windows) and aot_package._compiler_from_cxx(SimpleNamespace())
    assert not aot_package._compiler_from_cxx(SimpleNamespace(is_fbcode=lambda: True))
    simdlen = torch._inductor.config.cpp.simdlen
    assert aot_package.probe_reads({"cpp.cxx": (sh,), "cpp.simdlen": (simdlen or 0) + 8}, set()) is None
    monkeypatch.setattr(type(patches), "config_is_thread_local", True)
    assert aot_package.probe_reads({"max_autotune": True, "cpp.cxx": ("x",)}, set()) == {"cpp.cxx": ("x",)}


@pytest.mark.skipif(not aot_package.present(aot_package.VALID_ISAS), reason="this torch has no valid_vec_isa_list")
def test_the_isas_probed_at_once_are_those_torchs_list_checks():
    from torch._inductor import cpu_vec_isa

    aot_package._forget_isa_verdicts()
    try:
        with torch._inductor.config.patch({"cpp.vec_isa_ok": True}):  # every verdict True without a dry compile
            listed = aot_package._listed_isas(cpu_vec_isa)
            assert listed == cpu_vec_isa.valid_vec_isa_list() or (not listed and not _x86_linux())
        if _x86_linux() and "avx2" in cpu_vec_isa.x86_isa_checker():
            assert listed  # the x86 filter found the ISAs the CPU lists
    finally:
        aot_package._forget_isa_verdicts()


def _x86_linux() -> bool:
    import platform
    import sys

    return sys.platform == "linux" and platform.machine() == "x86_64"


def test_a_block_that_succeeds_inside_an_except_keeps_torchs_isa_verdicts(monkeypatch):
    forgotten = []
    monkeypatch.setattr(aot_package, "_forget_isa_verdicts", lambda: forgotten.append(True))
    monkeypatch.setattr(aot_package, "_probe_isas", lambda reads, headers, ended, kept: None)
    try:
        raise ValueError("handled by the caller")
    except ValueError:
        with aot_package.ProbesBeside({}):
            pass
    assert forgotten == []
    with pytest.raises(RuntimeError), aot_package.ProbesBeside({}):
        raise RuntimeError("the build fails")
    assert forgotten == [True]
    with pytest.raises(RuntimeError), aot_package.ProbesBeside(None):  # no thread: the build's own call probed
        raise RuntimeError("the build fails")
    assert forgotten == [True, True]


@pytest.fixture
def slow_isa_list(monkeypatch):
    """Inductor's ISA list faked: a call still probing when a block exits, nothing for the pool; the fake itself."""
    from torch._inductor import cpu_vec_isa

    def listed():
        threading.Event().wait(0.05)
        return []

    listed.cache_info = lambda: SimpleNamespace(currsize=0)  # functools.cache's: never computed
    monkeypatch.setattr(cpu_vec_isa, "valid_vec_isa_list", listed)
    monkeypatch.setattr(aot_package, "_listed_isas", lambda module: [])
    return listed


def test_the_probes_beside_a_build_leave_nothing_behind_when_interrupted_at_any_line(slow_isa_list):
    from interrupting import interrupt_every_line
    from torch._inductor import cpu_vec_isa

    listed = slow_isa_list

    def state():
        alive = [t for t in threading.enumerate() if t.name.startswith(aot_package.PROBE_THREAD)]
        listing = cpu_vec_isa.valid_vec_isa_list is listed
        users = aot_package.ISA_LIST_AT_ONCE.users
        free = not aot_package._LISTING.locked()  # no lock left held by an interrupt
        return {"users": users, "listed": listing, "probers": len(aot_package._PROBERS), "alive": alive, "free": free}

    print(interrupt_every_line(lambda: aot_package.ProbesBeside({}), state, "ProbesBeside"))


def test_a_with_of_the_probes_beside_a_build_leaves_nothing_behind_when_interrupted_in_its_body(slow_isa_list, monkeypatch):
    """As a build uses it: one ``with``, no second exit; a Ctrl-C in the body."""
    from torch._inductor import cpu_vec_isa

    listed = slow_isa_list
    forgotten = []
    monkeypatch.setattr(aot_package, "_forget_isa_verdicts", lambda: forgotten.append(True))
    with pytest.raises(KeyboardInterrupt), aot_package.ProbesBeside({}):
        raise KeyboardInterrupt
    assert aot_package.ISA_LIST_AT_ONCE.users == 0 and cpu_vec_isa.valid_vec_isa_list is listed
    assert not aot_package._PROBERS and forgotten
    assert not [t for t in threading.enumerate() if t.name == aot_package.PROBE_THREAD]


def test_four_threads_asking_for_the_isa_list_at_once_never_probe_one_isa_together(monkeypatch):
    """torch's ``VecAVX512.__bool__`` changes the instance's flags while it probes: one caller at a time."""
    from torch._inductor import cpu_vec_isa

    lock = threading.Lock()

    class ISA:
        def __init__(self):
            self.active = self.most = self.probed = 0

        def __bool__(self):
            with lock:
                self.active += 1
                self.most = max(self.most, self.active)
            threading.Event().wait(0.01)
            with lock:
                self.active -= 1
                self.probed += 1
            return True

    isas = [ISA(), ISA(), ISA()]

    def listed():
        return [isa for isa in isas if isa]

    listed.cache_info = lambda: SimpleNamespace(currsize=0)  # never cached: every caller probes
    monkeypatch.setattr(cpu_vec_isa, "valid_vec_isa_list", listed)
    monkeypatch.setattr(aot_package, "_listed_isas", lambda module: isas)
    with aot_package.ProbesBeside(None):
        callers = [threading.Thread(target=cpu_vec_isa.valid_vec_isa_list) for _ in range(4)]
        for caller in callers:
            caller.start()
        for caller in callers:
            caller.join(60)
    assert [isa.most for isa in isas] == [1, 1, 1] and [isa.probed for isa in isas] == [8, 8, 8]  # pool + list, x4


def test_verdicts_probed_at_once_and_interrupted_wait_for_the_pool_and_are_forgotten(monkeypatch):
    from interrupting import injection_points, run_injected

    class ISA:
        def __bool__(self):
            threading.Event().wait(0.05)  # a probe still running when the caller is interrupted
            return True

    forgotten = []
    monkeypatch.setattr(aot_package, "_listed_isas", lambda module: [ISA(), ISA(), ISA()])
    monkeypatch.setattr(aot_package, "_forget_isa_verdicts", lambda: forgotten.append(True))
    for at in injection_points(aot_package._verdicts_at_once):
        where = run_injected(aot_package._verdicts_at_once, at)
        pool = [t for t in threading.enumerate() if t.name.startswith(aot_package.PROBE_THREAD + "_")]
        assert not pool, where  # waited for: no verdict is computed after the caller has gone
    assert forgotten  # an interrupt inside the pool's run forgot what its killed probes would have cached


@pytest.mark.parametrize("process_wide", [False, True])
def test_the_probes_read_the_build_options_c_compiler(tmp_path, isa_probes, fresh_inductor, monkeypatch, process_wide):
    gpp = shutil.which("g++")
    if gpp is None:
        pytest.skip("no g++")
    patches = torch_compat.installed()
    if process_wide:  # model torch < 2.12
        monkeypatch.setattr(type(patches), "config_is_thread_local", False)
    aot_options_bundle(tmp_path / "b", {"cpp.cxx": (gpp,)})
    thread = [cxx for name, cxx in isa_probes.cxx if name == aot_package.PROBE_THREAD]
    # Per-thread config (2.12+): the thread applies the options; process-wide, the compiler reaches its probes alone.
    assert thread == [gpp]
    other = not torch._inductor.config.cpp.vec_isa_ok  # a value not live (tests/conftest.py may preset it for workers)
    aot_options_bundle(tmp_path / "c", {"cpp.cxx": (gpp,), "cpp.vec_isa_ok": other})
    thread = [cxx for name, cxx in isa_probes.cxx if name == aot_package.PROBE_THREAD]
    # Another probe key than the compiler: per thread, applied; process-wide, no thread (it could not set it alone).
    assert thread == ([gpp] if patches.config_is_thread_local else []) + [gpp]


@pytest.mark.parametrize("process_wide", [False, True])
def test_the_probes_use_the_compiler_the_build_uses_where_inductors_is_passed_over(
    tmp_path, isa_probes, fresh_inductor, monkeypatch, process_wide
):
    from torch._inductor import cpp_builder

    own = shutil.which("g++")  # Inductor's own (cpp.cxx's default), passed over for another executable
    if own is None:
        pytest.skip("no g++")
    if process_wide:  # model torch < 2.12: the thread sets no config key; the compiler reaches its probes alone
        patches = torch_compat.installed()
        monkeypatch.setattr(type(patches), "config_is_thread_local", False)
    other = tmp_path / "other-g++"
    other.write_text(f'#!/bin/sh\nexec {own} "$@"\n')
    other.chmod(0o755)
    monkeypatch.setattr(aot_package, "cpp_compilers", lambda: [own, str(other)])
    monkeypatch.setattr(aot_package, "links_libstdcxx_statically", lambda cxx: cxx == own)
    before, function = torch._inductor.config.cpp.cxx, cpp_builder.get_cpp_compiler
    cpp_builder.is_gcc()  # answered for Inductor's own compiler before the build
    aot_options_bundle(tmp_path / "b", None)
    assert [cached for name, cached in isa_probes.answered if name == aot_package.PROBE_THREAD] == [0]  # asked anew
    thread = [cxx for name, cxx in isa_probes.cxx if name == aot_package.PROBE_THREAD]
    assert thread == [str(other)]
    # The verdicts at once on the thread's pool, in copies of its context.
    assert isa_probes.verdicts == [(name, str(other)) for name, _ in isa_probes.verdicts]
    assert all(name.startswith(aot_package.PROBE_THREAD + "_") for name, _ in isa_probes.verdicts)
    assert len(isa_probes.verdicts) == 3
    assert torch._inductor.config.cpp.cxx == before  # patched for the build only
    assert cpp_builder.get_cpp_compiler is function  # the wrapper is gone by identity
    if process_wide:  # nothing set in the config: on torch < 2.12 it would be every thread's
        assert [cxx for name, cxx in isa_probes.config_cxx if name == aot_package.PROBE_THREAD] == [before]
    # The thread's answers for its compiler are not kept.
    assert [getattr(cpp_builder, name).cache_info().currsize for name in COMPILER_ANSWERS] == [0] * len(COMPILER_ANSWERS)


def test_the_probe_compiler_reaches_only_the_probe_threads_context():
    import contextvars

    from torch._inductor import cpp_builder

    torchs = cpp_builder.get_cpp_compiler()
    with aot_package.ProbesBeside(None):
        assert cpp_builder.get_cpp_compiler() == torchs  # this thread: torch's choice, through the wrapper
        probe = contextvars.copy_context()
        probe.run(aot_package._PROBE_CXX.set, "/the/builds/g++")
        assert probe.run(cpp_builder.get_cpp_compiler) == "/the/builds/g++"
        seen = []
        other = threading.Thread(target=lambda: seen.append(cpp_builder.get_cpp_compiler()))
        other.start()
        other.join(60)
        assert seen == [torchs] and cpp_builder.get_cpp_compiler() == torchs
    assert probe.run(cpp_builder.get_cpp_compiler) == torchs  # released: torch's own function again


def test_the_probes_read_no_compiler_where_the_build_compiles_with_inductors_own(tmp_path, isa_probes, fresh_inductor):
    aot_options_bundle(tmp_path / "b", None)
    from torch._inductor import cpp_builder

    thread = [cxx for name, cxx in isa_probes.cxx if name == aot_package.PROBE_THREAD]
    assert thread == [cpp_builder.get_cpp_compiler()]  # the live value: a process-wide config needs nothing set


@pytest.mark.parametrize(
    ("aot_options", "kwargs", "error", "match"),
    [
        ({"no_such_key_anywhere": 1}, {}, ik.errors.UnknownKnob, r"aot_options: .*no_such_key_anywhere"),
        ({"coordinate-descent-tuning": "yes"}, {}, InvalidKnobValue, r"aot_options: .*coordinate_descent_tuning='yes'.*a bool"),
        (["coordinate_descent_tuning"], {}, InvalidKnobValue, r"aot_options=.*allowed a mapping of Inductor config keys"),
        ({"coordinate_descent_tuning": False}, {"aot": False}, InvalidKnobValue, r"aot_options=.*with aot=True"),
        (
            {"aot_inductor.package_cpp_only": True},
            {},
            InvalidKnobValue,
            r"keys the build owns.*got aot_inductor.package_cpp_only",
        ),
        ({"aot_inductor.package": False}, {}, InvalidKnobValue, r"keys the build owns.*got aot_inductor.package$"),
        (
            {"aot_inductor_mode.compile_standalone": True},  # forces a C++-only package
            {},
            InvalidKnobValue,
            r"keys the build owns.*got aot_inductor_mode.compile_standalone",
        ),
        ({"post_grad_custom_post_pass": print}, {}, InvalidKnobValue, r"not callables.*got post_grad_custom_post_pass"),
        (
            {"coordinate_descent_tuning": False},
            {"knobs": ik.Knobs(coordinate_descent_tuning=True)},
            InvalidKnobValue,
            r"aot_options=.*knobs do not set \(a knob wins\); got coordinate_descent_tuning",
        ),
    ],
)
def test_bad_aot_options_are_refused_before_anything_compiles(
    tmp_path, build_configs, fresh_inductor, aot_options, kwargs, error, match
):
    with pytest.raises(error, match=match):
        aot_options_bundle(tmp_path / "b", aot_options, **kwargs)
    assert build_configs == [] and not (tmp_path / "b").exists()


@pytest.mark.skipif(not HAS_MULTI_ARCH, reason=f"torch {torch.__version__} has no {aot_package.MULTI_ARCH}")
def test_a_build_that_fails_with_multi_arch_on_names_portable_false(tmp_path, monkeypatch):
    def compile_and_package(program, package_path, inductor_configs):
        raise RuntimeError("nvcc is required to build fatbin")  # codecache.py 2.13 :3257 on a host without CUDA's tools

    monkeypatch.setattr(torch._inductor, "aoti_compile_and_package", compile_and_package)
    with pytest.raises(InvalidKnobValue, match=r"nvcc is required to build fatbin \(portable=True turned .* portable=False"):
        portable_bundle(tmp_path / "b", portable=True)


def tuned_record(key: str, *timed: tuple[str, float]) -> types.SimpleNamespace:
    """An autotune record as ``table_from_records`` reads it: choices with a lookup key, an entry and a time."""
    choices = [
        types.SimpleNamespace(lookup_key=key, lookup_device_key=f"NVIDIA H200+{key}", lookup_entry={"template_id": t}, time_ms=ms)
        for t, ms in timed
    ]
    return types.SimpleNamespace(choices=choices)


@pytest.fixture
def compile_sees(monkeypatch):
    """AOTInductor's compile faked: it records the example batch size the export traced at and the lookup table the
    knobs set in Inductor's config around it; the load check a child that exits 0."""
    monkeypatch.setattr(aot_package, "LOAD_CHECK_CODE", "pass")
    monkeypatch.setattr(aot_package, "LOAD_CHECK_PRELOAD", ())  # a child that imports nothing ahead
    monkeypatch.setattr(aot_package, "FALLBACK_CXX", ())
    seen: list[tuple[int, object]] = []

    def compile_and_package(program, package_path, inductor_configs):
        table = getattr(torch._inductor.config, "lookup_table", None)
        seen.append((program.example_inputs[0][0].shape[0], getattr(table, "table", None)))
        with open(package_path, "wb") as out:
            out.write(b"package")

    monkeypatch.setattr(torch._inductor, "aoti_compile_and_package", compile_and_package)
    return seen


HAS_LOOKUP_TABLE = "lookup_table.table" in torch_compat.installed().config_keys(torch._inductor.config)


def build_linear(tuned, knobs=None):
    model = ik.compile(torch.nn.Linear(4, 4), knobs)
    return aot_package.build("test", model, lambda n: torch.randn(n, 4), [2, 3, 5], False, tuned)[1]


@pytest.mark.skipif(not HAS_LOOKUP_TABLE, reason=f"torch {torch.__version__} has no GEMM lookup table (2.10+)")
def test_the_aot_build_pins_the_warm_ups_choices_at_the_size_they_were_tuned_at(compile_sees):
    """The export traces at the warmed size that autotuned, and the warm-up's fastest choice per op is the lookup
    table Inductor's config holds inside the AOT compile: the build benchmarks nothing the warm-up did."""
    record = tuned_record("k+mm", ("triton::mm", 0.2), ("aten::mm", 0.1))
    built = build_linear([[], [record], []])
    assert compile_sees == [(3, {"NVIDIA H200+k+mm": [{"template_id": "aten::mm"}]})]
    assert built["pinned"] == 1 and set(built["seconds"]) == {"export", "compile", "load_check"}
    assert torch._inductor.config.lookup_table.table is None  # reverted after the build


@pytest.mark.skipif(not HAS_LOOKUP_TABLE, reason=f"torch {torch.__version__} has no GEMM lookup table (2.10+)")
def test_the_users_own_lookup_table_is_kept_and_nothing_tuned_means_the_last_size(compile_sees):
    mine = {"NVIDIA H200+mine+mm": [{"template_id": "triton::mm", "BLOCK_M": 64}]}
    record = tuned_record("k+mm", ("aten::mm", 0.1))
    assert build_linear([[record], [], []], ik.Knobs(lookup_table=mine))["pinned"] == 0
    assert build_linear([[], [], []])["pinned"] == 0
    assert compile_sees == [(2, mine), (5, None)]


@pytest.mark.skipif(not HAS_LOOKUP_TABLE, reason=f"torch {torch.__version__} has no GEMM lookup table (2.10+)")
def test_no_pin_beside_another_choices_handler_or_a_table_in_the_config(compile_sees):
    """The knob needs torch's LookupTableChoices as the choices handler: with the user's own handler (options) or a
    table set in Inductor's config directly, the build pins nothing and compiles as the user set it."""
    from torch._inductor.choices import InductorChoices

    class Mine(InductorChoices):
        pass

    record = tuned_record("k+mm", ("aten::mm", 0.1))
    model = ik.compile(torch.nn.Linear(4, 4), options={"inductor_choices_class": Mine})
    built = aot_package.build("test", model, lambda n: torch.randn(n, 4), [2, 3, 5], False, [[], [record], []])[1]
    assert built["pinned"] == 0
    theirs = {"NVIDIA H200+theirs+mm": [{"template_id": "aten::mm"}]}
    with torch._inductor.config.patch({"lookup_table.table": theirs}):
        assert build_linear([[], [record], []])["pinned"] == 0
    assert [table for _, table in compile_sees] == [None, theirs]


def test_tuned_must_have_one_entry_per_shape(compile_sees):
    with pytest.raises(InvalidKnobValue, match=r"tuned='4 entries'.*one list of autotune records per shape \(3\)"):
        build_linear([[], [], [], []])
    assert compile_sees == []


def test_a_torch_without_the_lookup_table_pins_nothing(compile_sees, monkeypatch):
    patches = torch_compat.installed()
    keys = [k for k in patches.config_keys(torch._inductor.config) if k != "lookup_table.table"]
    monkeypatch.setattr(type(patches), "config_keys", lambda self, cfg: keys)
    assert build_linear([[tuned_record("k+mm", ("aten::mm", 0.1))], [], []])["pinned"] == 0
    assert [size for size, _ in compile_sees] == [2]


@pytest.mark.skipif(not HAS_LOOKUP_TABLE, reason=f"torch {torch.__version__} has no GEMM lookup table (2.10+)")
def test_an_aot_save_reuses_the_choices_of_an_earlier_warm_up_of_the_model(compile_sees, monkeypatch, tmp_path):
    """The report given may be a later warm-up's (of the CUDA graphs), which autotuned nothing: the choices of the
    compiled model's earlier warm-up in this process are the ones reused, at the shape they were tuned at."""
    from inductor_knobs.serving import bundle_format, warm_up

    model = ik.compile(torch.nn.Linear(4, 4))
    factory = lambda n: torch.randn(n, 4)  # noqa: E731
    report = ik.serving.warmup(model, shapes=[2, 3, 5], factory=factory, probes=None)
    assert not report.records  # a CPU warm-up records nothing torch's lookup table holds: stand in for a GPU's
    monkeypatch.setitem(warm_up._TUNED, model, [(3, [tuned_record("k+mm", ("aten::mm", 0.1))])])
    header = ik.serving.save_serving_bundle(tmp_path / "b", model, report, aot=True, factory=factory)
    assert compile_sees == [(3, {"NVIDIA H200+k+mm": [{"template_id": "aten::mm"}]})]
    assert bundle_format.decode("test", header).aot["pinned"] == 1


def test_the_build_records_the_modules_of_the_output_classes():
    import aot_outputs_probe
    from torch.utils import _pytree

    pair = aot_outputs_probe.Pair(torch.zeros(1), torch.ones(1))
    spec = _pytree.tree_flatten([pair, (torch.zeros(1), {"a": torch.zeros(1)})])[1]
    assert aot_package.output_modules(spec) == ["aot_outputs_probe"]
    assert aot_package.output_modules(_pytree.tree_flatten(torch.zeros(1))[1]) == []
    named = aot_outputs_probe.Named(torch.zeros(1), torch.ones(1))  # a namedtuple: its class is the node's context
    assert aot_package.output_modules(_pytree.tree_flatten((named,))[1]) == ["aot_outputs_probe"]


@pytest.mark.parametrize(
    ("modules", "imported"), [(["aot_outputs_probe"], True), (["aot_outputs_probe; x"], False), ("x", False)]
)
def test_the_load_imports_the_modules_of_the_output_classes(aot_bundle, monkeypatch, modules, imported):
    """An AOT bundle's load imports the modules its header names for the outputs' classes (so the serving process needs
    no import of the model's library), only names that are module names, and a load without them still serves."""
    import sys

    monkeypatch.delitem(sys.modules, "aot_outputs_probe", raising=False)
    rewrite_header(aot_bundle, lambda h: h["serving"]["aot"].update(output_modules=modules))
    if not isinstance(modules, list):
        with pytest.raises(ik.serving.CompileCacheRefused, match="serving section does not read back"):
            load(aot_bundle)
        return
    loaded = load(aot_bundle)
    assert ("aot_outputs_probe" in sys.modules) is imported
    assert loaded.served is not None


def test_inductors_compiler_goes_last_when_it_links_libstdcxx_statically(tmp_path, compilers, monkeypatch):
    """Each build is a whole compile of the model: a compiler whose packages crash at load (static libstdc++, as
    /opt/gcc/bin/g++ on the GPU host) is not compiled with first."""
    bad, worse, good = (str(compilers.paths[name]) for name in ("bad", "worse", "good"))
    monkeypatch.setattr(aot_package, "links_libstdcxx_statically", lambda cxx: cxx == bad)
    assert linear_bundle(tmp_path / "b")["serving"]["aot"]["cxx"] == good
    assert compilers.compiled_with == [(worse,), (good,)]


@pytest.mark.skipif(not (shutil.which("g++") and shutil.which("readelf")), reason="needs g++ and readelf (binutils)")
def test_the_probe_tells_a_compiler_that_links_libstdcxx_statically(tmp_path):
    static = tmp_path / "static-g++"
    static.write_text('#!/bin/sh\nexec g++ -static-libstdc++ "$@"\n')
    static.chmod(0o755)
    assert aot_package.links_libstdcxx_statically(shutil.which("g++")) is False
    if aot_package.links_libstdcxx_statically(str(static)) is None:
        pytest.skip("g++ cannot link libstdc++ statically here (no libstdc++.a)")
    assert aot_package.links_libstdcxx_statically(str(static)) is True
    assert aot_package.links_libstdcxx_statically(str(tmp_path / "missing")) is None


def test_the_probe_reads_readelf_in_the_c_locale(tmp_path, monkeypatch):
    """readelf translates "Shared library:"; in another locale the probe must not call every compiler static."""
    monkeypatch.setenv("LC_ALL", "fr_FR.UTF-8")
    monkeypatch.setenv("LANGUAGE", "fr")
    if shutil.which("g++") and shutil.which("readelf"):
        assert aot_package.links_libstdcxx_statically(shutil.which("g++")) is False


def test_warm_ups_of_one_model_from_four_threads_keep_every_tuned_step_and_hold_no_model():
    import gc
    import threading
    import weakref

    from inductor_knobs.serving import warm_up

    models = [torch.nn.Linear(4, 4)]
    start = threading.Barrier(4)

    def add(thread: int) -> None:
        start.wait()
        for i in range(500):
            warm_up.remember_tuned(models[0], [((thread, i), ["record"])])

    threads = [threading.Thread(target=add, args=(t,)) for t in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(warm_up.tuned_steps(models[0])) == 2000
    gone = weakref.ref(models[0])
    models.clear()
    gc.collect()
    assert gone() is None  # the registry does not keep a model alive
    assert warm_up.tuned_steps(lambda: None) == []
