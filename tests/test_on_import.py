"""patching.on_import: hooks wait for their module's import, miss nothing of it, and hold nothing while waiting.

The modules here are written to ``tmp_path`` under names no other test imports, so each test sees a module
that is not imported yet; the last test checks the real thing in a fresh process: an observer entered before
Inductor is imported hears the compile that imports it, and nothing of Inductor or Dynamo is imported for it.
"""

from __future__ import annotations

import importlib
import json
import os
import subprocess
import sys
import textwrap
import threading
import uuid
import warnings
from pathlib import Path

import pytest
import wrapt.importer

from inductor_knobs.core import patching
from inductor_knobs.core.patching import SharedPatch, import_hook_failures, on_import


@pytest.fixture(autouse=True)
def _drain_hook_failures():
    """The failures a test provokes are told at the next block entry: not in another test's."""
    yield
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        patching.warn_import_hook_failures(UserWarning)


@pytest.fixture
def module_dir(tmp_path, monkeypatch):
    monkeypatch.syspath_prepend(str(tmp_path))
    names: list[str] = []

    def write(body: str = "VALUE = 1\n") -> str:
        name = f"ik_on_import_{uuid.uuid4().hex[:10]}"
        (tmp_path / f"{name}.py").write_text(textwrap.dedent(body))
        names.append(name)
        importlib.invalidate_caches()
        return name

    yield write
    for name in names:
        sys.modules.pop(name, None)


def _patch(name: str, seen: list[str]) -> SharedPatch:
    def step(push):
        module = sys.modules[name]
        push(lambda: setattr(module, "VALUE", 1))
        seen.append("installed")
        module.VALUE = 2

    return SharedPatch(f"test {name}", lambda: [on_import(name, lambda: [step])])


def test_a_hook_waits_for_the_import_and_is_there_before_anything_of_the_module_runs(module_dir):
    name = module_dir()
    seen: list[str] = []
    patch, holder = _patch(name, seen), object()
    patch.acquire(holder)
    assert seen == [] and name not in sys.modules  # installing imported nothing
    module = importlib.import_module(name)
    assert seen == ["installed"] and module.VALUE == 2  # in place as the import returned
    patch.release(holder)
    assert module.VALUE == 1 and name not in patching._WAITING


def test_a_hook_released_before_the_import_does_nothing_when_the_module_comes(module_dir):
    name = module_dir()
    seen: list[str] = []
    patch, holder = _patch(name, seen), object()
    patch.acquire(holder)
    patch.release(holder)
    assert importlib.import_module(name).VALUE == 1 and seen == []


def test_installs_that_come_and_go_while_the_module_never_imports_hold_no_memory(module_dir):
    name = module_dir()
    patch, holder = _patch(name, []), object()
    for _ in range(200):  # a recorder entered per request, for days, on a host where Triton is never imported
        patch.acquire(holder)
        patch.release(holder)
    assert patching._WAITING.get(name, []) == []
    assert len(wrapt.importer._post_import_hooks.get(name) or []) == 1  # one wrapt hook per module, not per install


def test_an_imported_module_gets_the_hook_at_once(module_dir):
    name = module_dir()
    module = importlib.import_module(name)
    seen: list[str] = []
    patch, holder = _patch(name, seen), object()
    patch.acquire(holder)
    assert seen == ["installed"] and module.VALUE == 2
    patch.release(holder)
    assert module.VALUE == 1


def test_a_failing_hook_does_not_fail_the_import_even_under_w_error(module_dir):
    name = module_dir()

    def step(push):
        warnings.warn("drift seen in an import hook", UserWarning, stacklevel=1)

    patch, holder = SharedPatch("failing", lambda: [on_import(name, lambda: [step])]), object()
    patch.acquire(holder)
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("error")
            assert importlib.import_module(name).VALUE == 1  # the user's import went through
    finally:
        patch.release(holder)
    assert any(name in failure and "drift seen" in failure for failure in import_hook_failures())


def test_a_module_another_thread_is_importing_is_waited_for(module_dir):
    """Arming while another thread is inside the module's import: nothing runs on the half-imported module,
    the block enters at once, and the hook lands once that import ends."""
    gate = threading.Event()
    started = threading.Event()
    holder_module = module_dir("VALUE = 0\n")
    name = module_dir(
        f"""
        import {holder_module} as _h
        _h.started.set()
        _h.gate.wait(30)
        VALUE = 1
        """
    )
    helper = importlib.import_module(holder_module)
    helper.started, helper.gate = started, gate
    importer = threading.Thread(target=importlib.import_module, args=(name,))
    importer.start()
    assert started.wait(30)  # the module is in sys.modules now, half executed
    seen: list[str] = []
    patch, holder = _patch(name, seen), object()
    arming = threading.Thread(target=patch.acquire, args=(holder,))
    arming.start()
    arming.join(30)  # entering does not wait for the import (its gate is still closed): it returns at once
    assert seen == []  # nothing ran on the half-imported module
    assert not arming.is_alive()  # entering did not wait for the import (its lock could be needed there)
    gate.set()
    importer.join(30)
    for _ in range(600):  # a poller fires the install once the import ended
        if seen:
            break
        threading.Event().wait(0.05)
    assert seen == ["installed"] and sys.modules[name].VALUE == 2
    patch.release(holder)
    assert sys.modules[name].VALUE == 1


FRESH = """
import sys, json
import torch
import inductor_knobs as ik
from inductor_knobs.serving.cold_start import ColdStartRecorder


def saver_in(sa):  # 2.4 has no feedback savers (and no selector cache until a first autotune)
    return any(f is observers._feedback_saver for f in getattr(sa._ALGORITHM_SELECTOR_CACHE, "feedback_saver_fns", ()))


heavy = ("torch._inductor", "torch._dynamo", "torch._inductor.select_algorithm")
with ColdStartRecorder() as rec:
    entered = [m for m in heavy if m in sys.modules]
    from torch._inductor import compile_fx
    import torch._inductor.select_algorithm as sa
    from inductor_knobs.core import observers, interception
    inside = {
        "compile_fx wrapped": type(compile_fx.compile_fx).__name__,
        "saver": saver_in(sa),
    }
    fn = torch.compile(lambda x: torch.sin(x) + 1, backend="inductor")
    fn(torch.randn(8))
after = {
    "compile_fx": type(compile_fx.compile_fx).__name__,
    "saver": saver_in(sa),
}
proof = rec.proof()
print(json.dumps({"entered": entered, "inside": inside, "after": after, "dynamo": len(proof.dynamo_compiles),
                  "attestations": len(proof.attestations), "misses": proof.counters.get("inductor.fxgraph_cache_miss", 0)
                  + proof.counters.get("inductor.fxgraph_cache_hit", 0)}))
"""


def test_an_observer_entered_before_inductor_is_imported_hears_the_compile_that_imports_it(tmp_path):
    env_root = str(Path(__file__).resolve().parent.parent)
    done = subprocess.run(
        [sys.executable, "-c", FRESH],
        capture_output=True,
        text=True,
        timeout=600,
        cwd=env_root,
        env={
            **{k: v for k, v in os.environ.items() if not k.startswith("INDUCTOR_KNOBS_")},
            "TORCHINDUCTOR_CACHE_DIR": str(tmp_path / "inductor"),
            "TORCHINDUCTOR_FX_GRAPH_CACHE": "1",  # off by default before torch 2.5
            "PYTHONPATH": env_root,
        },
    )
    assert done.returncode == 0, done.stderr[-3000:]
    out = json.loads(done.stdout.strip().splitlines()[-1])
    assert out["entered"] == []  # entering the recorder imported neither Inductor nor Dynamo
    # installed by the import, where torch has add_feedback_saver (2.4 has none: nothing to install)
    import torch

    from inductor_knobs.core import torch_compat

    saver = bool(torch_compat.installed().feedback_saver_arity(torch_compat.release_of(torch.__version__)))
    assert out["inside"] == {"compile_fx wrapped": "FunctionWrapper", "saver": saver}
    assert out["after"] == {"compile_fx": "function", "saver": False}  # and removed at exit, by identity
    assert out["dynamo"] == 1 and out["attestations"] == 1 and out["misses"] == 1  # the compile was heard


def test_no_deadlock_when_the_module_being_imported_takes_the_patch_at_its_end(module_dir):
    """As the startup hook does inside compile_fx's import (env activation takes the interception's lock):
    another thread that enters the patch meanwhile must not wait for that import under the patch's lock."""
    seen: list[str] = []
    started, gate = threading.Event(), threading.Event()
    name = module_dir("VALUE = 1\n")  # written first: the second module needs its name
    patch = _patch(name, seen)
    helper = module_dir("VALUE = 0\n")
    importlib.import_module(helper).hooks = (started, gate, patch)
    (Path(sys.modules[helper].__file__).parent / f"{name}.py").write_text(
        f"import {helper} as _h\n_h.hooks[0].set()\n_h.hooks[1].wait(30)\nVALUE = 1\n_h.hooks[2].acquire('activation')\n"
    )
    importlib.invalidate_caches()
    importer = threading.Thread(target=importlib.import_module, args=(name,), daemon=True)
    importer.start()
    assert started.wait(30)
    entering = threading.Thread(target=patch.acquire, args=("block",), daemon=True)
    entering.start()
    entering.join(5)
    assert not entering.is_alive()  # entered without waiting for the import
    gate.set()
    importer.join(30)
    assert not importer.is_alive(), "deadlock: the import waited for the patch's lock"
    for _ in range(600):  # the install that found the module half imported fires once the import ended
        if seen:
            break
        threading.Event().wait(0.05)
    assert seen == ["installed"] and sys.modules[name].VALUE == 2
    patch.release("block")
    patch.release("activation")
    assert sys.modules[name].VALUE == 1


def test_an_interrupt_while_registering_the_hook_does_not_lose_it_for_later_installs(module_dir, monkeypatch):
    name = module_dir()
    seen: list[str] = []
    patch, holder = _patch(name, seen), object()
    real = wrapt.register_post_import_hook
    calls = []

    def interrupted_once(hook, module):
        calls.append(module)
        if len(calls) == 1:
            raise KeyboardInterrupt
        return real(hook, module)

    monkeypatch.setattr(wrapt, "register_post_import_hook", interrupted_once)
    with pytest.raises(KeyboardInterrupt):
        patch.acquire(holder)
    assert patch.users == 0 and patching._WAITING.get(name, []) == []  # the interrupted install left nothing
    patch.acquire(holder)
    assert importlib.import_module(name).VALUE == 2 and seen == ["installed"]
    patch.release(holder)


def test_an_interrupt_inside_the_import_hook_leaves_every_install_waiting_for_the_next_import(module_dir):
    name = module_dir()
    seen: list[str] = []
    first, holder_a, holder_b = [True], object(), object()

    def interrupting(push):
        if first[0]:
            first[0] = False
            raise KeyboardInterrupt

    a = SharedPatch("interrupting", lambda: [on_import(name, lambda: [interrupting])])
    b = _patch(name, seen)
    b.acquire(holder_b)
    a.acquire(holder_a)
    with pytest.raises(KeyboardInterrupt):
        importlib.import_module(name)
    assert name not in sys.modules  # Python dropped the module whose import failed
    for _ in range(200):  # the poller hands the installs back to a fresh wrapt hook
        if name in patching._HOOKED:
            break
        threading.Event().wait(0.01)
    module = importlib.import_module(name)
    assert module.VALUE == 2 and seen[-1] == "installed"
    b.release(holder_b)
    a.release(holder_a)
    assert module.VALUE == 1


def test_a_hook_failure_is_told_at_the_next_block_entry(module_dir):
    name = module_dir()

    def failing(push):
        raise RuntimeError("torch moved it")

    patch, holder = SharedPatch("failing", lambda: [on_import(name, lambda: [failing])]), object()
    patch.acquire(holder)
    try:
        importlib.import_module(name)
    finally:
        patch.release(holder)
    with pytest.warns(UserWarning, match=rf"{name}: RuntimeError: torch moved it"):
        patching.warn_import_hook_failures(UserWarning)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        patching.warn_import_hook_failures(UserWarning)  # told once


def _waiters() -> int:
    return sum(t.name == "inductor_knobs import waiter" for t in threading.enumerate())


def test_one_poller_per_module_however_many_blocks_enter_during_a_long_import(module_dir):
    started, gate = threading.Event(), threading.Event()
    helper = module_dir("VALUE = 0\n")
    name = module_dir(f"import {helper} as _h\n_h.hooks[0].set()\n_h.hooks[1].wait(30)\nVALUE = 1\n")
    importlib.import_module(helper).hooks = (started, gate)
    importer = threading.Thread(target=importlib.import_module, args=(name,), daemon=True)
    importer.start()
    assert started.wait(30)
    seen: list[str] = []
    patch, held = _patch(name, seen), object()
    patch.acquire(held)  # one install stays until the end
    most = 0
    for _ in range(300):  # a block entered per request on other threads while Inductor imports
        holder = object()
        patch.acquire(holder)
        patch.release(holder)
        most = max(most, _waiters())
    assert most <= 1 and seen == []
    gate.set()
    importer.join(30)
    for _ in range(600):
        if seen:
            break
        threading.Event().wait(0.05)
    assert seen == ["installed"] and sys.modules[name].VALUE == 2
    patch.release(held)


def test_an_import_no_hook_saw_is_caught_up_by_the_next_install(module_dir):
    name = module_dir()
    first: list[str] = []
    second: list[str] = []
    one, two = _patch(name, first), _patch(name, second)
    one.acquire("one")  # waits, behind a wrapt hook
    path = Path(sys.path[0]) / f"{name}.py"  # imported past every finder, as an import begun before the hook was
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    sys.modules[name] = module
    assert first == []
    two.acquire("two")
    assert first == ["installed"] and second == ["installed"] and module.VALUE == 2
    two.release("two")
    one.release("one")
    assert module.VALUE == 1


def test_activation_inside_compile_fx_import_installs_at_once_and_other_importers_wait_for_it(module_dir, monkeypatch):
    """The startup hook's loader (inductor_knobs/startup.py) on a stand-in for compile_fx: the activation's
    installs fire in the importing thread, and another thread's import returns only once activation ended."""
    from inductor_knobs import startup

    name = module_dir()
    seen: list[str] = []
    patch = _patch(name, seen)
    timeline: list[str] = []
    activating = threading.Event()

    def activate() -> None:
        patch.acquire("activation")
        timeline.append(f"activated, installed={seen == ['installed']}, poller={_waiters()}")
        activating.set()
        threading.Event().wait(0.5)
        timeline.append("activation ends")

    monkeypatch.setattr(startup, "HOOK_MODULE", name)
    monkeypatch.setattr(startup, "activate", activate)
    finder = startup._AfterImport()
    sys.meta_path.insert(0, finder)
    try:
        importer = threading.Thread(target=importlib.import_module, args=(name,), daemon=True)
        importer.start()
        assert activating.wait(30)
        other = threading.Thread(target=lambda: (importlib.import_module(name), timeline.append("other import returned")))
        other.start()
        importer.join(30)
        other.join(30)
    finally:  # a finder left behind would activate at the real compile_fx import of a later test
        if finder in sys.meta_path:
            sys.meta_path.remove(finder)
    assert timeline == ["activated, installed=True, poller=0", "activation ends", "other import returned"]
    assert startup.executed is None and sys.modules[name].VALUE == 2
    patch.release("activation")
