"""Run inside a child of the ablation's fork server (``python -m forkserver_probe MODE``) by
tests/test_ablate_forkserver.py; prints one JSON object.

- ``first``: the knobs from its environment are applied (the gate patched, Inductor config changed),
  a function is compiled, and the process's in-memory state shows it (Dynamo counters, loaded
  Inductor modules).
- ``second``: what a run finds at its start: CUDA, the modules the server had loaded, its cache
  directory; then the Inductor config (``config`` below), the gate function and Dynamo's and
  Inductor's in-memory caches.
- ``config``: only the Inductor config, for a fresh interpreter to compare with.
- ``attest``: what a run's Inductor compile read, with the knobs activated by the package's startup
  hook alone (as the ``.pth`` line does in a fresh interpreter: no explicit activation), recorded by
  ``ik.record_compiles``; and the compile threads Inductor's config holds.
"""

import json
import os
import re
import sys
import tempfile
import types


def _config() -> dict:
    import torch._inductor.config as config

    # Reprs without addresses: a function default is the same function at another address.
    return {k: re.sub(r" at 0x[0-9a-f]+", "", repr(v)) for k, v in sorted(config.get_config_copy().items())}


def _gate() -> dict:
    """What ``torch._inductor.utils.is_big_gpu`` is: its type, whether a wrapt wrapper, the code inside."""
    import torch._inductor.utils as utils
    import wrapt

    gate = utils.is_big_gpu
    inner = gate
    while hasattr(inner, "__wrapped__") and not isinstance(inner, types.FunctionType):
        inner = inner.__wrapped__
    code = getattr(inner, "__code__", None)
    return {
        "type": f"{type(gate).__module__}.{type(gate).__qualname__}",
        "wrapt": isinstance(gate, (wrapt.FunctionWrapper, wrapt.ObjectProxy)),
        "code": f"{code.co_filename}:{code.co_firstlineno}" if code else None,
    }


def _caches() -> dict:
    from torch._dynamo.utils import counters
    from torch._inductor.codecache import PyCodeCache

    package = sys.modules.get("torch._dynamo.package")  # torch >= 2.8: a cache object made at import
    dynamo_cache = getattr(package, "DynamoCache", None)
    # Inductor's loaded modules: ``modules`` and ``modules_no_attr`` from torch 2.8, one ``cache`` dict before.
    loaded = getattr(PyCodeCache, "modules", None)
    count = len(loaded) + len(PyCodeCache.modules_no_attr) if loaded is not None else len(PyCodeCache.cache)
    return {
        "dynamo_counters": {k: dict(v) for k, v in counters.items() if v},
        "inductor_modules": count,
        "dynamo_cache_dir": dynamo_cache.path_prefix() if dynamo_cache is not None else None,
    }


def first() -> dict:
    import torch

    import inductor_knobs as ik

    ik.activate_from_env()
    import torch._inductor.config as config

    fn = torch.compile(lambda x: (x @ x).relu() + 1)
    fn(torch.randn(8, 8))
    return {"max_autotune_gemm": config.max_autotune_gemm, "gate": _gate(), **_caches()}


def second() -> dict:
    torch = sys.modules.get("torch")
    zygote = sys.modules.get("inductor_knobs.ablation.zygote")
    at_start = {
        "cuda_initialized": bool(torch is not None and torch.cuda.is_initialized()),
        "compiler_modules": sum(m.startswith(("torch._inductor", "torch._dynamo")) for m in sys.modules),
        "hook_module_loaded": "torch._inductor.compile_fx" in sys.modules,
        "knobs_loaded": sorted(m for m in sys.modules if m.startswith("inductor_knobs.core")),
        "cache_dir": os.environ["TORCHINDUCTOR_CACHE_DIR"],
        "cache_dir_contents": (
            os.listdir(os.environ["TORCHINDUCTOR_CACHE_DIR"]) if os.path.exists(os.environ["TORCHINDUCTOR_CACHE_DIR"]) else []
        ),
        "tempdir": tempfile.gettempdir(),
        "child_facts": dict(zygote.CHILD_FACTS) if zygote is not None else None,
        "own_session": os.getsid(0) == os.getpid(),
        "server_environ_knobs": [
            e for e in open(f"/proc/{os.getppid()}/environ", "rb").read().split(b"\0") if e.startswith(b"INDUCTOR_KNOBS_")
        ],
    }
    return {**at_start, "config": _config(), "gate": _gate(), **_caches()}


def attest() -> dict:
    import torch

    import inductor_knobs as ik

    hook_module_at_start = "torch._inductor.compile_fx" in sys.modules
    fn = torch.compile(lambda x: x.sin() + 1)
    recorder = ik.record_compiles()
    with recorder:
        fn(torch.randn(8))
    import torch._inductor.config as config

    return {
        "hook_module_at_start": hook_module_at_start,
        "attestations": [{k: v for k, v in a.to_dict().items() if k != "compile_id"} for a in recorder.attestations],
        "compile_threads": config.compile_threads,
    }


def sleep() -> dict:
    """Start a helper in this run's session (as Inductor's compile workers are), leave its pid in
    ``argv[2]``, and sleep: for the test of a run killed by its process group."""
    import subprocess
    import time

    helper = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(3600)"])
    with open(sys.argv[2] + ".tmp", "w") as dst:
        dst.write(str(helper.pid))
    os.rename(sys.argv[2] + ".tmp", sys.argv[2])
    time.sleep(3600)
    return {}


if __name__ == "__main__":
    mode = sys.argv[1]
    fresh = lambda: {"config": _config(), "gate": _gate()}  # noqa: E731 - a fresh interpreter's view
    out = {"first": first, "second": second, "sleep": sleep, "config": fresh, "attest": attest}[mode]()
    print(json.dumps(out))
