"""A real single-node Slurm cluster on this machine, for tests (``slurm_cluster`` fixture).

Register it in a test module with ``pytest_plugins = ["slurm_cluster"]``; ``python tests/slurm_cluster.py``
starts one by hand (it prints the ``SLURM_CONF`` to export, and stops everything on Ctrl-C).  The fixture (session
scope) starts, in a fresh temporary directory:

- ``munged`` with a fresh key, unless a MUNGE daemon already answers on the default socket;
- ``slurmctld`` and ``slurmd`` (in the foreground, as this process's children) with a ``slurm.conf``
  of one CPU-only node (this machine's CPUs and memory, as ``slurmd -C`` reads them), one partition,
  ``select/cons_tres`` over CPUs only, ``proctrack/linuxproc``, ``task/none``, no accounting, state and
  spool directories under the temporary directory, on two free ports of 127.0.0.1;

waits (bounded) until ``sinfo`` shows the node idle, and exports ``SLURM_CONF`` to this process, so
that ``sbatch``, ``squeue`` and submitit use this cluster.  At teardown it cancels every job, waits
(bounded) until the queue is empty, stops the daemons it started and removes the directory.

Where a cluster cannot start here (Slurm or MUNGE binaries missing, not root, munged or a daemon
failing, the node never idle) every test that uses the fixture is skipped with the reason, and what
had started is stopped.  ``.ci/run`` installs ``slurm-wlm`` and ``munge`` where ``slurmctld`` is missing.
"""

from __future__ import annotations

import contextlib
import os
import pwd
import re
import shutil
import signal
import socket
import subprocess
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

#: Seconds the fixture waits for the node to become idle, and for the queue to empty at teardown.
START_TIMEOUT_S, DRAIN_TIMEOUT_S = 60.0, 60.0

#: The binaries a cluster needs (munged only when no MUNGE daemon runs already).
BINARIES = ("slurmctld", "slurmd", "sbatch", "srun", "squeue", "sinfo", "scancel", "munge", "unmunge")


@dataclass
class SlurmCluster:
    """A running test cluster.

    Attributes:
        root: its temporary directory (configuration, state, spool, logs).
        conf: its ``slurm.conf`` (``SLURM_CONF`` while the fixture is active).
        node: the node's name; partition: the partition's (the default one).
        cpus: the node's CPUs.
    """

    root: Path
    conf: Path
    node: str
    partition: str
    cpus: int

    def env(self) -> dict[str, str]:
        """This process's environment with ``SLURM_CONF`` pointing at the cluster."""
        return {**os.environ, "SLURM_CONF": str(self.conf)}

    def command(self, *argv: str, check: bool = True) -> str:
        """Run a Slurm client command against the cluster; its stdout."""
        out = subprocess.run(list(argv), env=self.env(), capture_output=True, text=True, timeout=60, check=False)
        if check and out.returncode != 0:
            raise RuntimeError(f"{' '.join(argv)} exited {out.returncode}: {out.stderr.strip()}")
        return out.stdout

    def jobs(self) -> dict[str, str]:
        """Every job (array elements one by one) that slurmctld knows -> its state."""
        lines = self.command("squeue", "--states=all", "--array", "--noheader", "--format=%i|%T").splitlines()
        return dict(line.strip().split("|", 1) for line in lines if "|" in line)

    def logs(self) -> str:
        """The tails of the daemons' logs (for a failure message)."""
        parts = []
        for name in ("slurmctld.log", "slurmd.log", "munged.log"):
            path = self.root / "log" / name
            if path.exists():
                parts.append(f"--- {name}\n" + "\n".join(path.read_text(errors="replace").splitlines()[-15:]))
        return "\n".join(parts)


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _munge_works(socket_path: str | None = None) -> bool:
    extra = ["--socket", socket_path] if socket_path else []
    try:
        cred = subprocess.run(["munge", "-n", *extra], capture_output=True, timeout=10, check=False)
        if cred.returncode != 0:
            return False
        back = subprocess.run(["unmunge", *extra], input=cred.stdout, capture_output=True, timeout=10, check=False)
    except (OSError, subprocess.TimeoutExpired):
        return False
    return back.returncode == 0


def _node_hardware() -> tuple[int, int]:
    """(CPUs, RealMemory in MB) as slurmd reads them, so that the node is never refused as too small."""
    cpus, memory = os.cpu_count() or 1, 1024
    with contextlib.suppress(OSError, subprocess.SubprocessError):
        text = subprocess.run(["slurmd", "-C"], capture_output=True, text=True, timeout=30, check=False).stdout
        found = dict(re.findall(r"(\w+)=(\S+)", text))
        cpus = int(found.get("CPUs", cpus))
        memory = int(found.get("RealMemory", memory))
    return cpus, max(1, memory * 9 // 10)


def _die_with_parent() -> None:
    """In the daemon's child, before exec: Linux sends it SIGTERM when the test process dies, so a killed
    pytest worker (SIGKILL, or SIGTERM that skips fixture teardown) leaves no slurmctld/slurmd/munged behind
    (seen: daemons of a killed xdist worker still running 46 minutes later)."""
    import ctypes
    import signal

    try:
        ctypes.CDLL(None, use_errno=True).prctl(1, int(signal.SIGTERM))  # PR_SET_PDEATHSIG = 1
    except (OSError, AttributeError):  # not Linux: teardown alone stops them
        pass


def _stop(proc: subprocess.Popen[bytes] | None) -> None:
    if proc is None or proc.poll() is not None:
        return
    proc.send_signal(signal.SIGTERM)
    try:
        proc.wait(timeout=15)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait(timeout=15)


def _config(root: Path, node: str, cpus: int, memory: int, munge_socket: str | None) -> str:
    host = socket.gethostname()
    auth = f"AuthInfo=socket={munge_socket}\n" if munge_socket else ""
    return (
        "ClusterName=ik-test\n"
        f"SlurmctldHost={host}(127.0.0.1)\n"
        f"SlurmctldPort={_free_port()}\n"
        f"SlurmdPort={_free_port()}\n"
        "SlurmUser=root\nSlurmdUser=root\n"
        "AuthType=auth/munge\nCredType=cred/munge\n" + auth + f"StateSaveLocation={root / 'state'}\n"
        f"SlurmdSpoolDir={root / 'spool'}\n"
        f"SlurmctldPidFile={root / 'slurmctld.pid'}\nSlurmdPidFile={root / 'slurmd.pid'}\n"
        f"SlurmctldLogFile={root / 'log' / 'slurmctld.log'}\nSlurmdLogFile={root / 'log' / 'slurmd.log'}\n"
        "SlurmctldDebug=info\nSlurmdDebug=info\n"
        "ProctrackType=proctrack/linuxproc\nTaskPlugin=task/none\n"
        # CPUs only: with memory consumable a job without --mem would take the whole node.
        "SelectType=select/cons_tres\nSelectTypeParameters=CR_CPU\n"
        "MpiDefault=none\nReturnToService=2\n"
        "JobAcctGatherType=jobacct_gather/none\nAccountingStorageType=accounting_storage/none\n"
        # A cancelled job's processes get SIGKILL 2 s after SIGTERM (submitit's job ignores SIGTERM).
        "KillWait=2\n"
        f"NodeName={node} NodeAddr=127.0.0.1 CPUs={cpus} RealMemory={memory} State=UNKNOWN\n"
        f"PartitionName=debug Nodes={node} Default=YES MaxTime=INFINITE State=UP\n"
    )


class ClusterUnavailable(Exception):
    """A cluster cannot start here; the message says what failed."""


@pytest.fixture(scope="session")
def slurm_cluster() -> Iterator[SlurmCluster]:
    """A single-node Slurm cluster on localhost, with ``SLURM_CONF`` exported (see the module docstring);
    skips the test, with the reason, where none can start."""
    try:
        with running_cluster() as cluster:
            yield cluster
    except ClusterUnavailable as why:
        pytest.skip(str(why))


@contextlib.contextmanager
def running_cluster() -> Iterator[SlurmCluster]:
    """Start a cluster (see the module docstring), export ``SLURM_CONF``, and stop it all on exit.

    Raises:
        ClusterUnavailable: it cannot start here (before the body runs; what started is stopped).
    """
    missing = [name for name in BINARIES if shutil.which(name) is None]
    if missing:
        raise ClusterUnavailable(f"no Slurm here: {', '.join(missing)} not on PATH (apt-get install slurm-wlm munge)")
    if os.geteuid() != 0:
        raise ClusterUnavailable("a test Slurm cluster needs root (slurmd runs jobs as their users)")
    root = Path(tempfile.mkdtemp(prefix="ik-slurm-"))  # short: the MUNGE socket's path has a length limit
    procs: list[subprocess.Popen[bytes]] = []
    previous = os.environ.get("SLURM_CONF")
    cluster: SlurmCluster | None = None
    try:
        for sub in ("state", "spool", "log", "munge"):
            (root / sub).mkdir(mode=0o700)
        munge_socket = None
        if not _munge_works():
            if shutil.which("munged") is None:
                raise ClusterUnavailable("no MUNGE daemon runs and munged is not on PATH (apt-get install munge)")
            key = root / "munge" / "munge.key"
            key.write_bytes(os.urandom(1024))
            key.chmod(0o600)
            munge_socket = str(root / "munge" / "munge.socket")
            munged = [
                "munged",
                "--foreground",
                "--force",
                f"--key-file={key}",
                f"--socket={munge_socket}",
                f"--pid-file={root / 'munge' / 'munged.pid'}",
                f"--log-file={root / 'log' / 'munged.log'}",
                f"--seed-file={root / 'munge' / 'munged.seed'}",
            ]
            quiet = {"stdout": subprocess.DEVNULL, "stderr": subprocess.DEVNULL}
            procs.append(subprocess.Popen(munged, **quiet, preexec_fn=_die_with_parent))
            deadline = time.monotonic() + 15
            while not _munge_works(munge_socket):
                if procs[-1].poll() is not None or time.monotonic() > deadline:
                    log = (root / "log" / "munged.log").read_text(errors="replace")[-500:] if (root / "log").exists() else ""
                    raise ClusterUnavailable(f"munged did not start with a fresh key: {log.strip() or 'no log'}")
                time.sleep(0.1)
        cpus, memory = _node_hardware()
        node = socket.gethostname().split(".")[0]
        conf = root / "slurm.conf"
        conf.write_text(_config(root, node, cpus, memory, munge_socket))
        cluster = SlurmCluster(root=root, conf=conf, node=node, partition="debug", cpus=cpus)
        env = cluster.env()
        for daemon in (["slurmctld", "-D", "-f", str(conf)], ["slurmd", "-D", "-f", str(conf), "-N", node]):
            procs.append(
                subprocess.Popen(
                    daemon, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, preexec_fn=_die_with_parent
                )
            )
        deadline = time.monotonic() + START_TIMEOUT_S
        state = ""
        while state != "idle":
            dead = [p.args[0] for p in procs if p.poll() is not None]
            if dead or time.monotonic() > deadline:
                why = f"{', '.join(map(str, dead))} exited" if dead else f"the node was not idle after {START_TIMEOUT_S:.0f} s"
                raise ClusterUnavailable(
                    f"the test Slurm cluster did not start ({why}; node state {state or 'unknown'!r}):\n{cluster.logs()}"
                )
            state = cluster.command("sinfo", "--noheader", "--Node", "--format=%T", "--nodes", node, check=False).strip()
            time.sleep(0.2)
        os.environ["SLURM_CONF"] = str(conf)
        yield cluster
    finally:
        if previous is None:
            os.environ.pop("SLURM_CONF", None)
        else:
            os.environ["SLURM_CONF"] = previous
        if cluster is not None and all(p.poll() is None for p in procs):
            # Cancel every job and let slurmd end their steps before it stops (a step outlives slurmd).
            with contextlib.suppress(RuntimeError, OSError, subprocess.SubprocessError):
                cluster.command("scancel", "--user", pwd.getpwuid(os.getuid()).pw_name, check=False)
                deadline = time.monotonic() + DRAIN_TIMEOUT_S
                while time.monotonic() < deadline and any(
                    s not in ("COMPLETED", "CANCELLED", "FAILED", "TIMEOUT", "NODE_FAIL", "OUT_OF_MEMORY", "BOOT_FAIL")
                    for s in cluster.jobs().values()
                ):
                    time.sleep(0.2)
        for proc in reversed(procs):  # slurmd, slurmctld, then munged
            _stop(proc)
        shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":  # a cluster to try things by hand: prints its SLURM_CONF, stops on Ctrl-C or SIGTERM
    signal.signal(signal.SIGTERM, signal.default_int_handler)
    with running_cluster() as running, contextlib.suppress(KeyboardInterrupt):
        print(f"export SLURM_CONF={running.conf}  # node {running.node}, {running.cpus} CPUs, partition {running.partition}")
        print(f"# logs in {running.root / 'log'}", flush=True)
        while True:
            signal.pause()
