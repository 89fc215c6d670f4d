"""User workloads for test_ablate (the documented ``pkg.module:factory`` protocol)."""

import os
import tempfile
import time

import torch


def tiny(device, quick):
    """Returns a plain (model, inputs) pair: the simplest form of the protocol."""
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(16, 16), torch.nn.ReLU()).to(device)
    return model, [(torch.randn(4, 16, device=device),)]


def graph_break(device, quick):
    """A model Dynamo cannot capture whole: fullgraph=True arms crash on it."""

    def model(x):
        torch._dynamo.graph_break()
        return x + 1

    return model, [(torch.randn(4, device=device),)]


def sleepy(device, quick):
    """For the interruption test: every worker leaves its pid in ``$IK_TEST_PID_DIR/<pid>.pid``.

    The first worker (no pid file there yet) finishes at once; every later one sleeps
    ``$IK_TEST_SLEEP`` seconds (default 120) inside the model's forward, so the test can
    interrupt the parent while a worker is busy and one run has already finished.  Jobs run
    one at a time on CPU, so "first" is well defined.  A sleeping worker first leaves a temporary
    file in its ``TMPDIR`` (``cc*.s``, as the C compiler does while it compiles), which nothing
    removes when the worker is killed.
    """
    pid_dir = os.environ["IK_TEST_PID_DIR"]
    first = not os.listdir(pid_dir)
    if not first:
        os.close(tempfile.mkstemp(prefix="cc", suffix=".s")[0])
    with open(os.path.join(pid_dir, f"{os.getpid()}.pid"), "w") as dst:
        dst.write(str(os.getpid()))
    seconds = 0.0 if first else float(os.environ.get("IK_TEST_SLEEP", "120"))

    def model(x):
        time.sleep(seconds)
        return x + 1

    return model, [(torch.randn(4, device=device),)]


def helper_process(device, quick):
    """For the worker-exit test: start a process in the worker's session, as Inductor's compile
    workers are, that burns about half a second of CPU and then sleeps; its pid goes to
    ``$IK_TEST_PID_DIR/helper.pid`` once the CPU is spent."""
    import subprocess
    import sys

    pid_file = os.path.join(os.environ["IK_TEST_PID_DIR"], "helper.pid")
    code = (
        "import os, sys, time\n"
        "start = time.process_time()\n"
        "while time.process_time() - start < 0.5: pass\n"
        "open(sys.argv[1], 'w').write(str(os.getpid()))\n"
        "time.sleep(600)\n"
    )
    subprocess.Popen([sys.executable, "-c", code, pid_file])
    while not os.path.exists(pid_file) or not open(pid_file).read():
        time.sleep(0.05)
    return (lambda x: x + 1), [(torch.randn(4, device=device),)]


NOT_CALLABLE = 3


def slow_second(device, quick):
    """For the barrier's interruption test: every worker leaves its pid in ``$IK_TEST_PID_DIR``; the
    first builds at once (it then compiles and waits for its turn to measure), every later one
    sleeps ``$IK_TEST_SLEEP`` seconds while it builds, so the first waits at the barrier meanwhile.
    A worker whose model ran (its reference pass, just before it says ``ready``) leaves
    ``<pid>.ran``."""
    pid_dir = os.environ["IK_TEST_PID_DIR"]
    first = not any(name.endswith(".pid") for name in os.listdir(pid_dir))
    with open(os.path.join(pid_dir, f"{os.getpid()}.pid"), "w") as dst:
        dst.write(str(os.getpid()))
    if not first:
        time.sleep(float(os.environ.get("IK_TEST_SLEEP", "120")))
    marker = os.path.join(pid_dir, f"{os.getpid()}.ran")

    def model(x):
        open(marker, "w").close()
        return x + 1

    return model, [(torch.randn(4, device=device),)]
