"""save_compile_cache / load_compile_cache: warm restart with zero autotuning, and what gets refused."""

from __future__ import annotations

import dataclasses
import hashlib
import json
import os
import re
import shutil
import stat
import subprocess
import sys
import threading
import types
from pathlib import Path

import pytest
import torch

import inductor_knobs as ik
from inductor_knobs.core import torch_compat
from inductor_knobs.serving import compile_cache

WORKER = Path(__file__).with_name("cache_worker.py")
#: The knobs cache_worker.py compiles under.
KNOBS = ik.Knobs(max_autotune=True, gemm_backends="ATEN,CPP", min_sms=1)
#: The user that files "of another user" are given to (nobody); chown needs root.
OTHER_UID = 65534


def run_worker(mode, path, min_sms, tmp_path):
    env = {**os.environ, "TORCHINDUCTOR_CACHE_DIR": str(tmp_path / f"inductor-{mode}-{min_sms}")}
    out = subprocess.run([sys.executable, str(WORKER), mode, str(path), str(min_sms)], env=env, capture_output=True, text=True)
    assert out.returncode == 0, out.stderr[-3000:]
    return json.loads(out.stdout.strip().splitlines()[-1])


@pytest.fixture
def artifacts_api(patches):
    if not patches.has_cache_artifacts:
        pytest.skip(f"torch {torch.__version__} has no cache artifacts API")


@pytest.fixture(scope="module")
def saved_once(tmp_path_factory):
    """One cache file per test module: building it costs a subprocess and a CPU autotune."""
    patches = torch_compat.installed()
    if not patches.has_cache_artifacts:
        pytest.skip(f"torch {torch.__version__} has no cache artifacts API")
    if torch.backends.cpu.get_cpu_capability() not in ("AVX2", "AVX512"):
        pytest.skip("Inductor's C++ GEMM template needs AVX2 or AVX512")
    tmp = tmp_path_factory.mktemp("cache")
    path = tmp / "compile.cache"
    assert run_worker("save", path, 1, tmp)["benchmarked"] == 1
    return path


@pytest.fixture
def other_user(private_dir):
    """Skip unless this process can give files to another user (root, or CAP_CHOWN)."""
    probe = private_dir / ".chown-probe"
    probe.touch()
    try:
        os.chown(probe, OTHER_UID, OTHER_UID)
    except PermissionError:
        pytest.skip(f"uid {os.geteuid()} cannot chown files to uid {OTHER_UID}; ownership tests need root")
    finally:
        probe.unlink()
    return OTHER_UID


@pytest.fixture
def fake_load(artifacts_api, monkeypatch):
    """Stand in for torch.compiler.load_cache_artifacts: record each payload, report one artifact."""
    loaded = []

    def load(payload):
        loaded.append(payload)
        return types.SimpleNamespace(artifacts={"inductor": ["key"]})

    monkeypatch.setattr(torch.compiler, "load_cache_artifacts", load)
    return loaded


@pytest.fixture
def private_inductor_cache(monkeypatch, tmp_path):
    """Where a real load_cache_artifacts in this process writes: a directory of this test's own."""
    monkeypatch.setenv("TORCHINDUCTOR_CACHE_DIR", str(tmp_path / "inductor-in-process"))


def write_cache(path, payload=b"payload", artifacts=None, knobs=None):
    """A cache file with a header that matches this process and ``payload`` (whatever it holds)."""
    header = {
        **compile_cache.identity(knobs or ik.Knobs()),
        "artifacts": {"inductor": 1} if artifacts is None else artifacts,
        "payload_sha256": hashlib.sha256(payload).hexdigest(),
    }
    path.write_bytes(compile_cache.MAGIC + json.dumps(header, sort_keys=True).encode() + b"\n" + payload)
    path.chmod(0o600)
    return path


@pytest.fixture
def saved(saved_once, private_dir):
    """A private copy of the cache file that a test may damage."""
    path = private_dir / "compile.cache"
    shutil.copyfile(saved_once, path)
    path.chmod(0o600)
    return path


def test_second_process_compiles_with_zero_autotuning(saved, tmp_path):
    # Each process gets its own empty Inductor cache directory: only the loaded file can help.  The control,
    # the same compile in a fresh process without the file, is the process that saved it (saved_once asserts
    # that it benchmarked once), so no third process compiles here.
    assert run_worker("load", saved, 1, tmp_path)["benchmarked"] == 0


def test_other_knobs_are_refused_naming_the_difference(saved):
    with pytest.raises(ik.serving.CompileCacheRefused, match=r"knobs_digest.*File knobs: .*'min_sms': 1.*here: .*'min_sms': 2"):
        ik.serving.load_compile_cache(saved, ik.Knobs(max_autotune=True, gemm_backends="ATEN,CPP", min_sms=2))


def test_other_torch_or_device_is_refused(saved, monkeypatch):
    knobs = ik.Knobs(max_autotune=True, gemm_backends="ATEN,CPP", min_sms=1)
    real = compile_cache.identity
    built_on = re.escape(real(knobs)["device"])  # the file was saved on this machine ('cpu:…', or a GPU's)
    monkeypatch.setattr(compile_cache, "identity", lambda k: {**real(k), "torch": "2.99.0", "device": "cuda:H200"})
    expected = rf"torch: file .*here '2.99.0'; device: file '{built_on}', here 'cuda:H200'"
    with pytest.raises(ik.serving.CompileCacheRefused, match=expected):
        ik.serving.load_compile_cache(saved, knobs)


@pytest.mark.parametrize("mode", [0o664, 0o646])
def test_file_writable_by_others_is_refused(artifacts_api, private_dir, mode):
    path = private_dir / "c.cache"
    path.write_bytes(compile_cache.MAGIC)
    path.chmod(mode)
    with pytest.raises(ik.serving.CompileCacheRefused, match=r"pickled data.*writable by group or others.*allow_unsafe"):
        ik.serving.load_compile_cache(path)


def test_shared_directory_without_sticky_bit_is_refused(artifacts_api, private_dir):
    shared = private_dir / "shared"
    shared.mkdir()
    path = shared / "c.cache"
    path.write_bytes(compile_cache.MAGIC)
    path.chmod(0o600)
    shared.chmod(0o777)
    with pytest.raises(ik.serving.CompileCacheRefused, match="without the sticky bit"):
        ik.serving.load_compile_cache(path)
    shared.chmod(0o1777)  # sticky, like /tmp: others cannot replace our file
    with pytest.raises(ik.serving.CompileCacheRefused, match="not an inductor_knobs compile cache"):
        ik.serving.load_compile_cache(path)


def test_allow_unsafe_skips_only_the_permission_check(artifacts_api, tmp_path):
    path = tmp_path / "c.cache"
    path.write_bytes(b"something else\n")
    path.chmod(0o666)
    with pytest.raises(ik.serving.CompileCacheRefused, match="not an inductor_knobs compile cache"):
        ik.serving.load_compile_cache(path, allow_unsafe=True)


def test_edited_header_is_refused_by_its_sha256(fake_load, saved):
    magic, header_line, payload = saved.read_bytes().split(b"\n", 2)
    header = json.loads(header_line)
    header["artifacts"] = {kind: count + 1 for kind, count in header["artifacts"].items()}
    saved.write_bytes(magic + b"\n" + json.dumps(header, sort_keys=True).encode() + b"\n" + payload)
    with pytest.raises(ik.serving.CompileCacheRefused, match=r"the header does not match its sha256"):
        ik.serving.load_compile_cache(saved, KNOBS)
    assert fake_load == []


def test_corrupt_payload_is_refused(saved):
    data = saved.read_bytes()
    saved.write_bytes(data[:-10])
    with pytest.raises(ik.serving.CompileCacheRefused, match="sha256"):
        ik.serving.load_compile_cache(saved, ik.Knobs(max_autotune=True, gemm_backends="ATEN,CPP", min_sms=1))


def test_saved_file_is_private(saved_once):
    assert saved_once.stat().st_mode & 0o077 == 0


def test_old_torch_gets_not_supported(patches, monkeypatch, tmp_path):
    monkeypatch.setattr(type(patches), "has_cache_artifacts", False)
    with pytest.raises(ik.errors.NotSupportedOnThisTorch, match=r"save_cache_artifacts.*2\.7"):
        ik.serving.save_compile_cache(tmp_path / "x")
    with pytest.raises(ik.errors.NotSupportedOnThisTorch):
        ik.serving.load_compile_cache(tmp_path / "x")


# --- symbolic links: the name is opened once with O_NOFOLLOW ----------------------------------


def test_symlink_to_a_valid_cache_is_refused_unless_allow_unsafe(saved, private_dir, private_inductor_cache):
    link = private_dir / "link.cache"
    link.symlink_to(saved)
    with pytest.raises(ik.serving.CompileCacheRefused, match=r"symbolic link \(to '.*compile\.cache'\).*allow_unsafe=True"):
        ik.serving.load_compile_cache(link, KNOBS)
    # The same link, trusted: torch really loads the artifacts (into this test's own cache directory).
    header = ik.serving.load_compile_cache(link, KNOBS, allow_unsafe=True)
    assert header["payload_sha256"] == json.loads(saved.read_bytes().splitlines()[1])["payload_sha256"]
    assert sum(header["artifacts"].values()) > 0


def test_dangling_or_looping_symlink_is_refused_as_a_link(fake_load, private_dir):
    (private_dir / "dangling").symlink_to(private_dir / "nowhere")
    (private_dir / "loop").symlink_to(private_dir / "loop")
    for name in ("dangling", "loop"):
        with pytest.raises(ik.serving.CompileCacheRefused, match="is a symbolic link"):
            ik.serving.load_compile_cache(private_dir / name)
    assert fake_load == []


def test_missing_file_is_refused(artifacts_api, private_dir):
    with pytest.raises(ik.serving.CompileCacheRefused, match="no such file"):
        ik.serving.load_compile_cache(private_dir / "absent.cache")
    with pytest.raises(ik.serving.CompileCacheRefused, match="no such directory"):
        ik.serving.load_compile_cache(private_dir / "absent" / "c.cache")


def test_fifo_is_refused_without_blocking(fake_load, private_dir):
    fifo = private_dir / "c.cache"
    os.mkfifo(fifo, 0o600)
    outcome = []

    def load():
        try:
            ik.serving.load_compile_cache(fifo)
        except ik.serving.CompileCacheRefused as err:
            outcome.append(err)

    worker = threading.Thread(target=load, daemon=True)
    worker.start()
    worker.join(20)
    if worker.is_alive():  # unblock the open() before failing, so the thread ends
        os.close(os.open(fifo, os.O_WRONLY | os.O_NONBLOCK))
        worker.join(5)
        pytest.fail("load_compile_cache blocked opening a FIFO")
    assert outcome and "not a regular file" in str(outcome[0])


# --- every directory on the way, as OpenSSH's StrictModes --------------------------------------


@pytest.mark.parametrize("mode", [0o775, 0o757, 0o777])
def test_ancestor_writable_without_sticky_bit_is_refused_naming_it(fake_load, private_dir, mode):
    shared = private_dir / "shared"
    inner = shared / "inner"
    inner.mkdir(parents=True, mode=0o700)
    path = write_cache(inner / "c.cache")
    shared.chmod(mode)
    with pytest.raises(ik.serving.CompileCacheRefused) as err:
        ik.serving.load_compile_cache(path)
    assert f"the directory {shared} is writable by group or others without the sticky bit (mode {mode:o}" in str(err.value)
    assert f"the directory {inner} " not in str(err.value)  # the private directory itself is not blamed
    assert fake_load == []


@pytest.mark.parametrize("where", ["parent", "ancestor"])
def test_sticky_world_writable_directories_are_accepted(fake_load, private_dir, where):
    tmp_like = private_dir / "tmp-like"
    holder = tmp_like if where == "parent" else tmp_like / "mine"
    holder.mkdir(parents=True, mode=0o700)
    path = write_cache(holder / "c.cache", b"sticky is fine")
    tmp_like.chmod(0o1777)
    assert ik.serving.load_compile_cache(path)["artifacts"] == {"inductor": 1}
    assert fake_load == [b"sticky is fine"]


def test_symlinked_directory_is_checked_where_it_leads(fake_load, private_dir):
    # The link is ours and sits in a private directory, but it leads through a shared directory.
    shared = private_dir / "shared"
    target = shared / "target"
    target.mkdir(parents=True, mode=0o700)
    path_via_link = private_dir / "via"
    path_via_link.symlink_to(target)
    write_cache(target / "c.cache")
    shared.chmod(0o777)
    with pytest.raises(ik.serving.CompileCacheRefused, match=re.escape(f"the directory {shared} is writable by group or others")):
        ik.serving.load_compile_cache(path_via_link / "c.cache")
    shared.chmod(0o700)  # the same walk, now private: the link itself is fine
    ik.serving.load_compile_cache(path_via_link / "c.cache")
    assert len(fake_load) == 1


def test_dotdot_after_a_symlink_is_walked_as_the_kernel_does(fake_load, private_dir):
    # private/link -> shared/deep; private/link/../c.cache is shared/c.cache, not private/c.cache.
    shared = private_dir / "shared"
    (shared / "deep").mkdir(parents=True, mode=0o700)
    write_cache(shared / "c.cache")
    (private_dir / "link").symlink_to(shared / "deep")
    shared.chmod(0o777)
    with pytest.raises(ik.serving.CompileCacheRefused, match=re.escape(f"the directory {shared} is writable")):
        ik.serving.load_compile_cache(f"{private_dir}/link/../c.cache")


# --- ownership: files and directories of another user (root gives them to nobody) ------------


def test_file_owned_by_another_user_is_refused_naming_the_owner(fake_load, private_dir, other_user):
    path = write_cache(private_dir / "c.cache")
    os.chown(path, other_user, other_user)
    with pytest.raises(
        ik.serving.CompileCacheRefused, match=rf"the file is owned by uid {other_user}( \(\w+\))?, not by you, uid {os.geteuid()}"
    ):
        ik.serving.load_compile_cache(path)
    assert fake_load == []
    ik.serving.load_compile_cache(path, allow_unsafe=True)  # trusted anyway: ownership is not checked
    assert len(fake_load) == 1


@pytest.mark.parametrize("which", ["parent", "ancestor"])
def test_directory_owned_by_another_user_is_refused_naming_it(fake_load, private_dir, other_user, which):
    theirs = private_dir / "theirs"
    holder = theirs if which == "parent" else theirs / "mine"
    holder.mkdir(parents=True, mode=0o700)
    path = write_cache(holder / "c.cache")
    os.chown(theirs, other_user, other_user)  # 0700 and theirs: they can replace anything inside
    with pytest.raises(ik.serving.CompileCacheRefused, match=re.escape(f"the directory {theirs} is owned by uid {other_user}")):
        ik.serving.load_compile_cache(path)
    assert fake_load == []


def test_symlinked_ancestor_owned_by_another_user_is_refused(fake_load, private_dir, other_user):
    real = private_dir / "real"
    real.mkdir(mode=0o700)
    path = write_cache(real / "c.cache", b"through a link")
    tmp_like = private_dir / "tmp-like"  # in a sticky directory the link's owner can replace it
    tmp_like.mkdir(mode=0o700)
    link = tmp_like / "via"
    link.symlink_to(real)
    tmp_like.chmod(0o1777)
    ik.serving.load_compile_cache(link / "c.cache")  # our own link: fine
    os.lchown(link, other_user, other_user)
    with pytest.raises(ik.serving.CompileCacheRefused, match=re.escape(f"the symbolic link {link}, owned by uid {other_user}")):
        ik.serving.load_compile_cache(link / "c.cache")
    assert fake_load == [b"through a link"]
    assert path.exists()


# --- what torch did with the payload -------------------------------------------------------------


def test_garbage_payload_with_matching_sha256_is_refused(artifacts_api, private_dir, private_inductor_cache):
    path = write_cache(private_dir / "c.cache", b"not torch cache artifacts at all")
    with pytest.raises(ik.serving.CompileCacheRefused, match=r"loaded no artifacts.*returned None.*'inductor': 1"):
        ik.serving.load_compile_cache(path)


def test_payload_with_no_artifacts_is_refused(artifacts_api, private_dir, private_inductor_cache):
    serializer = pytest.importorskip("torch.utils._appending_byte_serializer")
    empty = serializer.AppendingByteSerializer(serialize_fn=lambda writer, item: None).to_bytes()
    path = write_cache(private_dir / "c.cache", empty)
    with pytest.raises(ik.serving.CompileCacheRefused, match=r"loaded no artifacts.*returned nothing"):
        ik.serving.load_compile_cache(path)


def test_fewer_artifacts_than_the_header_records_is_refused(saved, private_inductor_cache):
    magic, header_line, payload = saved.read_bytes().split(b"\n", 2)
    header = json.loads(header_line)
    header.pop("header_sha256")  # a header rewritten whole (its sha256 would refuse a partial edit first)
    kind, count = sorted(header["artifacts"].items())[0]
    header["artifacts"][kind] = count + 1
    saved.write_bytes(magic + b"\n" + json.dumps(header).encode() + b"\n" + payload)
    with pytest.raises(
        ik.serving.CompileCacheRefused,
        match=rf"loaded fewer artifacts than the header records \({kind}: {count} of {count + 1}\)",
    ):
        ik.serving.load_compile_cache(saved, KNOBS)


@pytest.mark.parametrize("counts", [["inductor"], {"inductor": "1"}, {"inductor": -1}, {"inductor": True}])
def test_malformed_artifact_counts_are_refused(fake_load, private_dir, counts):
    path = write_cache(private_dir / "c.cache", artifacts=counts)
    with pytest.raises(ik.serving.CompileCacheRefused, match=r"artifact counts .* are malformed"):
        ik.serving.load_compile_cache(path)
    assert fake_load == []


def test_artifact_counts_read_both_cacheinfo_layouts():
    @dataclasses.dataclass
    class CacheInfo27:  # torch 2.7: one list per kind
        inductor_artifacts: list = dataclasses.field(default_factory=lambda: ["a", "b"])
        autotune_artifacts: list = dataclasses.field(default_factory=lambda: ["c"])
        aot_autograd_artifacts: list = dataclasses.field(default_factory=list)
        pgo_artifacts: list = dataclasses.field(default_factory=list)

    assert compile_cache._artifact_counts(CacheInfo27()) == {"inductor": 2, "autotune": 1, "aot_autograd": 0, "pgo": 0}
    newer = types.SimpleNamespace(artifacts={"inductor": ["a", "b"], "autotune": ["c"]})  # torch 2.8+
    assert compile_cache._artifact_counts(newer) == {"inductor": 2, "autotune": 1}
    assert compile_cache._artifact_counts(None) == {}


def test_environment_of_these_tests_is_private(private_base):
    # What the acceptance tests above rely on, stated once: every directory above them is safe.
    st = os.stat(private_base)
    assert st.st_uid == os.geteuid() and not stat.S_IMODE(st.st_mode) & 0o022
    assert compile_cache.unsafe_code_directories(str(private_base), os.geteuid(), str(private_base)) == []
