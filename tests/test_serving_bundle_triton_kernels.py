"""A serving bundle carries Triton's cache entries of the kernels served, and the load puts them into this process's
Triton cache: only where a key is missing, never outside the cache directory, refusing a tampered entry with nothing written.

The kernels are found where torch keeps them: ``CachingAutotuner`` s in the globals of ``PyCodeCache.modules``
(torch's own class list), each launcher's ``cache_hash`` under torch's ``triton_cache_dir(device)``
(``TRITON_CACHE_DIR``).  A CPU build has no Triton, so the autotuners are made here without compiling, over a
Triton cache laid out as Triton lays it out (``<key>/<kernel>.cubin``, ``<kernel>.json``, ``__grp__<kernel>.json``
naming its files by absolute path).
"""

from __future__ import annotations

import hashlib
import json
import os
import stat
import types
from pathlib import Path

import pytest
from torch._inductor.codecache import PyCodeCache
from torch._inductor.runtime.triton_heuristics import CachingAutotuner

from inductor_knobs.core import torch_compat
from inductor_knobs.serving import bundle_format, compile_cache, triton_kernels
from inductor_knobs.serving.errors import CompileCacheRefused
from inductor_knobs.serving.triton_kernels import PLACEHOLDER

KEY_A = "ABCDEFGHIJKLMNOPQRSTUVWXYZ234567ABCDEFGHIJKLMNOPQRST"  # Triton's keys are base32 of a sha256
KEY_B = "B" * 52

#: Serving bundles are torch 2.7+ (``torch.compiler.save_cache_artifacts``); 2.4's ``PyCodeCache`` keeps its
#: modules in ``cache`` (a dict), not the ``modules`` list these tests stand in for.
needs_bundles = pytest.mark.skipif(
    not torch_compat.installed().has_cache_artifacts, reason="serving bundles need torch.compiler.save_cache_artifacts (2.7+)"
)


def lay_out(cache: Path, key: str, kernel: str, cubin: bytes = b"\x7fELF cubin") -> Path:
    """One Triton cache entry as ``triton.compile`` leaves it (``FileCacheManager.put``/``put_group``)."""
    directory = cache / key
    directory.mkdir(parents=True)
    (directory / f"{kernel}.cubin").write_bytes(cubin)
    (directory / f"{kernel}.json").write_text(json.dumps({"hash": key.lower(), "name": kernel, "num_warps": 4}))
    (directory / f"{kernel}.source").write_text(f"def {kernel}(): pass")
    children = {name: str(directory / name) for name in (f"{kernel}.cubin", f"{kernel}.json", f"{kernel}.source")}
    (directory / f"__grp__{kernel}.json").write_text(json.dumps({"child_paths": children}))
    return directory


def autotuner(device: int, *keys: str) -> CachingAutotuner:
    """A ``CachingAutotuner`` after its first run: its launchers know their Triton cache key (torch's ``cache_hash``)."""
    tuner = object.__new__(CachingAutotuner)  # no Triton here to compile for __init__
    tuner.triton_meta = {"device": device, "device_type": "cuda"}
    tuner.launchers = [types.SimpleNamespace(cache_hash=key) for key in keys]
    return tuner


@pytest.fixture
def served(monkeypatch, tmp_path):
    """This process's loaded graph modules hold two kernels (one launched twice) and one whose entry is gone."""
    if not torch_compat.installed().has_cache_artifacts:
        pytest.skip("serving bundles need torch.compiler.save_cache_artifacts (2.7+)")
    cache = tmp_path / "build-triton"
    monkeypatch.setenv("TRITON_CACHE_DIR", str(cache))
    lay_out(cache, KEY_A, "triton_poi_fused_relu_0")
    lay_out(cache, KEY_B, "triton_red_fused_sum_1", cubin=b"\x00" * 4096)
    (cache / KEY_B / "tmp.pid_7_x").mkdir()  # Triton's own staging directory, mid-write: not carried
    graph = types.ModuleType("fake_output_code")
    graph.triton_poi_fused_relu_0 = autotuner(0, KEY_A)
    graph.triton_red_fused_sum_1 = autotuner(0, KEY_B, KEY_A)
    graph.triton_gone_2 = autotuner(0, "C" * 52)
    graph.not_a_kernel = "text"
    monkeypatch.setattr(PyCodeCache, "modules", [graph, graph])
    return cache


def files_of(directory: Path) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in sorted(directory.iterdir()) if p.is_file()}


def test_the_kernels_launched_round_trip_into_an_empty_triton_cache(served, monkeypatch, tmp_path):
    carried = triton_kernels.collect()
    assert [(k.key, k.device) for k in carried.kernels] == [(KEY_A, 0), (KEY_B, 0)] and carried.not_found == 1
    manifest, blob = triton_kernels.pack(carried)
    assert manifest["carried"] == 2 and manifest["not_found"] == 1 and manifest["bytes"] == len(blob) > 4096
    # The group file holds no path of the build host any more.
    group = dict(carried.kernels[0].files)["__grp__triton_poi_fused_relu_0.json"]
    assert str(served).encode() not in group and PLACEHOLDER.encode() in group

    manifest = json.loads(json.dumps(manifest))  # as the header reads back
    torch_part, kernels = triton_kernels.unpack("load('b')", manifest, b"torch artifacts" + blob)
    assert torch_part == b"torch artifacts" and kernels == carried.kernels

    here = tmp_path / "serving-host" / "triton"
    monkeypatch.setenv("TRITON_CACHE_DIR", str(here))  # what torch's triton_cache_dir(0) answers here
    assert triton_kernels.restore(kernels) == 2
    assert sorted(p.name for p in here.iterdir()) == [KEY_A, KEY_B]  # no staging directory left
    for key in (KEY_A, KEY_B):
        restored, built = here / key, served / key
        assert stat.S_IMODE(restored.stat().st_mode) == 0o700
        assert all(stat.S_IMODE(p.stat().st_mode) == 0o600 for p in restored.iterdir())
        wrote, had = files_of(restored), files_of(built)
        assert wrote.keys() == had.keys()
        assert all(wrote[n] == had[n] for n in wrote if not n.startswith("__grp__"))
        # Triton's FileCacheManager.get_group keeps the child paths that exist: all of them, in this directory.
        for name in (n for n in wrote if n.startswith("__grp__")):
            children = json.loads(wrote[name])["child_paths"]
            assert children and all(Path(p) == restored / c and Path(p).is_file() for c, p in children.items())


def test_an_existing_key_is_never_overwritten(served, monkeypatch, tmp_path):
    kernels = triton_kernels.unpack("x", *_packed())[1]
    here = tmp_path / "here"
    (here / KEY_A).mkdir(parents=True)
    (here / KEY_A / "triton_poi_fused_relu_0.cubin").write_bytes(b"Triton's own")
    outside = tmp_path / "elsewhere"
    outside.mkdir()
    (here / KEY_B).symlink_to(outside, target_is_directory=True)
    monkeypatch.setenv("TRITON_CACHE_DIR", str(here))
    assert triton_kernels.restore(kernels) == 0
    assert files_of(here / KEY_A) == {"triton_poi_fused_relu_0.cubin": b"Triton's own"}
    assert (here / KEY_B).is_symlink() and list(outside.iterdir()) == []
    assert sorted(p.name for p in here.iterdir()) == [KEY_A, KEY_B]


def test_an_empty_key_directory_counts_as_present(served, monkeypatch, tmp_path):
    kernels = triton_kernels.unpack("x", *_packed())[1]
    here = tmp_path / "here"
    (here / KEY_A).mkdir(parents=True)
    monkeypatch.setenv("TRITON_CACHE_DIR", str(here))
    assert triton_kernels.restore(kernels) == 1
    assert list((here / KEY_A).iterdir()) == [] and (here / KEY_B).is_dir()


def _packed() -> tuple[dict, bytes]:
    manifest, blob = triton_kernels.pack(triton_kernels.collect())
    return json.loads(json.dumps(manifest)), b"T" + blob


def _edit(manifest: dict, blob: bytes, where: str, value: object) -> tuple[dict, bytes]:
    kernel = manifest["kernels"][0]
    if where == "key":
        kernel["key"] = value
    elif where == "file":
        kernel["files"][0][0] = value
    elif where == "group":
        group = "__grp__triton_poi_fused_relu_0.json"
        offset = 1 + sum(size for name, size in kernel["files"][: [n for n, _ in kernel["files"]].index(group)])
        size = dict(kernel["files"])[group]
        new = json.dumps({"child_paths": {"triton_poi_fused_relu_0.cubin": value}}).encode()
        blob = blob[:offset] + new + blob[offset + size :]
        kernel["files"] = [[n, len(new) if n == group else s] for n, s in kernel["files"]]
        manifest["bytes"] += len(new) - size
    return manifest, blob


BAD = [
    ("key", ".."),
    ("key", "../../outside"),
    ("key", "/etc"),
    ("key", "a/b"),
    ("key", ""),
    ("key", ".hidden"),
    ("key", 7),
    ("file", "../../../.bashrc"),
    ("file", "/tmp/x.cubin"),
    ("file", ".."),
    ("file", "sub/x.cubin"),
    ("group", "/etc/passwd"),
    ("group", f"{PLACEHOLDER}/../../x"),
]


@pytest.mark.parametrize(("where", "value"), BAD)
def test_a_name_outside_the_cache_directory_is_refused_naming_it_with_nothing_written(
    served, monkeypatch, tmp_path, where, value
):
    manifest, blob = _edit(*_packed(), where, value)
    here = tmp_path / "here"
    monkeypatch.setenv("TRITON_CACHE_DIR", str(here))
    with pytest.raises(CompileCacheRefused, match=r"load_serving_bundle\('/srv/m.bundle'\) refused: its Triton kernels") as err:
        triton_kernels.unpack("load_serving_bundle('/srv/m.bundle')", manifest, blob)
    assert repr(value) in str(err.value) and "nothing was written" in str(err.value)
    assert not here.exists() and sorted(p.name for p in tmp_path.iterdir()) == ["build-triton"]


@pytest.mark.parametrize(
    "damage",
    [
        lambda m: m.update(carried=3),
        lambda m: m.update(bytes=m["bytes"] + 1),
        lambda m: m["kernels"][0]["files"][0].__setitem__(1, -1),
        lambda m: m["kernels"][1].update(key=KEY_A),
        lambda m: m["kernels"][0].update(device=True),
        lambda m: m["kernels"][0].update(files="x"),
        lambda m: m.pop("kernels"),
    ],
)
def test_a_manifest_that_does_not_add_up_is_refused(served, damage):
    manifest, blob = _packed()
    damage(manifest)
    with pytest.raises(CompileCacheRefused, match=r"its Triton kernels entry does not read back .*nothing was written"):
        triton_kernels.unpack("load_serving_bundle('b')", manifest, blob)


def test_what_cannot_be_carried_is_skipped_and_counted(served, tmp_path):
    (served / KEY_A / "linked.ptx").symlink_to(tmp_path / "anywhere")  # a link in an entry: the entry is not carried
    outside = lay_out(tmp_path / "other", KEY_B, "k")
    for p in (served / KEY_B).iterdir():
        if p.is_file():
            p.unlink()
    (served / KEY_B / "tmp.pid_7_x").rmdir()
    (served / KEY_B).rmdir()
    (served / KEY_B).symlink_to(outside, target_is_directory=True)  # the key itself a link: not followed
    carried = triton_kernels.collect()
    assert carried.kernels == () and carried.not_found == 3


@needs_bundles
def test_without_triton_autotuners_nothing_is_carried_and_old_bundles_have_nothing_to_restore(monkeypatch):
    monkeypatch.setattr(PyCodeCache, "modules", [])
    manifest, blob = triton_kernels.pack(triton_kernels.collect())
    assert manifest == {"kernels": [], "carried": 0, "bytes": 0, "not_found": 0} and blob == b""
    assert triton_kernels.unpack("x", manifest, b"torch") == (b"torch", ())
    assert triton_kernels.unpack("x", None, b"torch") == (b"torch", ())  # a bundle written before the field
    assert triton_kernels.restore(()) == 0


def test_a_version_1_serving_section_reads_back_without_kernels():
    section = {
        "version": 1,
        "compile": {"knobs": {}, "mode": None, "options": None, "torch_compile": {}},
        "shapes": [8],
        "buckets": [8],
        "graphs": None,
        "baselines": {
            "signatures": [],
            "shape_seconds": [],
            "profiler_seconds": None,
            "steady_state_ms": None,
            "host_share": None,
        },
        "triton_kernels": {"kernels": [{"key": "..", "device": 0, "files": []}], "carried": 1, "bytes": 0, "not_found": 0},
    }
    spec = bundle_format.decode("x", {"serving": section, "header_sha256": "-"})
    assert spec.triton_kernels is None  # version 1 had no kernels: its whole payload is torch's


@needs_bundles
def test_the_kernels_bytes_are_covered_by_the_payload_sha256(monkeypatch):
    """The header's sha256s cover the manifest and the kernels' bytes: compile_cache's one rule."""
    import torch

    monkeypatch.setattr(
        torch.compiler, "save_cache_artifacts", lambda: (b"torch", types.SimpleNamespace(artifacts={"inductor": [1]}))
    )
    payload, header = compile_cache.saved_artifacts("x", compile_cache._knobs_of(None), b"kernels")
    assert payload == b"torchkernels" and header["payload_sha256"] == hashlib.sha256(b"torchkernels").hexdigest()
    with pytest.raises(CompileCacheRefused, match="payload does not match its sha256"):
        compile_cache.check_payload("x", header, b"torchkernelz")


def test_the_restore_writes_into_torchs_triton_cache_dir_when_triton_cache_dir_is_unset(served, monkeypatch, tmp_path):
    kernels = triton_kernels.unpack("x", *_packed())[1]
    monkeypatch.delenv("TRITON_CACHE_DIR")
    monkeypatch.setenv("TORCHINDUCTOR_CACHE_DIR", str(tmp_path / "inductor"))
    assert triton_kernels.restore(kernels) == 2
    # torch's triton_cache_dir(0): what CachingAutotuner.__init__ then exports as TRITON_CACHE_DIR.
    assert sorted(p.name for p in (tmp_path / "inductor" / "triton" / "0").iterdir()) == [KEY_A, KEY_B]
    assert os.environ.get("TRITON_CACHE_DIR") is None  # the restore sets no variable of the process


def test_four_threads_restoring_at_once_write_each_key_once_and_whole(served, monkeypatch, tmp_path):
    """Serving processes (or threads) loading bundles into one Triton cache at the same moment: one of them
    writes each key, the others find it there; no reader sees part of a kernel, no staging directory stays."""
    import threading

    kernels = triton_kernels.unpack("x", *_packed())[1]
    here = tmp_path / "shared-triton"
    monkeypatch.setenv("TRITON_CACHE_DIR", str(here))
    start, written = threading.Barrier(4), []

    def load() -> None:
        start.wait(60)
        written.append(triton_kernels.restore(kernels))

    threads = [threading.Thread(target=load) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    assert sum(written) == 2 and len(written) == 4
    assert sorted(p.name for p in here.iterdir()) == [KEY_A, KEY_B]
    for kernel in kernels:
        assert files_of(here / kernel.key).keys() == {name for name, _ in kernel.files}
