"""torch's per-shape fixes as knobs: cudnn_sdpa_avoid_recompile, cudagraph_capture_sizes, lookup_table.

Each is checked as torch sees it: the environment variable and config keys read inside Inductor's compile
(GraphLowering), Inductor's choices handler by identity, torch's own lookup ("lookup hit") in a fresh process
on an empty cache directory; plus validation, undo, precedence and the per-release declarations.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import threading
import types
from pathlib import Path

import pytest
import torch
from conftest import inside_compile
from inductor_knobs.patches.features import CUDNN_SDPA_AVOID_RECOMPILE_VAR as VAR

import inductor_knobs as ik
from inductor_knobs.core import torch_compat
from inductor_knobs.core.knobs import KNOBS, Config, Knob
from inductor_knobs.errors import (
    ConcurrentKnobsError,
    InvalidKnobValue,
    LookupTableUnusedWarning,
    NotSupportedOnThisTorch,
    SettingAlreadyRead,
    SettingKeptWarning,
)

WORKER = Path(__file__).with_name("lookup_worker.py")
RELEASE = torch_compat.release_of(torch.__version__)
TORCH = re.escape(torch.__version__)
HAVE = {name for name, row in KNOBS.items() if row.on(RELEASE)}
needs = {
    name: pytest.mark.skipif(name not in HAVE, reason=f"torch {torch.__version__} has no {name}")
    for name in ("cudagraph_capture_sizes", "lookup_table", "cudnn_sdpa_avoid_recompile", "keep_static_cubin_raw")
}
TABLE = {"((torch.float32, [8, 8], [8, 1]), (torch.float32, [8, 8], [8, 1]))+mm": [{"template_id": "aten::mm"}]}


@pytest.fixture(autouse=True)
def _variable_as_found():
    before = os.environ.get(VAR)
    yield
    assert os.environ.get(VAR) == before, "a test left TORCH_CUDNN_SDPA_AVOID_RECOMPILE changed"


def _sin(x):
    return x.sin()


# -- per-release declarations --------------------------------------------------------------------


@pytest.mark.parametrize(
    ("version", "features"),
    [
        ("2.4.1", set()),
        ("2.5.1", set()),
        ("2.6.0", set()),
        ("2.7.1", set()),
        ("2.8.0", {"cudagraph_capture_sizes"}),
        ("2.9.0", {"cudagraph_capture_sizes", "cudnn_sdpa_avoid_recompile"}),
        ("2.10.0", {"cudagraph_capture_sizes", "cudnn_sdpa_avoid_recompile", "lookup_table"}),
        ("2.11.0", {"cudagraph_capture_sizes", "cudnn_sdpa_avoid_recompile", "lookup_table"}),
        ("2.12.0", {"cudagraph_capture_sizes", "cudnn_sdpa_avoid_recompile", "lookup_table"}),
        ("2.13.0+cpu", {"cudagraph_capture_sizes", "cudnn_sdpa_avoid_recompile", "lookup_table", "keep_static_cubin_raw"}),
        ("2.14.1", {"cudagraph_capture_sizes", "cudnn_sdpa_avoid_recompile", "lookup_table", "keep_static_cubin_raw"}),
        (
            "2.15.0",
            {
                "cudagraph_capture_sizes",
                "cudnn_sdpa_avoid_recompile",
                "lookup_table",
                "cudagraph_dynamic_shape_rerecord_limit",
                "keep_static_cubin_raw",
            },
        ),
    ],
)
def test_each_release_has_the_knobs_its_rows_declare(version, features):
    release = torch_compat.release_of(version)
    assert {name for name, row in KNOBS.items() if row.since or row.until if row.on(release)} == features


def test_the_installed_config_has_exactly_the_config_keys_the_rows_declare(cfg):
    for name, row in KNOBS.items():
        if isinstance(row.changes, Config):
            assert (row.changes.key in cfg._config) == row.on(RELEASE), name


@pytest.mark.parametrize(
    ("kwargs", "first"),
    [
        ({"cudagraph_capture_sizes": (2, 4)}, "2.8"),
        ({"config": {"triton.cudagraph_capture_sizes": (2, 4)}}, "2.8"),
        ({"cudnn_sdpa_avoid_recompile": True}, "2.9"),
        ({"lookup_table": TABLE}, "2.10"),
        ({"keep_static_cubin_raw": True}, "2.13"),
        ({"config": {"keep_static_cubin_raw": True}}, "2.13"),
    ],
)
def test_a_release_without_the_knob_refuses_it_naming_the_release_and_applies_nothing(monkeypatch, patches, cfg, kwargs, first):
    monkeypatch.setattr(Knob, "on", lambda self, release: self.since is None)  # as torch 2.7 has them
    before = cfg.max_autotune
    with pytest.raises(NotSupportedOnThisTorch, match=rf"needs torch {first} or newer.*{TORCH}.*Nothing was applied"):
        with ik.knobs(max_autotune=not before, **kwargs):
            pass
    assert cfg.max_autotune is before  # and the variable as found: the autouse fixture


# -- validation --------------------------------------------------------------------------------------


@pytest.mark.parametrize("value", [[0], [-1], "1,2", [True], [], [(1, 0)], 4, [1.5], {"a": 1}])
def test_bad_capture_sizes_name_knob_value_allowed_and_torch(value):
    with pytest.raises(InvalidKnobValue, match=rf"cudagraph_capture_sizes=.* is invalid on torch {TORCH}: allowed"):
        ik.Knobs(cudagraph_capture_sizes=value)


def test_capture_sizes_are_normalised_and_config_entries_checked_alike():
    assert ik.Knobs(cudagraph_capture_sizes=[1, 2, (3, 4), 2]).cudagraph_capture_sizes == (1, 2, (3, 4))
    with pytest.raises(InvalidKnobValue, match=r"config\['triton.cudagraph_capture_sizes'\]=\[0\]"):
        ik.Knobs(config={"triton.cudagraph_capture_sizes": [0]})
    assert ik.Knobs.from_env({"INDUCTOR_KNOBS_CUDAGRAPH_CAPTURE_SIZES": "1, 2,4"}).cudagraph_capture_sizes == (1, 2, 4)
    with pytest.raises(InvalidKnobValue, match="INDUCTOR_KNOBS_CUDAGRAPH_CAPTURE_SIZES='1,x'"):
        ik.Knobs.from_env({"INDUCTOR_KNOBS_CUDAGRAPH_CAPTURE_SIZES": "1,x"})


@pytest.mark.parametrize(
    ("value", "allowed"),
    [
        ({}, "non-empty mapping"),
        ([1], "non-empty mapping"),
        ({"k+mm": [{"BLOCK_M": 32}]}, "string 'template_id'"),
        ({"k+mm": "aten::mm"}, "lists of entries"),
        ({"k+mm": []}, "at least one entry"),
        ({"k+mm": [{"template_id": "triton::mm", "BLOCK_M": [32]}]}, "JSON scalars"),
        ("/nonexistent/table.json", "readable JSON file"),
    ],
)
def test_bad_lookup_tables_name_knob_value_allowed_and_torch(value, allowed):
    with pytest.raises(InvalidKnobValue, match=rf"lookup_table=.* is invalid on torch {TORCH}: allowed .*{allowed}"):
        ik.Knobs(lookup_table=value)


def test_a_lookup_table_file_that_is_not_json(tmp_path):
    path = tmp_path / "table.json"
    path.write_text("{not json")
    with pytest.raises(InvalidKnobValue, match=r"lookup_table='.*table.json' .* readable JSON file"):
        ik.Knobs(lookup_table=path)
    path.write_text(json.dumps(TABLE))
    assert (
        ik.Knobs(lookup_table=str(path)).lookup_table
        == TABLE
        == ik.Knobs.from_env({"INDUCTOR_KNOBS_LOOKUP_TABLE": str(path)}).lookup_table
    )


def test_cudnn_flag_is_a_bool():
    with pytest.raises(InvalidKnobValue, match=rf"cudnn_sdpa_avoid_recompile='1' is invalid on torch {TORCH}"):
        ik.Knobs(cudnn_sdpa_avoid_recompile="1")


# -- keep_static_cubin_raw ----------------------------------------------------------------------------


def test_keep_static_cubin_raw_is_a_bool():
    with pytest.raises(InvalidKnobValue, match=rf"keep_static_cubin_raw='1' is invalid on torch {TORCH}: allowed True or False"):
        ik.Knobs(keep_static_cubin_raw="1")
    assert ik.Knobs.from_env({"INDUCTOR_KNOBS_KEEP_STATIC_CUBIN_RAW": "on"}).keep_static_cubin_raw is True


@needs["keep_static_cubin_raw"]
def test_keep_static_cubin_raw_inside_the_compile_and_undone(monkeypatch, fresh_inductor, cfg):
    seen = inside_compile(monkeypatch, lambda: cfg.keep_static_cubin_raw)
    before = cfg.keep_static_cubin_raw
    with ik.record_compiles() as rec, ik.knobs(keep_static_cubin_raw=not before):
        torch.compile(_sin)(torch.randn(3))
    assert seen == [not before] and rec.attestations[0].value("keep_static_cubin_raw") is (not before)
    assert cfg.keep_static_cubin_raw is before


@needs["keep_static_cubin_raw"]
def test_keep_static_cubin_raw_keeps_the_cubin_torch_caches():
    """torch's reader of the key (``CachingAutotuner.prepare_for_caching``, 2.13 ``runtime/triton_heuristics.py``
    :975, run as a compile's cache entry is made) keeps a statically launched kernel's cubin only under the knob."""
    from torch._inductor.runtime import triton_heuristics as th

    def cached_cubin():
        result = object.__new__(th.StaticTritonCompileResult)
        result.kernel = types.SimpleNamespace(cubin_raw=b"cubin")
        autotuner = object.__new__(th.CachingAutotuner)
        autotuner.compile_results = [result]
        autotuner.prepare_for_caching()
        return result.kernel.cubin_raw

    with ik.knobs(keep_static_cubin_raw=True):
        kept = cached_cubin()
    assert kept == b"cubin" and cached_cubin() is None


# -- cudagraph_capture_sizes ---------------------------------------------------------------------------


@needs["cudagraph_capture_sizes"]
def test_capture_sizes_inside_the_compile_and_undone(monkeypatch, fresh_inductor, cfg):
    seen = inside_compile(monkeypatch, lambda: cfg.triton.cudagraph_capture_sizes)
    before = cfg.triton.cudagraph_capture_sizes
    with ik.record_compiles() as rec, ik.knobs(cudagraph_capture_sizes=[2, 4]):
        torch.compile(_sin)(torch.randn(3))
    assert seen == [(2, 4)] and rec.attestations[0].value("triton.cudagraph_capture_sizes") == (2, 4)
    assert cfg.triton.cudagraph_capture_sizes is before


@needs["cudagraph_capture_sizes"]
def test_capture_sizes_beat_torch_compile_options(monkeypatch, fresh_inductor, cfg):
    seen = inside_compile(monkeypatch, lambda: cfg.triton.cudagraph_capture_sizes)
    with ik.record_compiles() as rec, ik.knobs(cudagraph_capture_sizes=(2, 4)):
        torch.compile(_sin, options={"triton.cudagraph_capture_sizes": (8,)})(torch.randn(3))
    (attested,) = [s for s in rec.attestations[0].settings if s.key == "triton.cudagraph_capture_sizes"]
    assert seen == [(2, 4)] and attested.overrode == (8,)


def test_capture_sizes_set_one_way_only():
    with pytest.raises(InvalidKnobValue, match="set it one way only"):
        with ik.knobs(cudagraph_capture_sizes=(2,), config={"triton.cudagraph_capture_sizes": (4,)}):
            pass
    merged = ik.Knobs(config={"triton.cudagraph_capture_sizes": (4,)}).merged(ik.Knobs(cudagraph_capture_sizes=(2,)))
    assert merged.cudagraph_capture_sizes == (2,) and "triton.cudagraph_capture_sizes" not in dict(merged.config)


# -- cudnn_sdpa_avoid_recompile ----------------------------------------------------------------------------


@needs["cudnn_sdpa_avoid_recompile"]
@pytest.mark.parametrize("prior", [None, "0"])
def test_the_variable_inside_the_compile_and_restored_exactly(monkeypatch, patches, fresh_inductor, prior):
    monkeypatch.setattr(type(patches), "cuda_started", lambda self: False)  # as in a process before its first CUDA call
    if prior is None:
        monkeypatch.delenv(VAR, raising=False)
    else:
        monkeypatch.setenv(VAR, prior)
    seen = inside_compile(monkeypatch, lambda: os.environ.get(VAR))
    with ik.record_compiles() as rec, ik.knobs(cudnn_sdpa_avoid_recompile=True):
        assert os.environ[VAR] == "1"
        torch.compile(_sin)(torch.randn(3))
    assert seen == ["1"] and rec.attestations[0].value("cudnn_sdpa_avoid_recompile") is True
    assert os.environ.get(VAR) == prior


@needs["cudnn_sdpa_avoid_recompile"]
@pytest.mark.parametrize("prior", [None, "0"])
def test_processes_started_inside_the_block_do_not_inherit_the_variable(monkeypatch, patches, prior):
    """An ablation started inside the block: its runs' environment (the fork server's and each worker's)
    has the variable as it was before the block, so a baseline arm does not measure with the block's value."""
    from inductor_knobs.ablation import spec, workers

    monkeypatch.setattr(type(patches), "cuda_started", lambda self: False)
    if prior is None:
        monkeypatch.delenv(VAR, raising=False)
    else:
        monkeypatch.setenv(VAR, prior)
    with ik.knobs(cudnn_sdpa_avoid_recompile=True):
        with ik.knobs(cudnn_sdpa_avoid_recompile=True):  # nested: the outermost block's find counts
            assert os.environ[VAR] == "1"
            assert workers.base_env("/nonexistent").get(VAR) == prior
            assert workers.worker_env(spec.Arm("baseline"), None, "/nonexistent", None).get(VAR) == prior
    assert os.environ.get(VAR) == prior and workers.base_env("/nonexistent").get(VAR) == prior


@needs["cudnn_sdpa_avoid_recompile"]
def test_once_cuda_started_a_change_is_refused_and_nothing_applied(monkeypatch, patches, cfg):
    monkeypatch.setattr(type(patches), "cuda_started", lambda self: True)  # torch may have read it already
    monkeypatch.delenv(VAR, raising=False)
    before = cfg.max_autotune
    with pytest.raises(
        SettingAlreadyRead, match=r"once per process, at its first dense cuDNN attention call.*nothing was changed"
    ):
        with ik.knobs(max_autotune=not before, cudnn_sdpa_avoid_recompile=True):
            pass
    assert cfg.max_autotune is before and VAR not in os.environ
    assert isinstance(SettingAlreadyRead("x"), ik.KnobNotApplied)
    with ik.knobs(cudnn_sdpa_avoid_recompile=False):  # what the variable already says: nothing to change, allowed
        assert os.environ[VAR] == "0"


@needs["cudnn_sdpa_avoid_recompile"]
def test_cuda_started_inside_the_block_warns_that_torch_keeps_the_value(monkeypatch, patches):
    started = [False]
    monkeypatch.setattr(type(patches), "cuda_started", lambda self: started[0])
    monkeypatch.delenv(VAR, raising=False)
    with pytest.warns(SettingKeptWarning, match="torch keeps what it read"):
        with ik.knobs(cudnn_sdpa_avoid_recompile=True):
            started[0] = True  # a first cuDNN attention call inside the block
    assert VAR not in os.environ


@needs["cudnn_sdpa_avoid_recompile"]
def test_a_second_thread_cannot_change_the_process_variable_meanwhile(monkeypatch, patches):
    monkeypatch.setattr(type(patches), "cuda_started", lambda self: False)
    errors = []

    def other():
        try:
            with ik.knobs(cudnn_sdpa_avoid_recompile=False):
                pass
        except ConcurrentKnobsError as err:
            errors.append(err)

    with ik.knobs(cudnn_sdpa_avoid_recompile=True):
        thread = threading.Thread(target=other)
        thread.start()
        thread.join()
        assert os.environ[VAR] == "1"
    assert len(errors) == 1


# -- lookup_table ------------------------------------------------------------------------------------------


@needs["lookup_table"]
def test_table_and_handler_inside_the_compile_and_the_handler_put_back_by_identity(monkeypatch, fresh_inductor, cfg):
    from torch._inductor.virtualized import V

    seen = inside_compile(monkeypatch, lambda: (cfg.lookup_table.table, type(V.choices).__name__))
    handler = V.choices
    with pytest.warns(LookupTableUnusedWarning, match="CUDA-only"):
        with ik.record_compiles() as rec, ik.knobs(lookup_table=TABLE):
            torch.compile(_sin)(torch.randn(3))
    assert seen == [(TABLE, "LookupTableChoices")]
    assert rec.attestations[0].value("lookup_table.table") == TABLE
    assert rec.attestations[0].value("torch._inductor.virtualized.V.choices") == "LookupTableChoices"
    assert V.choices is handler and cfg.lookup_table.table is None


@needs["lookup_table"]
def test_someone_elses_choices_handler_is_not_replaced(fresh_inductor):
    from torch._inductor.choices import InductorChoices
    from torch._inductor.virtualized import V

    class Mine(InductorChoices):
        pass

    with V.set_choices_handler(Mine()), pytest.raises(ik.KnobNotApplied, match=r"LookupTableChoices.*Mine"):
        with ik.knobs(lookup_table=TABLE):
            torch.compile(_sin)(torch.randn(3))


@needs["lookup_table"]
def test_round_trip_record_write_then_torch_finds_it_in_a_fresh_process(cpu_autotune, tmp_path):
    """Autotune once on CPU (ATen vs the C++ template), write torch's table, load it in a fresh process on an empty
    cache directory: torch's own LookupTableChoices finds the recorded key and logs a hit (with its CUDA-only
    guards lifted, as a GPU has them: see lookup_worker.py); without the knob's handler it does not."""
    with ik.record_autotune() as rec, ik.knobs(**cpu_autotune):
        torch.compile(lambda x, y: torch.bmm(x, y))(torch.randn(4, 64, 32), torch.randn(4, 32, 48))
    path = tmp_path / "table.json"
    assert rec.write_lookup_table(path, top=2) == 1
    table = json.loads(path.read_text())
    ((key, entries),) = table.items()
    assert key.endswith("+bmm") and "[4, 64, 32]" in key and entries == [{"template_id": "aten::bmm"}]
    assert rec.lookup_table(device=True) == table  # a CPU choice has no device key
    found = {}
    for mode in ("cpu", "cpu-plain"):
        env = {**os.environ, "TORCHINDUCTOR_CACHE_DIR": str(tmp_path / f"cache-{mode}")}
        done = subprocess.run([sys.executable, str(WORKER), str(path), mode], env=env, capture_output=True, text=True, check=True)
        found[mode] = json.loads(done.stdout.strip().splitlines()[-1])
    assert found["cpu"]["hits"] and "aten::bmm" in found["cpu"]["hits"][0]
    assert found["cpu"]["table_attested"] and found["cpu"]["handler"] == ["LookupTableChoices"]
    assert found["cpu"]["unused_warnings"]  # a real CPU process is told the table is CUDA-only
    assert not found["cpu-plain"]["hits"]


def test_write_lookup_table_refuses_an_empty_table(tmp_path):
    rec = ik.record_autotune()
    with pytest.raises(InvalidKnobValue, match="none of the 0 autotuned ops"):
        rec.write_lookup_table(tmp_path / "t.json")
    with pytest.raises(InvalidKnobValue, match="top=0"):
        rec.lookup_table(top=0)


@pytest.mark.gpu
@needs["lookup_table"]
def test_gpu_a_pinned_table_compiles_without_benchmarking_in_a_fresh_process(tmp_path):
    """On a GPU with the Triton template in use: record the fp16 mm's autotune, pin the winner (top=1), and a
    fresh process on an empty cache directory compiles it from the table: torch logs the hit, no benchmark."""
    if not torch.cuda.is_available():
        pytest.skip("needs CUDA")
    a = torch.randn(256, 512, device="cuda", dtype=torch.float16)
    b = torch.randn(512, 384, device="cuda", dtype=torch.float16)
    with ik.record_autotune() as rec, ik.knobs(max_autotune=True, gemm_backends="ATEN,TRITON", min_sms=1):
        torch.compile(lambda x, y: x @ y)(a, b)
    path = tmp_path / "table.json"
    rec.write_lookup_table(path, top=1)
    env = {**os.environ, "TORCHINDUCTOR_CACHE_DIR": str(tmp_path / "cache"), "TRITON_CACHE_DIR": str(tmp_path / "triton")}
    done = subprocess.run([sys.executable, str(WORKER), str(path), "cuda"], env=env, capture_output=True, text=True, check=True)
    found = json.loads(done.stdout.strip().splitlines()[-1])
    assert found["hits"] and found["table_attested"] and found["handler"] == ["LookupTableChoices"]
    assert found["benchmarked"] == [] and not found["unused_warnings"]
