from __future__ import annotations

import contextlib
import importlib.util
import inspect
import os
import re
import shutil
import sys
import tempfile
import types
import warnings
from collections.abc import Iterator
from pathlib import Path

import pytest
import torch
import torch._inductor.config as inductor_config
import torch._inductor.utils as inductor_utils

from inductor_knobs.core import torch_compat
from inductor_knobs.serving import compile_cache

warnings.filterwarnings("ignore", message="Failed to initialize NumPy")


@pytest.fixture
def patches():
    return torch_compat.installed()


@pytest.fixture
def cfg():
    return inductor_config


@pytest.fixture
def fake_gpu(monkeypatch):
    """Make torch read a CUDA device with N SMs, through the same APIs is_big_gpu reads."""

    def install(sms: int, major: int = 9):
        # shared_memory_per_block_optin: what emulation reads of the real GPU (an H100's 227 KiB), which it
        # reaches on a host with CUDA and green contexts
        props = types.SimpleNamespace(
            multi_processor_count=sms,
            major=major,
            minor=0,
            name=f"Fake{sms}",
            type="cuda",
            shared_memory_per_block_optin=232448,
            total_memory=80 * 2**30,
        )
        monkeypatch.setattr(torch.cuda, "get_device_properties", lambda *a, **k: props)
        try:
            from torch._inductor.runtime.hints import DeviceProperties
        except ImportError:  # pragma: no cover - every supported torch has it
            return
        monkeypatch.setattr(DeviceProperties, "create", lambda device: props)
        inductor_utils.is_big_gpu.cache_clear()

    yield install
    inductor_utils.is_big_gpu.cache_clear()


@pytest.fixture(autouse=True)
def _no_leaks():
    """Every test must leave torch exactly as it found it: the gate object, by identity."""
    gate = inductor_utils.is_big_gpu
    yield
    assert inductor_utils.is_big_gpu is gate, "a test left is_big_gpu patched"


@pytest.fixture
def fresh_inductor():
    """Empty Dynamo and Inductor caches (torch's own fresh_cache / fresh_inductor_cache), before and after."""
    fresh = getattr(inductor_utils, "fresh_cache", None) or inductor_utils.fresh_inductor_cache
    torch._dynamo.reset()
    with fresh():
        yield
    torch._dynamo.reset()


@contextlib.contextmanager
def fresh_compile_caches(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """Inductor's and Triton's cache directories fresh under ``tmp_path``, and torch's in-memory caches empty.

    ``TORCHINDUCTOR_CACHE_DIR`` and ``TRITON_CACHE_DIR`` are set first (monkeypatch), then torch's own
    ``fresh_cache`` (``fresh_inductor_cache`` before it was renamed) points both at a new directory under
    ``tmp_path`` and clears the registered in-memory caches; Dynamo is reset before and after.  torch reads
    the directory from the environment at each use (``torch/_inductor/runtime/cache_dir_utils.py``
    ``cache_dir``), so nothing it cached keeps an older one.  Yields the directory Inductor uses.
    """
    import torch._dynamo

    tmp_path.mkdir(parents=True, exist_ok=True)
    monkeypatch.setenv("TORCHINDUCTOR_CACHE_DIR", str(tmp_path / "inductor"))
    monkeypatch.setenv("TRITON_CACHE_DIR", str(tmp_path / "inductor" / "triton"))
    fresh = getattr(inductor_utils, "fresh_cache", None) or inductor_utils.fresh_inductor_cache
    torch._dynamo.reset()
    try:
        if "dir" in inspect.signature(fresh).parameters:
            with fresh(dir=str(tmp_path)):
                yield Path(os.environ["TORCHINDUCTOR_CACHE_DIR"])
        else:
            # 2.4's fresh_inductor_cache(cache_entries=None) has no ``dir``: what it does, under tmp_path
            inductor_dir = Path(tempfile.mkdtemp(dir=tmp_path))
            monkeypatch.setenv("TORCHINDUCTOR_CACHE_DIR", str(inductor_dir))
            monkeypatch.setenv("TRITON_CACHE_DIR", str(inductor_dir / "triton"))
            inductor_utils.clear_inductor_caches()
            try:
                yield inductor_dir
            finally:
                inductor_utils.clear_inductor_caches()
    finally:
        torch._dynamo.reset()


@pytest.fixture(autouse=True)
def _fresh_caches_for_gpu_tests(request):
    """A test marked ``gpu`` compiles into its own empty caches: a second run on the same machine must
    autotune again, not load the first run's compiled graph (FX graph cache) with nothing timed."""
    if request.node.get_closest_marker("gpu") is None:
        yield
        return
    with fresh_compile_caches(request.getfixturevalue("tmp_path"), request.getfixturevalue("monkeypatch")):
        yield


#: Knobs under which Inductor autotunes a bmm on a CPU (ATen vs the C++ GEMM template).
CPU_AUTOTUNE = {"max_autotune": True, "gemm_backends": "ATEN,CPP"}


@pytest.fixture
def cpu_autotune(fresh_inductor, patches):
    """Skip unless this torch reports autotuning and Inductor's C++ GEMM template can run here."""
    release = torch_compat.release_of(torch.__version__)
    if not patches.feedback_saver_arity(release):
        pytest.skip(f"torch {torch.__version__} has no add_feedback_saver")
    if torch.backends.cpu.get_cpu_capability() not in ("AVX2", "AVX512"):
        pytest.skip("Inductor's C++ GEMM template needs AVX2 or AVX512")
    if importlib.util.find_spec("torch._inductor.codegen.cpp_bmm_template") is None:
        # 2.5.1 kernel/bmm.py:tuned_bmm offers ATen only on CPU: one choice, returned unbenchmarked.
        pytest.skip(f"torch {torch.__version__} has no C++ bmm template (2.6+), so Inductor does not autotune a CPU bmm")
    return CPU_AUTOTUNE


def inside_compile(monkeypatch, read):
    """Call ``read()`` inside Inductor's compile of every graph (forward, backward, inference) and keep what it returns.

    It spies on ``GraphLowering.__init__``, which ``compile_fx_inner`` runs for each graph, so what
    it reads is what Inductor compiles with, whoever set it.
    """
    from torch._inductor.graph import GraphLowering

    calls = []
    real = GraphLowering.__init__

    def spy(self, *args, **kwargs):
        calls.append(read())
        return real(self, *args, **kwargs)

    monkeypatch.setattr(GraphLowering, "__init__", spy)
    return calls


def release_held_locks() -> list[str]:
    """inductor_knobs' re-entrant locks this thread still holds after an injected interrupt, released so the
    suite goes on (another thread would block on them forever).  None is expected: every lock on an undo
    path is taken as ``with lock, SAFE_EXIT:`` (see ``inductor_knobs.core.undo.SAFE_EXIT``).
    """
    from inductor_knobs.core import attestation, changes, events, gate, interception, observers
    from inductor_knobs.emulation import sm_view

    locks = {
        "gate": gate.GATE_PATCH.lock,
        "interception": interception.INTERCEPTION.lock,
        "sm view": sm_view.SM_VIEW_PATCH.lock,
        "observers": observers.OBSERVER_HOOKS.lock,
        # before torch 2.12 every config block takes a Claim (a hang seen in test_stateful on 2.10.0)
        "claims": changes._HOLDERS_LOCK,
        "process asks": attestation.PROCESS_ASKED_LOCK,
        "event subscribers": events._LOCK,
    }
    held = []
    for name, lock in locks.items():
        while lock._is_owned():
            held.append(name)
            lock.release()
    return held


@pytest.fixture
def transformers_present(monkeypatch):
    """The main job on a GPU resolves hf:bert-base; planning needs transformers installed, not imported.

    CI installs only the [dev] extra, so a stand-in module makes planning see it there too.
    """
    from inductor_knobs.ablation import models

    if not models._installed("transformers"):
        monkeypatch.setitem(sys.modules, "transformers", types.ModuleType("transformers"))


class FakeClock:
    """The clocks ``ik.serving.no_stalls`` and ``ik.serving.warmup`` read, moved only by the test: no sleeps, no load dependence.

    ``wall`` stands for ``time.perf_counter`` (the guard's ``stalls._clock``, and the clock of
    ``hook_callbacks``' timed hooks and gc callback), ``cpu`` for ``time.thread_time`` (``stalls._thread_clock``).
    """

    def __init__(self) -> None:
        self.wall = 100.0
        self.cpu = 10.0
        self.thread_reads = 0

    def now(self) -> float:
        return self.wall

    def thread(self) -> float:
        self.thread_reads += 1
        return self.cpu

    def spend(self, seconds: float, off_cpu: float = 0.0) -> None:
        """A call's work: ``seconds`` of wall time, ``off_cpu`` of them with the thread off the CPU."""
        self.wall += seconds
        self.cpu += seconds - off_cpu


@pytest.fixture
def fake_clock(monkeypatch):
    """Drive the guard's clocks (and its hooks') from a :class:`FakeClock`; the real ones are back after the test."""
    import time

    from inductor_knobs.core import observers
    from inductor_knobs.serving import first_call_costs, stalls

    clock = FakeClock()
    monkeypatch.setattr(stalls, "_clock", clock.now)
    monkeypatch.setattr(stalls, "_thread_clock", clock.thread)
    # the hooks read time.perf_counter through its module global: a stand-in module whose perf_counter is the fake
    fake_time = types.ModuleType("time")
    fake_time.__dict__.update({k: v for k, v in vars(time).items() if not k.startswith("__")})
    fake_time.perf_counter = clock.now
    monkeypatch.setattr(observers, "time", fake_time)
    monkeypatch.setattr(first_call_costs, "time", fake_time)
    return clock


# One intra-op thread for the tests (this process and, through the environment, every subprocess), unless
# OMP_NUM_THREADS says otherwise: the tests' tensors are tiny, and on a 2-core machine whose cores are busy
# with other work an OpenMP region waits for a descheduled second thread (a 4x56x64 bmm: 6.5 ms with two
# threads, 20 us with one, measured with another process busy).  Thread counts are not what any test checks.
def _one_intra_op_thread() -> None:
    import os

    os.environ.setdefault("OMP_NUM_THREADS", "1")
    torch.set_num_threads(int(os.environ["OMP_NUM_THREADS"]))


_one_intra_op_thread()


def _vec_isa_checked_once_for_subprocesses() -> None:
    """Let the tests' subprocesses skip Inductor's vector-ISA check once this process has passed it.

    Every process that compiles C++ first dry-builds and dlopens a probe per ISA the CPU has (a g++ run
    and a Python subprocess each: 5-7 s per process on a 2-core machine).  This process runs that check
    (it compiles anyway); when every ISA the CPU has passed, ``TORCHINDUCTOR_VEC_ISA_OK=1`` tells the
    subprocesses (ablate workers, cache workers, fresh interpreters) the same answer.  Not set when the
    variable is already set, off x86, or when any ISA failed: then each process checks for itself.
    """
    import os
    import platform

    if "TORCHINDUCTOR_VEC_ISA_OK" in os.environ or platform.machine() not in ("x86_64", "AMD64"):
        return
    try:
        from torch._inductor import cpu_vec_isa

        flags = cpu_vec_isa.x86_isa_checker()
        has = [isa for isa in cpu_vec_isa.supported_vec_isa_list if all(flag in flags for flag in str(isa).split())]
        passed = cpu_vec_isa.valid_vec_isa_list()  # the real check (cached for this process)
    except Exception:  # noqa: BLE001 - another torch's layout: every process checks for itself
        return
    if has and passed == has:
        os.environ["TORCHINDUCTOR_VEC_ISA_OK"] = "1"


_vec_isa_checked_once_for_subprocesses()


@pytest.fixture(scope="session")
def private_base(tmp_path_factory):
    """A directory whose every ancestor passes the compile cache's safe-file checks, whatever the machine.

    pytest's base temp (``/tmp/pytest-of-<user>``, 0700, under sticky /tmp) normally does; when
    ``--basetemp`` or ``TMPDIR`` put it under a group-writable directory (``/work`` on some
    machines is), fall back to a fresh directory under ``/tmp`` or ``/var/tmp``, else skip: the
    acceptance tests cannot pass there by design.
    """
    uid = os.geteuid()
    base = tmp_path_factory.mktemp("private")
    if not compile_cache.unsafe_code_directories(str(base), uid, str(base)):
        yield base
        return
    for root in ("/tmp", "/var/tmp"):
        if os.path.isdir(root) and not compile_cache.unsafe_code_directories(root, uid, root):
            fallback = Path(tempfile.mkdtemp(prefix="ik-cache-test-", dir=root))
            yield fallback
            shutil.rmtree(fallback, ignore_errors=True)
            return
    pytest.skip(f"no directory here passes the checks: {compile_cache.unsafe_code_directories(str(base), uid, str(base))}")


@pytest.fixture
def private_dir(private_base, request):
    """A fresh directory (mode 0700) per test, inside :func:`private_base`."""
    return Path(tempfile.mkdtemp(prefix=re.sub(r"\W", "_", request.node.name)[:40] + "-", dir=private_base))
