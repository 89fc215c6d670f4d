"""Which import starts a native thread?  (The fork server refuses to fork a process with more than one.)

    PYTORCH_NVML_BASED_CUDA_CHECK=1 python bench/probe_import_threads.py torch triton torch._dynamo ...

Imports the modules in order and prints, after each, the threads that appeared (``/proc/self/task/*/comm``)
and the Python threads.
"""

import contextlib
import importlib
import os
import sys
import threading


def tasks() -> dict[str, str]:
    out = {}
    for tid in os.listdir("/proc/self/task"):
        with contextlib.suppress(OSError), open(f"/proc/self/task/{tid}/comm") as comm:
            out[tid] = comm.read().strip()
    return out


seen = tasks()
print("start", seen)
for name in sys.argv[1:]:
    importlib.import_module(name)
    now = tasks()
    print(name, "new:", {k: v for k, v in now.items() if k not in seen}, "python:", [t.name for t in threading.enumerate()])
    seen = now
