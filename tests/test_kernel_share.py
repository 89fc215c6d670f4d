"""The ablation's Triton binaries built once (inductor_knobs/ablation/kernel_share.py).

A stand-in ``triton.runtime.cache`` (below, written for these tests with Triton's ``FileCacheManager`` file layout:
``<TRITON_CACHE_DIR>/<key>/<file>``, ``__grp__<file>`` listing the group's paths) lets the managers run on a machine
without Triton.  Each test drives them as ``triton.compile`` does: ``get_group`` for the kernel's metadata file
first, ``put`` for each stage, ``put_group`` last.  Workers are threads (two ``open`` calls make two ``flock``
owners, as two processes would) or, where a process must die, processes.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
import threading
import time
from pathlib import Path

import pytest
import torch

from inductor_knobs.ablation import kernel_share, spec, workers

FAKE_TRITON = {
    "triton/__init__.py": "",
    "triton/runtime/__init__.py": "",
    "triton/runtime/cache.py": textwrap.dedent(
        """
        import json, os, uuid

        class FileCacheManager:
            def __init__(self, key, override=False, dump=False):
                self.key = key
                root = os.environ["TRITON_CACHE_DIR"]
                if override or dump:
                    root = os.path.join(root, "override" if override else "dump")
                self.cache_dir = os.path.join(root, key)
                os.makedirs(self.cache_dir, exist_ok=True)

            def _make_path(self, filename):
                return os.path.join(self.cache_dir, filename)

            def get_group(self, filename):
                path = self._make_path("__grp__" + filename)
                if not os.path.exists(path):
                    return None
                with open(path) as f:
                    children = json.load(f)["child_paths"]
                return {c: p for c, p in children.items() if os.path.exists(p)}

            def put(self, data, filename, binary=True):
                path = self._make_path(filename)
                temporary = path + ".tmp" + uuid.uuid4().hex
                with open(temporary, "wb" if isinstance(data, bytes) else "w") as f:
                    f.write(data)
                os.replace(temporary, path)
                return path

            def put_group(self, filename, group):
                return self.put(json.dumps({"child_paths": group}), "__grp__" + filename, binary=False)
        """
    ),
}

KERNEL = "triton_mm_0.json"

REAL_WAIT_S = kernel_share.WAIT_S  # a kernel's metadata file, the name triton.compile asks get_group for


@pytest.fixture
def fake_triton(tmp_path, monkeypatch):
    root = tmp_path / "fake"
    for name, text in FAKE_TRITON.items():
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).write_text(text)
    monkeypatch.syspath_prepend(str(root))
    for name in [m for m in sys.modules if m == "triton" or m.startswith("triton.")]:
        monkeypatch.delitem(sys.modules, name)
    for name in ("SharedKernels", "PublishedKernels"):
        monkeypatch.delitem(kernel_share.__dict__, name, raising=False)
    monkeypatch.setattr(kernel_share, "_counts", kernel_share.Counter())
    claims: dict = {}
    monkeypatch.setattr(kernel_share, "_claims", claims)
    # No verdict rests on elapsed time: a waiter waits for the claim's release, however slow this machine is (the
    # tests of the two bounds set them and a clock of their own).
    monkeypatch.setattr(kernel_share, "WAIT_S", 1e9)
    monkeypatch.setattr(kernel_share, "STALE_S", 1e9)
    yield root
    kernel_share._close(fd for held in claims.values() for fd in held.values())
    for name in [m for m in sys.modules if m == "triton" or m.startswith("triton.")]:
        sys.modules.pop(name, None)


@pytest.fixture
def dirs(tmp_path, monkeypatch):
    """The shared directory (TRITON_CACHE_DIR of later repeats) and a cold worker's private one."""
    shared, private = tmp_path / "shared", tmp_path / "private"
    shared.mkdir()
    private.mkdir()
    monkeypatch.setenv("TRITON_CACHE_DIR", str(shared))
    monkeypatch.setenv(kernel_share.SHARED_DIR_VAR, str(shared))
    return shared, private


def compile_stages(manager, filename=KERNEL, stages=("cubin",)):
    """What triton.compile writes after a miss: each stage, then the metadata and its group."""
    group = {}
    for ext in stages:
        name = filename.replace(".json", f".{ext}")
        group[name] = manager.put(b"binary " + ext.encode(), name)
    group[filename] = manager.put(json.dumps({"name": filename}), filename, binary=False)
    manager.put_group(filename, group)
    return group


def in_thread(fn):
    result: dict = {}
    thread = threading.Thread(target=lambda: result.setdefault("value", fn()), daemon=True)
    thread.start()
    return thread, result


@pytest.fixture
def holder():
    """``hold(manager)``: another worker's thread that claims ``KERNEL`` through ``manager`` and keeps compiling (alive,
    holding the claim) until the test ends."""
    done = threading.Event()
    threads = []

    def hold(manager):
        claimed = threading.Event()

        def body():
            assert manager.get_group(KERNEL) is None
            claimed.set()
            done.wait(60)

        thread = threading.Thread(target=body, daemon=True)
        thread.start()
        threads.append(thread)
        assert claimed.wait(30)
        return thread

    yield hold
    done.set()
    for thread in threads:
        thread.join(30)


@pytest.fixture
def waiting(monkeypatch):
    """An event set once a waiter has found the claim held (its first sleep between two looks)."""
    event = threading.Event()

    def sleep(seconds: float) -> None:
        event.set()
        time.sleep(0.001)

    monkeypatch.setattr(kernel_share, "sleep", sleep)
    return event


def test_a_waiter_gets_the_binary_its_claimant_builds_and_builds_nothing(fake_triton, dirs, waiting):
    shared = kernel_share.SharedKernels
    first, second = shared("k"), shared("k")
    assert first.get_group(KERNEL) is None  # a miss: claimed, the caller compiles
    assert kernel_share.counts() == {"built": 1}
    thread, result = in_thread(lambda: second.get_group(KERNEL))
    assert waiting.wait(30) and thread.is_alive()  # waiting for the claimant, not compiling
    compile_stages(first)
    thread.join(30)
    assert not thread.is_alive()
    group = result["value"]
    assert group and Path(group[KERNEL]).read_text() == json.dumps({"name": KERNEL})
    assert set(group) == {KERNEL, "triton_mm_0.cubin"} and all(p.startswith(str(dirs[0])) for p in group.values())
    counts = kernel_share.counts()
    assert counts["built"] == 1 and counts["waited"] == 1 and counts["wait_ms"] >= 0


def test_a_kernel_built_once_is_reused_without_a_claim(fake_triton, dirs):
    builder = kernel_share.SharedKernels("k")
    assert builder.get_group(KERNEL) is None
    compile_stages(builder)
    assert kernel_share.SharedKernels("k").get_group(KERNEL)
    assert kernel_share.counts() == {"built": 1, "reused": 1}
    fd = kernel_share._try_claim(claim_file(dirs[0]))  # put_group released it; the reader took none
    assert fd is not None
    os.close(fd)


def test_a_claim_left_by_a_compile_that_raised_is_released_at_the_threads_next_compile(fake_triton, dirs):
    shared = kernel_share.SharedKernels
    assert shared("k").get_group(KERNEL) is None  # claimed; the compile raises: no put_group
    assert kernel_share._try_claim(claim_file(dirs[0])) == kernel_share.HELD  # still held
    assert shared("k2").get_group(KERNEL) is None  # the same thread's next compile
    fd = kernel_share._try_claim(claim_file(dirs[0]))
    assert fd is not None  # released
    os.close(fd)


def claim_file(shared: Path, key: str = "k") -> str:
    return str(shared / kernel_share.CLAIMS / f"{key}.{KERNEL}")


def test_a_claimant_that_shows_no_progress_is_passed_over(fake_triton, dirs, monkeypatch, holder):
    shared = kernel_share.SharedKernels
    holder(shared("k"))  # another worker compiling it
    mtime = os.stat(claim_file(dirs[0])).st_mtime
    monkeypatch.setattr(kernel_share, "wall", lambda: mtime + kernel_share.STALE_S)
    ticks = iter(range(0, 10_000))
    monkeypatch.setattr(kernel_share, "clock", lambda: float(next(ticks)) * kernel_share.STALE_S)  # a long wait
    looks = []
    monkeypatch.setattr(kernel_share, "sleep", looks.append)
    assert shared("k").get_group(KERNEL) is None  # compiled here, unclaimed
    assert kernel_share.counts()["built"] == 2 and len(looks) < 2  # passed over for no progress, not at the bound


def test_a_claimant_that_shows_progress_is_waited_for_until_the_bound(fake_triton, dirs, monkeypatch, holder):
    monkeypatch.setattr(kernel_share, "WAIT_S", REAL_WAIT_S)
    shared = kernel_share.SharedKernels
    holder(shared("k"))
    ticks = iter(range(0, 10_000))
    monkeypatch.setattr(kernel_share, "clock", lambda: float(next(ticks)))  # a second per look
    monkeypatch.setattr(kernel_share, "wall", lambda: os.stat(claim_file(dirs[0])).st_mtime)  # fresh progress
    monkeypatch.setattr(kernel_share, "sleep", lambda s: None)
    assert shared("k").get_group(KERNEL) is None
    counts = kernel_share.counts()
    assert counts["built"] == 2 and counts["wait_ms"] >= kernel_share.WAIT_S * 1000


def test_a_claimant_that_dies_leaves_the_kernel_to_the_waiter(fake_triton, dirs, waiting):
    code = textwrap.dedent(
        f"""
        import os, sys, time
        from inductor_knobs.ablation import kernel_share
        assert kernel_share.SharedKernels("k").get_group({KERNEL!r}) is None
        print("claimed", flush=True)
        time.sleep(600)
        """
    )
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(fake_triton), os.getcwd()])}
    proc = subprocess.Popen([sys.executable, "-c", code], env=env, stdout=subprocess.PIPE, text=True)
    try:
        assert proc.stdout is not None and proc.stdout.readline().strip() == "claimed"
        waiter = kernel_share.SharedKernels("k")
        thread, result = in_thread(lambda: waiter.get_group(KERNEL))
        assert waiting.wait(30) and thread.is_alive()
        proc.kill()
        thread.join(30)
        assert not thread.is_alive() and result["value"] is None  # claimed by the waiter, which compiles it
        assert kernel_share.counts()["built"] == 1
    finally:
        proc.kill()
        proc.wait()
        if proc.stdout is not None:
            proc.stdout.close()


def test_a_cold_worker_compiles_privately_waits_for_no_one_and_publishes(fake_triton, dirs, monkeypatch):
    shared_dir, private = dirs
    later = kernel_share.SharedKernels("k")
    assert later.get_group(KERNEL) is None  # a later repeat holds the claim
    monkeypatch.setenv("TRITON_CACHE_DIR", str(private))
    cold = kernel_share.PublishedKernels("k")
    assert cold.get_group(KERNEL) is None  # never waits: a miss in its private directory
    group = compile_stages(cold)
    assert all(p.startswith(str(private)) for p in group.values())
    published = json.loads((shared_dir / "k" / f"__grp__{KERNEL}").read_text())["child_paths"]
    assert set(published) == set(group) and all(p.startswith(str(shared_dir)) for p in published.values())
    assert all(Path(published[n]).read_bytes() == Path(group[n]).read_bytes() for n in group)
    monkeypatch.setenv("TRITON_CACHE_DIR", str(shared_dir))
    assert kernel_share.SharedKernels("k2").get_group(KERNEL) is None  # a kernel no one has built
    assert kernel_share.SharedKernels("k").get_group(KERNEL) == {n: str(shared_dir / "k" / n) for n in group}


def test_a_cold_worker_holds_a_claim_while_it_compiles_so_later_repeats_wait_for_it(fake_triton, dirs, monkeypatch, waiting):
    shared_dir, private = dirs
    later = kernel_share.SharedKernels("k")
    monkeypatch.setenv("TRITON_CACHE_DIR", str(private))
    cold = kernel_share.PublishedKernels("k")
    assert cold.get_group(KERNEL) is None
    thread, result = in_thread(lambda: later.get_group(KERNEL))
    assert waiting.wait(30) and thread.is_alive()
    compile_stages(cold)
    thread.join(30)
    assert result["value"] and all(p.startswith(str(shared_dir)) for p in result["value"].values())
    counts = kernel_share.counts()
    assert counts == {"built": 1, "published": 1, "waited": 1, "wait_ms": counts["wait_ms"]}  # built by the cold one only


def test_a_publication_that_is_there_already_is_left_as_it_is(fake_triton, dirs, monkeypatch):
    shared_dir, private = dirs
    assert kernel_share.SharedKernels("k").get_group(KERNEL) is None
    compile_stages(kernel_share.SharedKernels("k"))
    before = (shared_dir / "k" / f"__grp__{KERNEL}").read_text()
    monkeypatch.setenv("TRITON_CACHE_DIR", str(private))
    cold = kernel_share.PublishedKernels("k")
    assert cold.get_group(KERNEL) is None
    compile_stages(cold)
    assert (shared_dir / "k" / f"__grp__{KERNEL}").read_text() == before
    assert "published" not in kernel_share.counts()


def test_override_and_dump_managers_claim_nothing(fake_triton, dirs):
    for flags in ({"override": True}, {"dump": True}):
        manager = kernel_share.SharedKernels("k", **flags)
        assert manager.get_group(KERNEL) is None and manager.claim_path(KERNEL) is None
    assert not (dirs[0] / kernel_share.CLAIMS).exists()


def test_triton_names_the_managers_through_the_module(fake_triton, dirs):
    """Triton resolves TRITON_CACHE_MANAGER as module:class (triton/runtime/cache.py, triton/knobs.py)."""
    import importlib

    for cold in (True, False):
        value = kernel_share.worker_vars(str(dirs[0]), cold)[kernel_share.MANAGER_VAR]
        module, _, name = value.partition(":")
        cls = getattr(importlib.import_module(module), name)
        assert any(c.__name__ == "FileCacheManager" for c in cls.mro())


def test_a_later_repeat_reads_the_shared_directory_and_repeat_0_publishes_into_it(tmp_path):
    registry = workers.Workers(share_kernels=True)
    try:
        assert registry.kernels and os.path.isdir(registry.kernels)
        cache = str(tmp_path / "cache")
        later = workers.worker_env(spec.Arm("a"), None, cache, None, kernels=registry.kernels, cold=False)
        assert later["TRITON_CACHE_DIR"] == registry.kernels
        assert later["TRITON_CACHE_MANAGER"] == "inductor_knobs.ablation.kernel_share:SharedKernels"
        cold = workers.worker_env(spec.Arm("a"), None, cache, None, kernels=registry.kernels, cold=True)
        assert cold["TRITON_CACHE_DIR"].startswith(cache) and cold[kernel_share.SHARED_DIR_VAR] == registry.kernels
        assert cold["TRITON_CACHE_MANAGER"] == "inductor_knobs.ablation.kernel_share:PublishedKernels"
        alone = workers.worker_env(spec.Arm("a"), None, cache, None)
        assert "TRITON_CACHE_MANAGER" not in alone or alone["TRITON_CACHE_MANAGER"] == os.environ.get("TRITON_CACHE_MANAGER")
    finally:
        registry.remove_dirs()


REAL_COMPILE = textwrap.dedent(
    """
    import json, os, sys, time
    import torch, triton, triton.language as tl

    @triton.jit
    def add_one(x_ptr, n, BLOCK: tl.constexpr):
        offsets = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
        tl.store(x_ptr + offsets, tl.load(x_ptr + offsets, mask=offsets < n) + 1, mask=offsets < n)

    x = torch.zeros(100, device="cuda")
    print("ready", flush=True)
    while not os.path.exists(sys.argv[1]):
        time.sleep(0.001)
    add_one[(1,)](x, 100, BLOCK=128)
    torch.cuda.synchronize()
    from inductor_knobs.ablation import kernel_share
    print(json.dumps({"ok": x.sum().item() == 100, **kernel_share.counts()}), flush=True)
    """
)


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
def test_workers_compiling_one_triton_kernel_at_once_build_it_once(tmp_path):
    """Real Triton: a cold worker and two later repeats compile the same kernel at the same moment; the kernel is
    built by the cold one and by at most one later repeat, the others wait or reuse, and every result is right."""
    shared, go, script = tmp_path / "shared", tmp_path / "go", tmp_path / "compile_one.py"
    shared.mkdir()
    script.write_text(REAL_COMPILE)  # Triton reads a @jit function's source from its file
    procs = []
    for index, cold in enumerate((True, False, False)):
        env = {**os.environ, **kernel_share.worker_vars(str(shared), cold), "PYTHONPATH": os.getcwd()}
        if cold:
            env[kernel_share.DIR_VAR] = str(tmp_path / f"private{index}")
        procs.append(subprocess.Popen([sys.executable, str(script), str(go)], env=env, stdout=subprocess.PIPE, text=True))
    try:
        assert all(p.stdout is not None and p.stdout.readline().strip() == "ready" for p in procs)
        go.touch()
        outputs = [json.loads(p.communicate(timeout=240)[0].strip().splitlines()[-1]) for p in procs]
    finally:
        for p in procs:
            p.kill()
            p.wait()
    assert all(o["ok"] for o in outputs)
    cold, *later = outputs
    assert cold["built"] == 1
    assert sum(o.get("built", 0) for o in later) <= 1 and sum(o.get("waited", 0) + o.get("reused", 0) for o in later) >= 1


def test_the_claims_of_a_thread_that_ended_are_released_at_the_next_lookup(fake_triton, dirs):
    """A compile pool's thread whose compile raised ends holding its claim; any thread's next lookup releases it."""
    thread, _ = in_thread(lambda: kernel_share.SharedKernels("k").get_group(KERNEL))
    thread.join(30)
    assert not thread.is_alive() and kernel_share._try_claim(claim_file(dirs[0])) == kernel_share.HELD
    assert kernel_share.SharedKernels("k").get_group(KERNEL) is None  # claimed here: the ended thread's was released
    assert kernel_share.counts() == {"built": 2}


def test_a_cold_workers_next_compile_releases_the_claim_its_last_one_left(fake_triton, dirs, monkeypatch):
    monkeypatch.setenv("TRITON_CACHE_DIR", str(dirs[1]))
    assert kernel_share.PublishedKernels("k").get_group(KERNEL) is None  # claimed; the compile raises
    assert kernel_share._try_claim(claim_file(dirs[0])) == kernel_share.HELD
    assert kernel_share.PublishedKernels("k2").get_group(KERNEL) is None
    fd = kernel_share._try_claim(claim_file(dirs[0]))
    assert fd not in (None, kernel_share.HELD)
    os.close(fd)


def test_a_claim_shows_progress_at_each_put_of_its_kernel_only(fake_triton, dirs):
    manager, other = kernel_share.SharedKernels("k"), kernel_share.SharedKernels("k2")
    path = claim_file(dirs[0])
    Path(path).parent.mkdir(parents=True, exist_ok=True)
    Path(path).touch()
    os.utime(path, (1, 1))  # a claim file left from an earlier kernel's compile
    assert manager.get_group(KERNEL) is None
    assert os.stat(path).st_mtime > 1  # taking it shows progress
    os.utime(path, (1, 1))
    other.put(b"x", "unrelated.cubin")
    assert os.stat(path).st_mtime == 1  # another kernel's put says nothing of this one
    manager.put(b"ttir", "triton_mm_0.ttir")
    assert os.stat(path).st_mtime > 1


def test_a_group_with_a_file_missing_is_not_a_hit(fake_triton, dirs):
    builder = kernel_share.SharedKernels("k")
    assert builder.get_group(KERNEL) is None
    group = compile_stages(builder)
    os.unlink(group["triton_mm_0.cubin"])
    assert kernel_share.SharedKernels("k").get_group(KERNEL) is None  # claimed: built again
    assert kernel_share.counts() == {"built": 2}


def test_a_waiter_that_finds_the_kernel_built_keeps_no_descriptor(fake_triton, dirs):
    builder = kernel_share.SharedKernels("k")
    assert builder.get_group(KERNEL) is None
    compile_stages(builder)
    (dirs[0] / "k" / f"__grp__{KERNEL}").rename(dirs[0] / "grp")  # not there at the first look ...
    reader = kernel_share.SharedKernels("k")
    reader.whole_group = _appearing(reader.whole_group, dirs[0])  # ... there at the look after claiming
    before = len(os.listdir("/proc/self/fd"))
    assert reader.get_group(KERNEL)
    assert len(os.listdir("/proc/self/fd")) == before and not kernel_share._claims


def _appearing(whole_group, shared: Path):
    calls = []

    def look(filename):
        calls.append(filename)
        if len(calls) == 2:
            (shared / "grp").rename(shared / "k" / f"__grp__{KERNEL}")
        return whole_group(filename)

    return look


def test_a_published_kernels_group_file_is_written_last(fake_triton, dirs, monkeypatch):
    order: list[str] = []
    place = kernel_share._place

    def placed(source, target):
        order.append(os.path.basename(target))
        place(source, target)

    monkeypatch.setattr(kernel_share, "_place", placed)
    monkeypatch.setenv("TRITON_CACHE_DIR", str(dirs[1]))
    cold = kernel_share.PublishedKernels("k")
    assert cold.get_group(KERNEL) is None
    compile_stages(cold, stages=("ttir", "cubin"))
    assert order[-1] == f"__grp__{KERNEL}" and set(order[:-1]) == {KERNEL, "triton_mm_0.ttir", "triton_mm_0.cubin"}


def test_without_flock_a_worker_compiles_at_once(fake_triton, dirs, monkeypatch, waiting):
    import errno
    import fcntl

    def no_flock(fd, op):
        raise OSError(errno.ENOLCK, "no locks")

    monkeypatch.setattr(fcntl, "flock", no_flock)
    assert kernel_share.SharedKernels("k").get_group(KERNEL) is None
    assert not waiting.is_set() and kernel_share.counts() == {"built": 1}


def test_a_forked_child_holds_none_of_its_parents_claims(fake_triton, dirs):
    assert kernel_share.SharedKernels("k").get_group(KERNEL) is None
    assert kernel_share._claims
    pid = quiet_fork()
    if pid == 0:  # the child: no claims, and closing its copies left the parent's lock held
        os._exit(0 if not kernel_share._claims else 1)
    assert os.waitpid(pid, 0)[1] == 0
    assert kernel_share._try_claim(claim_file(dirs[0])) == kernel_share.HELD


def test_a_waiter_takes_a_kernel_built_while_its_claim_is_still_held(fake_triton, dirs, monkeypatch, holder):
    """A claimant whose compile raised holds its claim until its thread's next lookup; a binary published meanwhile
    (by a cold run) is taken at the waiter's next look, not after the 30 s without progress."""
    holder(kernel_share.SharedKernels("k"))
    looks = []

    def sleep(seconds):
        if not looks:
            compile_stages(kernel_share.SharedKernels("k"))  # built by someone else, the claim still held
        looks.append(seconds)

    monkeypatch.setattr(kernel_share, "sleep", sleep)
    assert kernel_share.SharedKernels("k").get_group(KERNEL)
    assert len(looks) == 1 and kernel_share.counts()["waited"] == 1


def test_a_forked_child_gets_free_locks(fake_triton, dirs):
    """Another thread of the parent may hold a lock at the fork; the child's copies are new ones."""
    with kernel_share._claims_lock:
        pid = quiet_fork()
        if pid == 0:
            os._exit(0 if kernel_share._claims_lock.acquire(timeout=5) and kernel_share._counts_lock.acquire(timeout=5) else 1)
    assert os.waitpid(pid, 0)[1] == 0


def quiet_fork() -> int:
    """``os.fork()`` without Python 3.12's warning about forking a process with threads (the child only exits)."""
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        return os.fork()


def test_four_threads_asking_for_one_kernel_at_once_build_it_once(fake_triton, dirs):
    """Four compile threads (or workers) miss the same kernel together: one builds it, three wait for it."""
    start = threading.Barrier(4)
    managers = [kernel_share.SharedKernels("k") for _ in range(4)]
    groups: list = [None] * 4

    def compile_once(i: int) -> None:
        start.wait(30)
        group = managers[i].get_group(KERNEL)
        groups[i] = group if group is not None else compile_stages(managers[i])

    threads = [threading.Thread(target=compile_once, args=(i,), daemon=True) for i in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(60)
    assert not any(thread.is_alive() for thread in threads)
    counts = kernel_share.counts()
    assert counts["built"] == 1 and counts.get("waited", 0) + counts.get("reused", 0) == 3
    assert all(set(g) == {KERNEL, "triton_mm_0.cubin"} for g in groups)
