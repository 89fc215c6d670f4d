"""aot_isa.recorded: while an AOT bundle loads, torch's CPU ISA probes are not built; the build host's answer
stands in, in the loading thread only, and torch's function is back by identity afterwards.

Run in a fresh interpreter on an empty TORCHINDUCTOR_CACHE_DIR (torch caches its probes' answer per process and
their binaries per cache directory), as on a new serving host.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap

import pytest

from inductor_knobs.serving import aot_isa

SCRIPT = textwrap.dedent(
    """
    import json, sys, threading
    import torch
    from torch._inductor import codecache, cpu_vec_isa
    from inductor_knobs.serving import aot_isa

    probes = {"main": 0, "other": 0}
    real_build = cpu_vec_isa.VecISA.check_build

    def counted(self, code):
        probes[threading.current_thread().name] += 1
        return real_build(self, code)

    cpu_vec_isa.VecISA.check_build = counted
    threading.current_thread().name = "main"
    original = cpu_vec_isa.pick_vec_isa
    other = {}
    with aot_isa.recorded(sys.argv[1]):
        # torch's loader asks this (2.10-2.15 _load_aoti); in this thread, nothing is built
        inside = codecache.get_device_information("cpu")["AOTI_CPU_ISA"]
        wrapped_inside = cpu_vec_isa.pick_vec_isa is not original
        # another thread, meanwhile, gets torch's answer the usual way
        worker = threading.Thread(target=lambda: other.update(isa=str(cpu_vec_isa.pick_vec_isa()).upper()), name="other")
        worker.start()
        worker.join()
    built_inside = probes["main"]
    probed = str(cpu_vec_isa.pick_vec_isa()).upper()  # torch's own answer here, probes built (or cached by the thread)
    print(json.dumps({
        "inside": inside, "built_inside": built_inside, "wrapped_inside": wrapped_inside,
        "restored": cpu_vec_isa.pick_vec_isa is original, "other": other.get("isa"),
        "other_built": probes["other"], "probed": probed,
    }))
    """
)


def run_fresh(tmp_path, name: str) -> dict:
    env_cache = tmp_path / "empty-inductor-cache"
    done = subprocess.run(
        [sys.executable, "-c", SCRIPT, name],
        capture_output=True,
        text=True,
        timeout=600,
        env={**os.environ, "TORCHINDUCTOR_CACHE_DIR": str(env_cache)},
    )
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


def test_the_recorded_isa_stands_in_for_the_probes_in_the_loading_thread_only(tmp_path):
    import torch

    if sys.platform != "linux" or torch.backends.cpu.get_cpu_capability() not in ("AVX2", "AVX512"):
        pytest.skip("the probes differ off x86-64 Linux")
    out = run_fresh(tmp_path, "AVX2")  # AVX2: a name every x86-64 torch knows, whatever this CPU's best is
    assert out["inside"] == "AVX2" and out["built_inside"] == 0 and out["wrapped_inside"], out
    # the other thread probed as torch does, and the process's answer afterwards is torch's, not the stand-in
    assert out["other_built"] > 0 and out["other"] == out["probed"], out
    assert out["restored"], "torch's pick_vec_isa is not back by identity"


def test_a_name_torch_does_not_know_falls_through_to_the_probes(tmp_path):
    import torch

    if sys.platform != "linux" or torch.backends.cpu.get_cpu_capability() not in ("AVX2", "AVX512"):
        pytest.skip("the probes differ off x86-64 Linux")
    out = run_fresh(tmp_path, "AVX9000")
    assert out["built_inside"] > 0 and out["inside"] == out["probed"] and out["restored"], out


def test_nothing_is_installed_without_a_recorded_isa():
    from torch._inductor import cpu_vec_isa

    original = cpu_vec_isa.pick_vec_isa
    with aot_isa.recorded(None):
        assert cpu_vec_isa.pick_vec_isa is original
    with aot_isa.recorded("AVX2"):
        assert cpu_vec_isa.pick_vec_isa is not original
    assert cpu_vec_isa.pick_vec_isa is original


def test_an_interrupt_inside_the_load_puts_torchs_function_back():
    from torch._inductor import cpu_vec_isa

    original = cpu_vec_isa.pick_vec_isa
    with pytest.raises(KeyboardInterrupt), aot_isa.recorded("AVX2"):
        raise KeyboardInterrupt
    assert cpu_vec_isa.pick_vec_isa is original and aot_isa._standing_in.get() is None
