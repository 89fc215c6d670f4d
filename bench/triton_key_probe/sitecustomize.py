# ruff: noqa - a throwaway probe, kept only in this commit of the experiment
"""Probe: log every Triton cache key's parts (source, backend, options, env) per process, to DIAG_LOG (JSON lines).

Put this directory first on PYTHONPATH (compile workers inherit it); compare.py DIAG_LOG then shows what differs
between the calling process's and a worker's key for the same kernel and config.
"""

import os

if os.environ.get("DIAG_LOG"):
    import builtins
    import json

    _orig_import = builtins.__import__
    done = [False]

    def patch():
        try:
            import triton.compiler.compiler as c
        except Exception:
            return
        if not hasattr(c, "get_cache_key"):
            with open(os.environ["DIAG_LOG"], "a") as f:
                f.write(json.dumps({"pid": os.getpid(), "no_get_cache_key": True}) + "\n")
            return
        orig = c.get_cache_key

        def wrapped(src, backend, backend_options, env_vars):
            try:
                rec = {
                    "pid": os.getpid(),
                    "name": getattr(src, "name", None),
                    "src": src.hash(),
                    "backend": backend.hash(),
                    "options": backend_options.hash(),
                    "env": env_vars,
                    "constants": {str(k): str(v) for k, v in getattr(src, "constants", {}).items()},
                    "fn_key": getattr(getattr(src, "fn", None), "cache_key", None),
                    "attrs": str(getattr(src, "attrs", None))[:300],
                    "sig": str(getattr(src, "signature", None))[:300],
                    "opts": str(backend_options)[:1500],
                }
                with open(os.environ["DIAG_LOG"], "a") as f:
                    f.write(json.dumps(rec, default=str) + "\n")
            except Exception as e:
                with open(os.environ["DIAG_LOG"], "a") as f:
                    f.write(json.dumps({"pid": os.getpid(), "err": repr(e)}) + "\n")
            return orig(src, backend, backend_options, env_vars)

        c.get_cache_key = wrapped

    def hook(name, *a, **k):
        m = _orig_import(name, *a, **k)
        if not done[0] and name.startswith("triton"):
            import sys

            if "triton.compiler.compiler" in sys.modules:
                done[0] = True
                patch()
        return m

    builtins.__import__ = hook
