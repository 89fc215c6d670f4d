"""``inductor-knobs ablate``: the subcommand (:func:`run`): ``--compare``, ``--merge``, or an ablation.

Every check (workload and its extra, arms, ``--repeats``, GPUs, ``--out``, ``--plot``'s matplotlib,
the files of ``--compare`` and ``--merge``, ``--executor`` and its Slurm options, submitit, ``--resume``'s
plan) happens before the first worker starts or the first Slurm job is submitted.  While the runs go,
only ``<out>/runs/`` is written (each run's record as it finishes, see :mod:`.store`; ``<out>/slurm/``
holds the Slurm jobs' files); the results files come at the end.  SIGINT and SIGTERM stop the workers
(or cancel the Slurm jobs), keep the finished runs (``results.json`` with ``"partial": true``) and exit
130 / 143 with one line.

**Executors** (``--executor``): ``local`` (the default) runs the workers here; ``slurm`` submits one
Slurm job per run (:mod:`.slurm`).  Both call the same job function, and the records, results.json
and the report are the same.  **Resuming** (``--resume``): the same command on the same ``--out`` runs
only the runs that have no record there or a failed one (:mod:`.store` has the rule).

The options are :mod:`.options`'s, checked by :mod:`.build` (the plan; the main job is
:mod:`.main_job`'s) and :mod:`.outdir` (``--out``).

**Several GPUs, several machines.**  ``--gpus 0,1`` runs one worker per GPU at a time; the records
and results.json are the same as with one GPU, and ``wall_seconds`` (the whole run) makes the two
comparable.  Across nodes, give each node one shard and merge (the merged file concatenates the
shards' processes; each process is one replicate wherever it ran)::

    srun -N4 bash -c 'inductor-knobs ablate --config a.toml --shard $SLURM_NODEID/4 --out shard-$SLURM_NODEID'
    torchrun --nnodes 4 --nproc-per-node 1 ... : each rank runs
        inductor-knobs ablate --config a.toml --shard $RANK/$WORLD_SIZE --out shard-$RANK
    inductor-knobs ablate --merge shard-*/results.json --out merged --plot

(torchrun only launches: the shards do not talk to each other, so ``--nproc-per-node 1`` per node
and ``--gpus`` inside each shard.)
"""

from __future__ import annotations

import argparse
import contextlib
import datetime
import os
import socket
import sys
import time
from collections.abc import Callable
from typing import Any

from ..errors import InvalidKnobValue
from . import compare, files, outdir, report, slurm, store
from .build import build_plan, check_plot
from .errors import REQUIRED, require_extra
from .job import stamp
from .merge import check_resume, merge
from .plan import Plan
from .runner import early_workers, execute
from .signals import Interrupted, signals_ignored, signals_raise
from .workers import Workers


def _results(plan: Plan, conflicts: dict[str, list[str]]) -> dict[str, Any]:
    """results.json before the runs: the plan, the environment, the machine (schema :data:`.files.SCHEMA`)."""
    arms = []
    for arm in plan.arms:
        entry = {**arm.to_dict(), "overrides_mode": conflicts[arm.name]}
        if arm.name in plan.sections:
            entry.update(section=plan.sections[arm.name], baseline=plan.baselines.get(arm.name, plan.baseline))
        arms.append(entry)
    return {
        "schema": files.SCHEMA,
        "workload": plan.workload,
        "device": plan.device,
        "repeats": plan.repeats,
        "iters": plan.iters,
        "quick": plan.quick,
        "smoke": plan.smoke,
        "main_job": plan.main_job,
        "emulation_skipped": plan.emulation_skipped,
        "parallel": plan.parallel,
        "baseline": plan.baseline,
        "arms": arms,
        "shard": list(plan.shard),
        "gpus": list(plan.gpus) if plan.device == "cuda" else [],
        "emulate_sms": plan.emulate,
        "environment": environment(plan),
        "machine": {"host": socket.gethostname(), "cpu_count": os.cpu_count()},
        "started": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        "runs": [],
        "partial": False,
    }


def environment(plan: Plan) -> dict[str, Any]:
    """The torch version and the device's name for results.json, and a ``doctor`` entry that
    :class:`_Doctor` fills before the runs (the report takes seconds: it imports Dynamo and Inductor).

    Args:
        plan (Plan): the ablation.

    Returns:
        dict[str, Any]: ``torch``, ``device_name`` and ``doctor`` (None until filled).
    """
    import torch

    if plan.device == "cuda" and plan.gpus:
        name = torch.cuda.get_device_name(plan.gpus[0])
    elif plan.device == "cuda":  # --executor slurm from a machine without a GPU
        name = "the Slurm jobs' GPUs"
    else:
        name = f"CPU ({torch.backends.cpu.get_cpu_capability()})"
    return {"torch": torch.__version__, "device_name": name, "doctor": None}


#: Seconds the command waits for ``doctor``'s report before the runs (:class:`_Doctor`).
DOCTOR_WAIT_S = 60.0


class _Doctor:
    """``doctor``'s report, from ``python -m inductor_knobs doctor --json`` in a child process started at once.

    It runs while the command sets up and the fork server imports.  The child imports torch, Dynamo and Inductor
    (seconds of CPU), and beside a measuring run it makes that run's latency wrong (the CPU main job, 2 cores,
    torch 2.13: the first run's samples took 64 ms against 2.7 ms while it ran beside them).  So with one run
    compiling at a time (``--parallel 1``: its compile time is taken alone) :meth:`report` is awaited before the
    first run; with several at once (the GPU main job: 9) the runs start at once and the barrier keeps every
    measurement back until the report has come (:meth:`.quiet.Quiet.hold`), which saves the command that wait.
    Not in this process: a thread that used torch leaves C++
    thread-locals (``at::impl::ThreadLocalPythonObjects``) whose destructor takes the GIL after the Python thread
    has ended, and if the command is finishing then, libstdc++ aborts ("terminate called without an active
    exception", seen after a Ctrl-C during the fork server's start).  The child inherits the command's
    environment, so the report is the same.  :meth:`close` kills it if it still runs (a refused or interrupted
    command leaves no process).
    """

    def __init__(self) -> None:
        import subprocess

        command = [sys.executable, "-m", "inductor_knobs", "doctor", "--json"]
        self.proc: subprocess.Popen[str] | None = None
        self.failed: str | None = None
        try:  # bytes that are not UTF-8 (a native library's message) are replaced, never raised
            self.proc = subprocess.Popen(
                command,
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                stdin=subprocess.DEVNULL,
                text=True,
                errors="replace",
            )
        except OSError as err:  # no process could be started: recorded by report()
            self.failed = f"{type(err).__name__}: {err}"

    def report(self) -> dict[str, Any]:
        """Wait (at most :data:`DOCTOR_WAIT_S`) and return the report, or ``{"error": ...}``: a report that fails
        is recorded, never raised, since it must not cost the runs."""
        import json
        import subprocess

        if self.proc is None:
            return {"error": self.failed or "doctor did not start"}
        try:
            out, err = self.proc.communicate(timeout=DOCTOR_WAIT_S)
        except subprocess.TimeoutExpired:
            self.close()
            return {"error": f"doctor did not finish within {DOCTOR_WAIT_S:.0f} s"}
        except Exception as error:  # noqa: BLE001 - see above: recorded, never raised
            self.close()
            return {"error": f"{type(error).__name__}: {error}"}
        try:  # exit status 1 still prints the report (a bad INDUCTOR_KNOBS_* variable): the JSON decides
            report = json.loads(out)
        except ValueError:
            report = None
        if not isinstance(report, dict):
            return {"error": f"RuntimeError: doctor exited {self.proc.returncode} without a report: {err.strip()[-500:]}"}
        return report

    def close(self) -> None:
        """Kill the child if it still runs, and reap it."""
        if self.proc is None:
            return
        if self.proc.poll() is None:
            self.proc.kill()
        self.proc.wait()
        for stream in (self.proc.stdout, self.proc.stderr):
            if stream is not None:
                stream.close()


def run(args: argparse.Namespace) -> int:
    """Run the subcommand.

    Args:
        args (argparse.Namespace): the parsed command line (:func:`.options.add_parser`).

    Returns:
        int: the exit status: 0; 1 if every run failed (or, with ``--strict``, any failed or was NOT
        APPLIED); 128 + the signal's number (130 SIGINT, 143 SIGTERM) when interrupted.

    Raises:
        ExtraMissing: a module of the ``[ablate]`` extra (:data:`.errors.REQUIRED`) is not installed.
        KnobsError: bad input, before any arm runs (the CLI prints it as one line).
    """
    require_extra(REQUIRED, "inductor-knobs ablate")
    try:
        with signals_raise():
            return _run(args)
    except Interrupted as stop:  # before or after the arms ran: nothing to keep
        print(f"inductor-knobs: interrupted by {stop.name}", file=sys.stderr)
        return stop.status


def _run(args: argparse.Namespace) -> int:
    # What the ablation started (its fork server, from the plan on) ends however this returns or raises.
    with contextlib.ExitStack() as started:
        return _run_with(args, started)


def _run_with(args: argparse.Namespace, started: contextlib.ExitStack) -> int:
    if args.compare:
        old, new = (files.read(p, "--compare") for p in args.compare)
        for line in compare.differences(old, new):
            print(f"warning: {line}", file=sys.stderr)
        print(compare.compare(old, new))
        return 0
    entered = time.perf_counter()
    resume = bool(getattr(args, "resume", False))
    if resume and args.merge:
        raise InvalidKnobValue("--resume continues an ablation's runs; --merge runs nothing: give one of the two")
    check_plot(args.plot)
    outdir.check_out(args.out, args.overwrite, resume)
    allow_mixed = bool(getattr(args, "allow_mixed", False))
    if allow_mixed and not args.merge and not resume:
        raise InvalidKnobValue("--allow-mixed is for --merge and --resume (it lets runs with differing fingerprints be pooled)")
    target = outdir.target(args.out, args.overwrite, resume)
    if args.merge:
        parts = [files.read(p, "--merge") for p in args.merge]
        results = merge(parts, args.merge, allow_mixed=allow_mixed)
        if target is not None:
            target.prepare()
    else:
        plan = build_plan(args)
        doctor = _Doctor()
        started.callback(doctor.close)
        # The fork server imports torch, Dynamo, Inductor and the workload's libraries while the rest of
        # the start-up (results.json's environment, the run store) goes on; the first run waits for it.
        workers = started.enter_context(early_workers(plan))
        conflicts = {a.name: a.conflicts() for a in plan.arms}
        for name, items in conflicts.items():
            for item in items:  # shown before anything runs
                print(f"arm {name}: {item} (the knob wins: knob > options > mode > default)", file=sys.stderr)
        results = _results(plan, conflicts)
        # What every worker compiles with (--compile-threads, the default, or the inherited variable; None: Inductor's).
        results["compile_threads"] = workers.compile_threads if workers is not None else None
        jobs = plan.jobs()
        runs = store.RunStore(target.root) if target is not None else None
        if resume and runs is not None:  # the plan is checked here, before anything runs
            kept = runs.begin(jobs, resume=True)
        else:
            if target is not None:
                target.prepare()
            kept = runs.begin(jobs, resume=False) if runs is not None else {}
        todo = [job for job in jobs if int(job["index"]) not in kept]
        if runs is not None and kept:  # what the parent knows of the new runs' fingerprints, before they run
            planned = [stamp({"arm": j["arm"]["name"], "repeat": j["repeat"], "index": j["index"]}, j) for j in todo]
            if workers is not None:  # what every worker will compile with (compile seconds pool in one column)
                planned = [{**record, "compile_threads": workers.compile_threads} for record in planned]
            check_resume(list(kept.values()), planned, runs.path, allow_mixed=allow_mixed, ran=False)
        print(
            f"ablate: workload {plan.workload}, {len(plan.arms)} arms x {plan.repeats} process(es) on "
            f"{results['environment']['device_name']}"
            + (f", {plan.parallel} at once per {'GPU' if plan.device == 'cuda' else 'CPU'}" if plan.parallel > 1 else "")
            + (f", shard {plan.shard[0]}/{plan.shard[1]}" if plan.shard[1] > 1 else "")
            + (", one Slurm job per run" if plan.executor == "slurm" else "")
            + (f"; resuming: {len(kept)} of {len(jobs)} runs kept, {len(todo)} to run" if resume else "")
            + (f"; the earlier results in {target.out} stay until this run succeeds" if target and target.staged else ""),
            file=sys.stderr,
        )
        results["executor"] = plan.executor
        if resume:
            results["resumed_runs"] = len(kept)
        start = time.perf_counter()
        results["setup_seconds"] = start - entered
        try:

            def report_doctor() -> None:
                results["environment"]["doctor"] = doctor.report()

            # Several compiling at once: the runs start now, and none measures before the report (see _Doctor).
            beside = plan.executor == "local" and plan.parallel > 1
            if not beside:
                report_doctor()
                start = time.perf_counter()  # the runs' clock: waiting for the report is set-up
                results["setup_seconds"] = start - entered
            fresh = _execute(plan, args.out, todo, runs, results, workers, report_doctor if beside else None)
        except Interrupted as stop:
            with signals_ignored():  # a second Ctrl-C must not lose the finished runs
                if results["environment"].get("doctor") is None:
                    results["environment"]["doctor"] = {"error": f"interrupted by {stop.name} before the report came"}
                results["wall_seconds"] = time.perf_counter() - start
                done = sorted([*kept.values(), *stop.runs], key=lambda r: r["index"])
                if runs is not None and kept:  # the finished runs are kept: say whether they differ, never refuse
                    _mixed(results, check_resume(list(kept.values()), stop.runs, runs.path, allow_mixed=True, ran=True))
                return _interrupted(target, results, Interrupted(stop.signum, done, len(jobs)))
        if runs is not None and kept:  # the workers' fingerprints: every field (versions, GPU, torch variables)
            _mixed(results, check_resume(list(kept.values()), fresh, runs.path, allow_mixed=allow_mixed, ran=True))
        results["runs"] = sorted([*kept.values(), *fresh], key=lambda r: r["index"])
        results["wall_seconds"] = time.perf_counter() - start
    print(report.markdown(results))
    for warning in report.load_warnings(results):
        print(f"warning: {warning}", file=sys.stderr)
    failed = [r for r in results["runs"] if not r.get("ok") or r.get("not_applied")]
    crashed = [r for r in results["runs"] if not r.get("ok")]
    status = 1 if results["runs"] and (len(crashed) == len(results["runs"]) or (args.strict and failed)) else 0
    if target is not None:
        _write(target, results, args.plot, status)
    return status


def _mixed(results: dict[str, Any], mixed: list[dict[str, Any]]) -> None:
    """Keep ``--resume --allow-mixed``'s differences in results.json's ``mixed`` (the report's MIXED DATA)."""
    if mixed:
        results["mixed"] = mixed


def _write(target: outdir.Target, results: dict[str, Any], plot: bool, status: int) -> None:
    """Write the results files into ``target`` and, for a staged ``--overwrite`` that succeeded
    (``status`` 0), publish them over the earlier results (:mod:`.outdir`)."""
    writing = time.perf_counter()
    written = files.write(results, target.root, plot=plot)
    if target.staged and status == 0:
        written = target.publish(written)
    for path in written:
        print(f"wrote {path}", file=sys.stderr)
    print(
        f"(writing the results{' and the plot' if plot else ''} took {time.perf_counter() - writing:.1f} s)",
        file=sys.stderr,
    )
    if target.staged and status != 0:
        print(
            f"the earlier results in {target.out} are unchanged (this run exited {status}); its results are in "
            f"{target.root}, and --resume runs its failed runs again and replaces the earlier results if it succeeds",
            file=sys.stderr,
        )


def _execute(
    plan: Plan,
    out: str | None,
    jobs: list[dict[str, Any]],
    runs: store.RunStore | None,
    results: dict[str, Any],
    workers: Workers | None = None,
    before_measuring: Callable[[], Any] | None = None,
) -> list[dict[str, Any]]:
    """Run ``jobs`` with ``plan.executor``; every record is kept in ``runs`` as it finishes.

    The two executors differ only in where :func:`.job.call_job` runs: here, in one thread per GPU
    (:func:`.runner.execute`), or in one Slurm job per run (:func:`.slurm.execute`, which also fills
    ``results["slurm"]`` with its options, folder and job ids).

    Args:
        plan (Plan): the ablation.
        out (str | None): ``--out`` (the Slurm executor's ``<out>/slurm``).
        jobs (list[dict[str, Any]]): the jobs to run.
        runs (store.RunStore | None): where every record is kept as it finishes, or None.
        results (dict[str, Any]): results.json's data (``slurm`` is added for the Slurm executor).
        workers (Workers | None): the local executor's workers, their fork server started early
            (:func:`.runner.early_workers`), or None.
        before_measuring (Callable[[], Any] | None): the local executor runs it beside the first compiles, and no
            run measures before it has returned (:func:`.runner.execute`); the Slurm executor, before the jobs.

    Returns:
        list[dict[str, Any]]: the new records, by job index.

    Raises:
        Interrupted: SIGINT or SIGTERM (the workers stopped, the Slurm jobs cancelled).
        SlurmSubmitFailed: ``sbatch`` refused the jobs.
    """
    save = runs.save if runs is not None else None
    if plan.executor != "slurm":
        return execute(plan, jobs=jobs, on_record=save, workers=workers, before_measuring=before_measuring)
    if before_measuring is not None:
        before_measuring()
    assert out is not None and plan.slurm is not None  # build_plan requires both for the Slurm executor
    folder = os.path.abspath(os.path.join(out, "slurm"))
    submitted = slurm.SlurmRun()
    results["slurm"] = {"options": plan.slurm.to_dict(), "folder": folder, "job_ids": {}}
    try:
        return slurm.execute(plan, folder, jobs=jobs, on_record=save, run=submitted)
    finally:
        results["slurm"]["job_ids"] = {str(index): job for index, job in sorted(submitted.job_ids.items())}


def _interrupted(target: outdir.Target | None, results: dict[str, Any], stop: Interrupted) -> int:
    """Report and keep the runs that finished before ``stop`` (in ``target.root``: a staged ``--overwrite``
    leaves the earlier results as they were).

    Args:
        target (outdir.Target | None): where the results go, or None without ``--out``.
        results (dict[str, Any]): results.json's data so far.
        stop (Interrupted): the signal, with the finished runs.

    Returns:
        int: the exit status (128 + the signal's number).
    """
    results.update(runs=stop.runs, partial=True, interrupted=stop.name, planned_runs=stop.planned)
    if stop.runs:
        print(report.markdown(results))
    # No plot: whoever pressed Ctrl-C wants the prompt back, not a matplotlib import.
    paths = files.write(results, target.root) if target is not None else []
    where = f"; partial results in {paths[0]}" if paths else ""
    if target is not None and target.staged:
        where += f"; the earlier results in {target.out} are unchanged"
    print(
        f"inductor-knobs: interrupted by {stop.name}: {len(stop.runs)} of {stop.planned} runs finished, "
        f"{'Slurm jobs cancelled' if results.get('executor') == 'slurm' else 'workers stopped'}{where}"
        + ("; --resume runs the rest" if target is not None else ""),
        file=sys.stderr,
    )
    return stop.status
