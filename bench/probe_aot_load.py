"""Where a CUDA AOTInductor package of ik.serving.save_serving_bundle(aot=True) crashes its loading process, if it does.

    python bench/probe_aot_load.py --out DIR      # on a CUDA machine; one subprocess per step, faulthandler on

Builds tests/bundle_worker.py's model as an AOT bundle (build-aot, cuda), then loads it in fresh processes,
each going one step further: the package alone through torch (``aoti_load_package`` of the extracted
``.pt2``, then a call per warmed length, then a CUDA graph captured of one call), and the whole
``ik.serving.load_serving_bundle``.  Each step's exit status and last lines go to ``DIR/probe_aot_load.json``.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
RUNNER = """import zipfile, tempfile, glob, ctypes
d = tempfile.mkdtemp()
zipfile.ZipFile(PT2).extractall(d)
so = glob.glob(d + "/**/*.wrapper.so", recursive=True)[0]
print("so", so, flush=True)
for j in glob.glob(d + "/**/*.json", recursive=True): print(j, open(j).read()[:1500], flush=True)
"""
STEPS = {
    # torch alone, no inductor_knobs in either process: a package of the same model, built and loaded by torch.
    "plain-torch": (
        "import subprocess\nbuild = (\n"
        "    'import sys, torch\\nsys.path.insert(0, %r)\\nimport bundle_worker\\nbundle_worker.device = \"cuda\"\\n'\n"
        "    'm = bundle_worker.model()\\nx = bundle_worker.factory(56)\\n'\n"
        "    'ep = torch.export.export(m, (x,), strict=False)\\n'\n"
        "    'print(torch._inductor.aoti_compile_and_package(ep, package_path=%r))' % (sys.path[0], PT2 + '.plain.pt2'))\n"
        "print(subprocess.run([sys.executable, '-c', build], capture_output=True, text=True).stdout[-300:], flush=True)\n"
        "load = 'import torch\\nm = torch._inductor.aoti_load_package(%r)\\nprint(\"plain loaded\")' % (PT2 + '.plain.pt2')\n"
        "done = subprocess.run([sys.executable, '-X', 'faulthandler', '-c', load], capture_output=True, text=True)\n"
        "print('plain load exit', done.returncode, done.stdout[-200:], done.stderr[-1500:], flush=True)"
    ),
    "dlopen": RUNNER + "ctypes.CDLL(so)\nprint('dlopened', flush=True)",
    "runner": (
        RUNNER + "r = torch._C._aoti.AOTIModelContainerRunnerCuda(so, 1, 'cuda', os.path.dirname(so))\n"
        "print('constructed', r.get_call_spec(), flush=True)\nout = r.run([factory(56)])\ntorch.cuda.synchronize()\n"
        "print('ran', out[0].shape, flush=True)"
    ),
    "contents": (
        "import zipfile, time\nfor i in zipfile.ZipFile(PT2).infolist(): print(i.filename, i.file_size)\n"
        "t = time.time()\nmd = torch._C._aoti.AOTIModelPackageLoader.load_metadata_from_package(PT2, 'model')\n"
        "print('metadata', round(time.time() - t, 2), md, flush=True)"
    ),
    "load": "m = torch._inductor.aoti_load_package(PT2)",
    "load-cuda-first": "torch.zeros(1, device='cuda')\ntorch.cuda.synchronize()\nm = torch._inductor.aoti_load_package(PT2)",
    "load-single-threaded": "m = torch._inductor.aoti_load_package(PT2, run_single_threaded=True)\nprint('loaded')",
    "load-no-isa-probe": "os.environ['TORCHINDUCTOR_VEC_ISA_OK'] = '1'\nm = torch._inductor.aoti_load_package(PT2)",
    "call": "m = torch._inductor.aoti_load_package(PT2)\nfor n in SHAPES: m(factory(n)); torch.cuda.synchronize()",
    "call-after-unlink": (
        "m = torch._inductor.aoti_load_package(PT2)\nos.unlink(PT2)\nfor n in SHAPES: m(factory(n)); torch.cuda.synchronize()"
    ),
    "capture": (
        "m = torch._inductor.aoti_load_package(PT2)\nx = factory(56)\ns = torch.cuda.Stream()\n"
        "s.wait_stream(torch.cuda.current_stream())\nwith torch.cuda.stream(s):\n    m(x); m(x)\n"
        "torch.cuda.current_stream().wait_stream(s)\ng = torch.cuda.CUDAGraph()\n"
        "with torch.cuda.graph(g):\n    y = m(x)\ng.replay(); torch.cuda.synchronize(); print('replayed')"
    ),
    "capture-single-threaded": (  # as ik.serving.load_serving_bundle loads it
        "m = torch._inductor.aoti_load_package(PT2, run_single_threaded=True)\nx = factory(56)\ns = torch.cuda.Stream()\n"
        "s.wait_stream(torch.cuda.current_stream())\nwith torch.cuda.stream(s):\n    m(x); m(x)\n"
        "torch.cuda.current_stream().wait_stream(s)\ng = torch.cuda.CUDAGraph()\n"
        "with torch.cuda.graph(g):\n    y = m(x)\ng.replay(); torch.cuda.synchronize(); print('replayed')"
    ),
    "ik-load": "b = ik.serving.load_serving_bundle(BUNDLE, None, factory=factory, on_cold='warn', on='record')\nprint(b.proof.table())",
}
PRELUDE = """import faulthandler, os, sys, torch
faulthandler.dump_traceback_later(15, repeat=True)  # a step that hangs says where, every 15 s
sys.path.insert(0, {tests!r})
import bundle_worker
bundle_worker.device = "cuda"
from bundle_worker import factory, SHAPES
import inductor_knobs as ik
PT2, BUNDLE = {pt2!r}, {bundle!r}
print("step start", flush=True)
"""


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--out", required=True)
    parser.add_argument("--steps", nargs="+", default=list(STEPS), choices=list(STEPS))
    parser.add_argument("--step-timeout", type=float, default=150, help="seconds per step's process")
    args = parser.parse_args()
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    work = Path(tempfile.mkdtemp(prefix="probe-aot-"))
    bundle = work / "m.bundle"
    env = {**os.environ, "PYTHONFAULTHANDLER": "1", "TORCHINDUCTOR_CACHE_DIR": str(work / "build")}
    built = subprocess.run([sys.executable, str(ROOT / "tests" / "bundle_worker.py"), "build-aot", str(bundle), "cuda"],
                           env=env, capture_output=True, text=True)  # fmt: skip
    results = {"build": {"exit": built.returncode, "tail": built.stderr[-3000:]}}
    if built.returncode == 0:
        sys.path.insert(0, str(ROOT))
        from inductor_knobs.serving import compile_cache

        _, payload = compile_cache.read_file(str(bundle), False, "probe")
        for step, body in STEPS.items():
            if step not in args.steps:
                continue
            pt2 = work / f"{step}.pt2"
            pt2.write_bytes(payload)
            code = PRELUDE.format(tests=str(ROOT / "tests"), pt2=str(pt2), bundle=str(bundle)) + body
            env_step = {
                **env,
                "TORCHINDUCTOR_CACHE_DIR": str(work / f"cache-{step}"),
                "TRITON_CACHE_DIR": str(work / f"triton-{step}"),
            }
            command = [sys.executable, "-X", "faulthandler", "-c", code]
            if shutil.which("gdb") and step == "load":  # the C++ stack of a crash inside the loader
                command = ["gdb", "-q", "-batch", "-ex", "run", "-ex", "bt 25", "--args", *command]
            started = time.time()
            try:
                done = subprocess.run(
                    command, env=env_step, capture_output=True, text=True, errors="replace", timeout=args.step_timeout
                )
                results[step] = {"exit": done.returncode, "stdout": done.stdout[-5000:]}
                results[step].update(stderr_head=done.stderr[:4000], stderr=done.stderr[-4000:])
            except subprocess.TimeoutExpired as err:
                said = [v.decode(errors="replace") if isinstance(v, bytes) else str(v or "") for v in (err.stdout, err.stderr)]
                results[step] = {"exit": "timeout", "stdout": said[0][-3000:], "stderr": said[1][-4000:]}
            results[step]["seconds"] = time.time() - started
            print(step, results[step]["exit"], f"{results[step]['seconds']:.0f} s", flush=True)
            (out / "probe_aot_load.json").write_text(json.dumps(results, indent=1))  # after each step: a crash keeps the rest
    (out / "probe_aot_load.json").write_text(json.dumps(results, indent=1))
    print(json.dumps({k: v["exit"] for k, v in results.items()}))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
