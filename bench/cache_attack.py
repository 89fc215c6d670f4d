"""Race a symbolic-link swap against ``load_compile_cache``: how many attacker payloads reach torch?

    sudo python bench/cache_attack.py [--loads 3000] [--out bench/results/cache-attack]

The attack the fix closes: a name ``load_compile_cache`` is given sits where another user (here
uid 65534, ``nobody``: a forked process that drops to that user) can write, and that user swaps
a symbolic link between a benign cache file (ours, private, valid) and their own cache file (a
different payload, with a header and sha256 that match: anyone can compute those).  The code before
the fix ``stat``-ed the name, checked the directory of the *resolved* path, then opened the name
again, so a swap between the check and the open handed the attacker's payload (pickles, i.e. code)
to ``torch.compiler.load_cache_artifacts``.

Each scenario calls the loader ``--loads`` times in the main thread while the attacker process
swaps the link in a tight loop, and is run twice: with the code from before the fix (reproduced
below as :func:`legacy_load`: the same checks in the same order, messages shortened) and with
:func:`inductor_knobs.load_compile_cache`.  ``torch.compiler.load_cache_artifacts`` is replaced by
a recorder that notes which payload reached it and returns a one-artifact ``CacheInfo``-like
object (nothing is unpickled), and ``compile_cache.identity`` is computed once and reused (it reads
package metadata on every call; both implementations call it after the file is read, so caching it
only shortens the loop and leaves the check-to-open window as it is).

Scenarios (the attacker runs as uid/gid 65534):

- ``group-writable dir``: the name is a link in a directory owned by root, group 65534, mode 0775;
- ``sticky dir, link as file``: the name is a link the attacker owns in a sticky 1777 directory
  (like /tmp; ``fs.protected_symlinks`` is recorded, as it decides whether the kernel follows it);
- ``sticky dir, link as ancestor``: the *directory* component is the attacker's link, swapped
  between our private directory and the attacker's, each holding a ``compile.cache``;
- ``control``: our private file named directly, no attacker: every load must reach torch, so the
  zeros above are refusals, not a broken loader;
- ``allow_unsafe=True`` on the sticky-dir link: the documented opt-out, shown to be exactly that.

Needs root (to run the attacker as another user and give it its files).  Writes
``cache_attack.json`` and ``cache_attack.md`` under ``--out``.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import platform
import shutil
import signal
import stat
import tempfile
import time
import types
from pathlib import Path
from typing import Any, Callable

import torch

import inductor_knobs as ik
from inductor_knobs.serving import compile_cache
from inductor_knobs.serving.errors import CompileCacheRefused

ATTACKER = 65534
BENIGN_PAYLOAD = b"BENIGN: the artifacts this user saved"
ATTACKER_PAYLOAD = b"ATTACKER: pickles that run the other user's code"


def start_attacker(link: str, a: str, b: str) -> tuple[int, int]:
    """Fork the attacker: it drops to uid/gid 65534, then swaps ``link`` between ``a`` and ``b``.

    A fork rather than a new interpreter: uid 65534 may not be able to execute this Python (it
    often lives under root's 0700 home).  Each swap is atomic (symlink to a temporary name, rename
    over the link), so the name always exists.  On SIGTERM the child writes how many swaps it
    made to the pipe and exits.

    Returns:
        (pid, read end of the pipe), after the child said it is ready.
    """
    read_end, write_end = os.pipe()
    pid = os.fork()
    if pid == 0:  # the attacker
        try:
            os.close(read_end)
            os.setgroups([])
            os.setgid(ATTACKER)
            os.setuid(ATTACKER)
            tmp = os.path.join(os.path.dirname(link), f".swap-{os.getpid()}")
            swaps = 0

            def stop(*_: Any) -> None:
                os.write(write_end, f"{swaps}\n".encode())
                os._exit(0)

            signal.signal(signal.SIGTERM, stop)
            os.write(write_end, b"ready\n")
            while True:
                for target in (a, b):
                    os.symlink(target, tmp)
                    os.replace(tmp, link)
                    swaps += 1
        except BaseException as err:  # noqa: BLE001 - report anything, then leave the fork
            os.write(write_end, f"failed {err!r}\n".encode())
            os._exit(1)
    os.close(write_end)
    ready = _read_line(read_end)
    if ready != "ready":
        raise SystemExit(f"the attacker process did not start: {ready}")
    return pid, read_end


def _read_line(fd: int) -> str:
    data = b""
    while not data.endswith(b"\n"):
        chunk = os.read(fd, 256)
        if not chunk:
            break
        data += chunk
    return data.decode().strip()


def legacy_load(path: str, knobs: Any = None, *, allow_unsafe: bool = False) -> dict[str, Any]:
    """``load_compile_cache`` and ``_check_private`` as they were before the fix (dist/ 0.1.0 wheel)."""
    where = os.fspath(path)
    if not allow_unsafe:
        uid = os.getuid()
        try:
            st = os.stat(where)
        except FileNotFoundError as err:
            raise CompileCacheRefused(f"load_compile_cache({where!r}): no such file") from err
        directory = os.path.dirname(os.path.realpath(where))
        dst = os.stat(directory)
        problems = []
        if st.st_uid != uid:
            problems.append(f"the file is owned by uid {st.st_uid}, not by you (uid {uid})")
        if st.st_mode & (stat.S_IWGRP | stat.S_IWOTH):
            problems.append("the file is writable by group or others")
        if dst.st_uid not in (uid, 0):
            problems.append(f"its directory {directory} is owned by uid {dst.st_uid}")
        if dst.st_mode & (stat.S_IWGRP | stat.S_IWOTH) and not dst.st_mode & stat.S_ISVTX:
            problems.append(f"its directory {directory} is writable by group or others without the sticky bit")
        if problems:
            raise CompileCacheRefused(f"load_compile_cache({where!r}) refused: {'; '.join(problems)}")
    with open(where, "rb") as src:
        magic, header_line, payload = src.readline(), src.readline(), src.read()
    try:
        header = json.loads(header_line) if magic == compile_cache.MAGIC else None
    except ValueError:
        header = None
    if not isinstance(header, dict):
        raise CompileCacheRefused(f"load_compile_cache({where!r}): not an inductor_knobs compile cache file")
    here = compile_cache.identity(compile_cache._knobs_of(knobs))
    if any(header.get(key) != here[key] for key in compile_cache.IDENTITY):
        raise CompileCacheRefused(f"load_compile_cache({where!r}) refused: built for another setup")
    if hashlib.sha256(payload).hexdigest() != header.get("payload_sha256"):
        raise CompileCacheRefused(f"load_compile_cache({where!r}) refused: sha256")
    torch.compiler.load_cache_artifacts(payload)
    return header


def write_cache(path: Path, payload: bytes, owner: int) -> None:
    header = {
        **compile_cache.identity(ik.Knobs()),
        "artifacts": {"inductor": 1},
        "payload_sha256": hashlib.sha256(payload).hexdigest(),
    }
    path.write_bytes(compile_cache.MAGIC + json.dumps(header, sort_keys=True).encode() + b"\n" + payload)
    os.chmod(path, 0o600 if owner == os.geteuid() else 0o644)
    os.chown(path, owner, owner)


def reason(err: BaseException) -> str:
    """A short label for why a load was refused (or failed)."""
    text = str(err)
    for needle, label in (
        ("is a symbolic link", "O_NOFOLLOW: the name is a symbolic link"),
        ("the path goes through the symbolic link", "ancestor is a link owned by uid 65534"),
        ("without the sticky bit", "a directory is writable by others without the sticky bit"),
        ("the directory", "a directory is owned by uid 65534"),
        ("the file is owned by", "the file is owned by uid 65534"),
        ("its directory", "legacy: the resolved directory is unsafe"),
    ):
        if needle in text:
            return label
    return f"{type(err).__name__}: {text[:80]}"


def run_scenario(
    name: str,
    loader: Callable[..., Any],
    path: str,
    swap: tuple[str, str, str] | None,
    loads: int,
    reached: list[bytes],
    **kw: Any,
) -> dict[str, Any]:
    attacker = start_attacker(*swap) if swap is not None else None
    time.sleep(0.05)  # let the first swaps create the link
    reached.clear()
    refusals: dict[str, int] = {}
    start = time.perf_counter()
    for _ in range(loads):
        try:
            loader(path, **kw)
        except (CompileCacheRefused, OSError) as err:
            key = reason(err)
            refusals[key] = refusals.get(key, 0) + 1
    seconds = time.perf_counter() - start
    swaps = None
    if attacker is not None:
        pid, read_end = attacker
        os.kill(pid, signal.SIGTERM)
        swaps = int(_read_line(read_end))
        os.close(read_end)
        os.waitpid(pid, 0)
    benign = sum(p == BENIGN_PAYLOAD for p in reached)
    evil = sum(p == ATTACKER_PAYLOAD for p in reached)
    return {
        "scenario": name,
        "loads": loads,
        "reached_torch": len(reached),
        "benign_reached_torch": benign,
        "attacker_reached_torch": evil,
        "refused_or_failed": loads - len(reached),
        "refusal_reasons": dict(sorted(refusals.items(), key=lambda kv: -kv[1])),
        "attacker_swaps": swaps,
        "seconds": round(seconds, 3),
        "attacked": swap is not None,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--loads", type=int, default=3000)
    parser.add_argument("--out", default=str(Path(__file__).parent / "results" / "cache-attack"))
    args = parser.parse_args()
    if os.geteuid() != 0:
        raise SystemExit("cache_attack.py needs root: it runs the attacker as uid 65534 and gives it its files")

    reached: list[bytes] = []

    def record(payload: bytes) -> Any:
        reached.append(bytes(payload))
        return types.SimpleNamespace(artifacts={"inductor": ["key"]})

    torch.compiler.load_cache_artifacts = record  # type: ignore[assignment]  # nothing is unpickled: only who got through counts
    fixed_identity = compile_cache.identity(ik.Knobs())
    compile_cache.identity = lambda knobs: fixed_identity  # type: ignore[assignment]

    base = Path(tempfile.mkdtemp(prefix="ik-cache-attack-"))
    try:
        base.chmod(0o755)  # root's, not writable by others; the attacker may walk through it
        private = base / "private"  # ours, 0700: the benign file
        private.mkdir(mode=0o700)
        write_cache(private / "compile.cache", BENIGN_PAYLOAD, os.geteuid())
        theirs = base / "attacker"  # the attacker's own directory and file
        theirs.mkdir(mode=0o755)
        os.chown(theirs, ATTACKER, ATTACKER)
        write_cache(theirs / "compile.cache", ATTACKER_PAYLOAD, ATTACKER)
        group_dir = base / "group-writable"
        group_dir.mkdir()
        os.chown(group_dir, 0, ATTACKER)
        group_dir.chmod(0o775)
        sticky = base / "sticky"
        sticky.mkdir()
        sticky.chmod(0o1777)

        benign, evil = str(private / "compile.cache"), str(theirs / "compile.cache")
        scenarios: list[tuple[str, str, tuple[str, str, str] | None, dict[str, Any]]] = [
            ("group-writable dir (0775, group 65534), name is a swapped link", str(group_dir / "compile.cache"),
             (str(group_dir / "compile.cache"), benign, evil), {}),
            ("sticky dir (1777), name is the attacker's swapped link", str(sticky / "compile.cache"),
             (str(sticky / "compile.cache"), benign, evil), {}),
            ("sticky dir (1777), directory component is the attacker's swapped link", str(sticky / "dir" / "compile.cache"),
             (str(sticky / "dir"), str(private), str(theirs)), {}),
            ("control: our private file named directly, no attacker", benign, None, {}),
            ("opt-out: allow_unsafe=True on the sticky-dir link (not a defence)", str(sticky / "compile.cache"),
             (str(sticky / "compile.cache"), benign, evil), {"allow_unsafe": True}),
        ]  # fmt: skip
        rows = []
        for implementation, loader in (
            ("before the fix", legacy_load),
            ("load_compile_cache (fixed)", ik.serving.load_compile_cache),
        ):
            for name, path, swap, kw in scenarios:
                row = run_scenario(name, loader, path, swap, args.loads, reached, **kw)
                row["implementation"] = implementation
                rows.append(row)
                print(
                    f"{implementation:28} | {name:72} | attacker payloads reached torch: {row['attacker_reached_torch']:5}"
                    f" | benign: {row['benign_reached_torch']:5} | swaps: {row['attacker_swaps']}",
                    flush=True,
                )
    finally:
        shutil.rmtree(base, ignore_errors=True)

    try:
        protected_symlinks = Path("/proc/sys/fs/protected_symlinks").read_text().strip()
    except OSError:
        protected_symlinks = "unknown"
    environment = {
        "python": platform.python_version(),
        "torch": torch.__version__,
        "kernel": platform.release(),
        "cpus": os.cpu_count(),
        "loader_uid": os.geteuid(),
        "attacker_uid": ATTACKER,
        "fs.protected_symlinks": protected_symlinks,
        "loads_per_scenario": args.loads,
    }
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    (out / "cache_attack.json").write_text(json.dumps({"environment": environment, "results": rows}, indent=2) + "\n")
    lines = [
        "# Symbolic-link swap race against load_compile_cache",
        "",
        "Produced by `python bench/cache_attack.py` (as root). "
        + ", ".join(f"{k}: {v}" for k, v in environment.items())
        + ". The attacker is a forked process that drops to uid 65534 and swaps a symbolic link in a tight "
        "loop; `torch.compiler.load_cache_artifacts` is replaced by a recorder (nothing is unpickled).",
        "",
        "| implementation | scenario | loads | attacker payloads reached torch | benign reached torch | refused "
        "| link swaps | why refused (count) |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        why = "; ".join(f"{k} ({v})" for k, v in r["refusal_reasons"].items()) or "-"
        swaps = r["attacker_swaps"]
        lines.append(
            f"| {r['implementation']} | {r['scenario']} | {r['loads']} | **{r['attacker_reached_torch']}** | "
            f"{r['benign_reached_torch']} | {r['refused_or_failed']} | {'-' if swaps is None else swaps} | {why} |"
        )
    defended = [r for r in rows if r["implementation"].endswith("(fixed)") and r["attacked"] and "opt-out" not in r["scenario"]]
    lines += [
        "",
        f"Fixed implementation, all defended scenarios: {sum(r['attacker_reached_torch'] for r in defended)} attacker "
        f"payloads reached torch in {sum(r['loads'] for r in defended)} attacked loads.",
        "",
    ]
    (out / "cache_attack.md").write_text("\n".join(lines))
    print(f"wrote {out / 'cache_attack.json'} and {out / 'cache_attack.md'}")


if __name__ == "__main__":
    main()
