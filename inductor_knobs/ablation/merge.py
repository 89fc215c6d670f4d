"""``ablate --merge``: the shards' results.json files of one ablation as one, checked so that a merge
cannot mix what should not be mixed.

**The rules** (:func:`merge`), in this order:

1. The files must be shards of one ablation: the same arm names, in the same order.  Otherwise the
   merge is refused (always).
2. **No run twice.**  A ``run_id`` that appears twice (the same shard given twice, a shard copied into
   another's directory) is refused, always, ``--allow-mixed`` or not.  Runs from before run ids are
   told apart by their content: an identical record twice is the same run.
3. **Fingerprints or nothing.**  A file whose runs carry no ``run_id`` and ``fingerprint`` (written
   before they existed) is refused, unless ``--allow-mixed``: its runs cannot be checked.
4. **Same fingerprints.**  Refused unless ``--allow-mixed``: a run whose ``inductor_knobs``,
   ``torch``, ``triton``, ``cuda``, ``cuda_driver``, ``gpu``, ``gpu_capability``, ``gpu_sms``, a variable
   of ``torch_env`` (``TORCHINDUCTOR_*``, ``TORCH_*``, ``TRITON_*``) or ``workload`` (and so
   ``workload_hash``) differs from the first run's; a run whose ``settings`` (effective knobs, compile
   arguments, eager, emulation) differ from the first run of the same arm; an arm whose settings in
   the files' ``arms`` lists differ, or another workload name; and a job index that ran in two files
   (overlapping shards: the same ``--shard`` run twice).  A field a run does not have (a run whose
   worker reported nothing) is not compared.

The error (:class:`~inductor_knobs.ablation.errors.MergeRefused`) names the files, the run (its id's first 8
characters, arm, repeat) or arm, and each field that differs with both values.  With ``allow_mixed``
the merged results keep every difference in ``mixed`` (the report says the data is mixed and lists
them).  The processes of all shards are concatenated: each is one more replicate of its arm,
whichever machine ran it.  A merge that lacks runs of the ablation (a shard not given, or one that was
interrupted) is ``partial``, and says which shards are missing.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping, Sequence
from typing import Any

from . import fingerprint
from .errors import MergeRefused

#: Differences shown in the error (the rest are counted).
SHOWN = 6

#: The ``field`` of a job index that ran in two files.
OVERLAP = "overlapping shards"

#: A run and the file it came from.
_Where = tuple[str, Mapping[str, Any]]


def _run_label(run: Mapping[str, Any]) -> str:
    run_id = str(run.get("run_id") or "")[:8]
    what = f"{run.get('arm')} repeat {run.get('repeat')}, job {run.get('index')}"
    return f"run {run_id}: {what}" if run_id else f"run {what}"


def _value(file: str, run: str, value: Any) -> dict[str, Any]:
    if value is fingerprint.ABSENT:
        return {"file": file, "run": run, "absent": True}
    return {"file": file, "run": run, "value": value}


def _difference(field: str, arm: str | None, first: tuple[str, str, Any], other: tuple[str, str, Any]) -> dict[str, Any]:
    """One mismatch: ``first`` and ``other`` are ``(file, run or "", value)``."""
    return {
        "field": field,
        "arm": arm,
        "values": [_value(*first), _value(*other)],
    }


def describe(item: Mapping[str, Any]) -> str:
    """One mismatch (an entry of the merged results' ``mixed``) as a phrase.

    Args:
        item (Mapping[str, Any]): ``field``, ``arm`` and two ``values`` (``file``, ``run``, and ``value``
            or ``absent``), or ``file`` and ``note`` for a file that could not be checked.

    Returns:
        str: e.g. ``torch differs: '2.13.0' in a.json (run 0b7c6a3e: eager repeat 0, job 0), '2.12.0'
        in b.json (…)``; a value one side lacks reads ``absent``.
    """
    if "note" in item:
        return f"{item['file']} {item['note']}"
    if item.get("field") == OVERLAP:
        first, other = item["values"]
        return (
            f"{OVERLAP}: job {first.get('value')} ran in {first['file']} ({first.get('run')}) and in {other['file']} "
            f"({other.get('run')})"
        )
    where = [
        ("absent" if v.get("absent") else repr(v.get("value"))) + f" in {v['file']}" + (f" ({v['run']})" if v.get("run") else "")
        for v in item["values"]
    ]
    arm = f"arm {item['arm']!r}: " if item.get("arm") else ""
    return f"{arm}{item['field']} differs: {', '.join(where)}"


def _content_key(run: Mapping[str, Any]) -> str:
    return "content:" + hashlib.sha256(json.dumps(run, sort_keys=True, default=str).encode()).hexdigest()


def _check_arms(parts: Sequence[Mapping[str, Any]], sources: Sequence[str]) -> list[dict[str, Any]]:
    """Rule 1, and the arms' settings and the workload name of each file against the first's."""
    names = [a.get("name") for a in parts[0]["arms"]]
    mixed = []
    for part, source in zip(parts[1:], sources[1:]):
        theirs = [a.get("name") for a in part["arms"]]
        if theirs != names:
            raise MergeRefused(
                f"--merge: {source} is not a shard of the ablation in {sources[0]}: its arms are {theirs}, there {names}; "
                "merge the shards of one ablation (the same arms), whatever --allow-mixed says"
            )
        if part.get("workload") != parts[0].get("workload"):
            first, other = (sources[0], "", parts[0].get("workload")), (source, "", part.get("workload"))
            mixed.append(_difference("workload", None, first, other))
        for mine, their in zip(parts[0]["arms"], part["arms"]):
            for key in ("knobs", "compile_args", "eager", "emulate"):
                a, b = mine.get(key) or None, their.get(key) or None
                if a != b:
                    mixed.append(_difference(f"arms.{key}", mine.get("name"), (sources[0], "", a), (source, "", b)))
    return mixed


def _check_runs(parts: Sequence[Mapping[str, Any]], sources: Sequence[str], allow_mixed: bool) -> list[dict[str, Any]]:
    """Rules 2 to 4 over every run of every file."""
    seen: dict[str, _Where] = {}
    mixed: list[dict[str, Any]] = []
    for part, source in zip(parts, sources):
        unchecked = [r for r in part["runs"] if not r.get("run_id") or not isinstance(r.get("fingerprint"), dict)]
        for run in part["runs"]:
            key = str(run["run_id"]) if run.get("run_id") else _content_key(run)
            if key in seen:
                where = f"twice in {source}" if seen[key][0] == source else f"in {seen[key][0]} and in {source}"
                raise MergeRefused(
                    f"--merge: {_run_label(run)} is {where}: the same run counted twice (the same shard given twice?); "
                    "give each shard's results.json once (--allow-mixed does not allow duplicates)"
                )
            seen[key] = (source, run)
        if unchecked:
            if not allow_mixed:
                raise MergeRefused(
                    f"--merge: {source} predates run fingerprints ({len(unchecked)} of its {len(part['runs'])} runs have no "
                    "run_id and fingerprint), so what it ran on cannot be checked against the other files: rerun that "
                    "shard with this inductor-knobs, or add --allow-mixed to merge it unchecked"
                )
            mixed.append({"file": source, "note": "predates run fingerprints: its runs were not checked"})
    mixed += _fingerprint_mismatches(parts, sources)
    return mixed


def _fingerprint_mismatches(parts: Sequence[Mapping[str, Any]], sources: Sequence[str]) -> list[dict[str, Any]]:
    """Rule 4: every run's fingerprint against the first run's (machine fields and the workload) and its
    arm's first run's (settings), and job indexes that ran in two files."""
    out: list[dict[str, Any]] = []
    reported: set[tuple[Any, ...]] = set()
    machine: dict[str, _Where] = {}
    arms: dict[Any, _Where] = {}
    indexes: dict[Any, _Where] = {}

    def add(field: str, arm: str | None, first: _Where, other: _Where, a: Any, b: Any) -> None:
        key = (field, arm, repr(a), repr(b), other[0])
        if key not in reported:  # one line per difference and file, not per run
            reported.add(key)
            out.append(_difference(field, arm, (first[0], _run_label(first[1]), a), (other[0], _run_label(other[1]), b)))

    for part, source in zip(parts, sources):
        for run in part["runs"]:
            here = (source, run)
            if "index" in run:
                earlier = indexes.setdefault(run["index"], here)
                if earlier[0] != source:
                    add(OVERLAP, run.get("arm"), earlier, here, run["index"], run["index"])
            fp = run.get("fingerprint")
            if not isinstance(fp, Mapping):
                continue
            for field in (*fingerprint.ENVIRONMENT_FIELDS, "workload"):
                if field in fp:  # against the first run that has it
                    first = machine.setdefault(field, here)
                    for name, a, b in fingerprint.compare(field, first[1]["fingerprint"], fp):
                        add(name, None, first, here, a, b)
            if "settings" in fp:
                first = arms.setdefault(run.get("arm"), here)
                for name, a, b in fingerprint.compare("settings", first[1]["fingerprint"], fp):
                    add(name, run.get("arm"), first, here, a, b)
    return out


def _refuse(mixed: list[dict[str, Any]], option: str, fix: str) -> None:
    """Raise :class:`MergeRefused` naming (up to :data:`SHOWN` of) the fingerprint differences in ``mixed``, if any."""
    differing = [m for m in mixed if "note" not in m]
    if differing:
        shown = "; ".join(describe(m) for m in differing[:SHOWN])
        more = f"; and {len(differing) - SHOWN} more" if len(differing) > SHOWN else ""
        raise MergeRefused(f"{option}: the runs do not share one fingerprint: {shown}{more}. {fix}")


def check_resume(
    kept: Sequence[Mapping[str, Any]], new: Sequence[Mapping[str, Any]], where: str, *, allow_mixed: bool, ran: bool
) -> list[dict[str, Any]]:
    """``--resume``: the kept runs' fingerprints against this run's, as ``--merge`` compares shards (rule 4 of
    the module docstring, with :func:`.fingerprint.compare`): every run against the first run that has each
    field, and each arm's settings against its first run's.

    Args:
        kept (Sequence[Mapping[str, Any]]): the records kept from ``<out>/runs``.
        new (Sequence[Mapping[str, Any]]): this run's records: before the runs, what the parent knows of each
            job's fingerprint (:func:`.job.stamp` of an empty record: workload and settings); after them, the
            records the workers returned (every field).
        where (str): the run store's directory, for the message.
        allow_mixed (bool): ``--allow-mixed``: return the differences instead of refusing.
        ran (bool): ``new`` are finished runs (the message says that they are kept in ``where`` too).

    Returns:
        list[dict[str, Any]]: the differences (results.json's ``mixed``); empty when the runs share one fingerprint.

    Raises:
        MergeRefused: without ``allow_mixed``, a kept run without a fingerprint, or fingerprints that differ
            (the message names each field or variable and both values, with the run and where it is).
    """
    sources = (f"the kept runs in {where}", "this run")
    mixed: list[dict[str, Any]] = []
    unchecked = [r for r in kept if not isinstance(r.get("fingerprint"), dict)]
    if unchecked:
        if not allow_mixed:
            raise MergeRefused(
                f"--resume: {len(unchecked)} of the {len(kept)} kept runs in {where} have no fingerprint, so what they "
                "ran on cannot be checked against this run: start again with --overwrite, or add --allow-mixed to keep "
                "them unchecked"
            )
        mixed.append({"file": sources[0], "note": "have no fingerprints: they were not checked"})
    mixed += _fingerprint_mismatches([{"runs": list(kept)}, {"runs": list(new)}], sources)
    mixed += _compile_threads_mismatch(kept, new, sources)
    if not allow_mixed:
        kept_too = f" This run's records are kept in {where} as well." if ran else ""
        _refuse(
            mixed,
            "--resume",
            "Resuming would pool them in one table: resume under the kept runs' setup (their --compile-threads too), "
            "start again with --overwrite, or add --allow-mixed to pool them on purpose (the report then says the data "
            f"is mixed).{kept_too}",
        )
    return mixed


def _compile_threads_mismatch(
    kept: Sequence[Mapping[str, Any]], new: Sequence[Mapping[str, Any]], sources: Sequence[str]
) -> list[dict[str, Any]]:
    """The workers' Inductor compile threads (each record's ``compile_threads``; not a fingerprint field: they
    change compile seconds only): every kept and new run that recorded them against the first that did, one
    difference per value and side."""
    found: list[dict[str, Any]] = []
    first: tuple[str, Mapping[str, Any]] | None = None
    seen: set[tuple[str, str]] = set()
    for source, records in zip(sources, (kept, new)):
        for record in records:
            if "compile_threads" not in record:
                continue
            value = record["compile_threads"]
            if first is None:
                first = (source, record)
            elif value != first[1]["compile_threads"] and (source, repr(value)) not in seen:
                seen.add((source, repr(value)))
                a = (first[0], _run_label(first[1]), first[1]["compile_threads"])
                found.append(_difference("compile_threads", None, a, (source, _run_label(record), value)))
    return found


def missing_shards(parts: Sequence[Mapping[str, Any]]) -> list[str]:
    """The shards of the ablation that no file is, as ``i/n``.

    Args:
        parts (Sequence[Mapping[str, Any]]): the files' data; ``shard`` is ``[i, n]`` (``--shard i/n``).

    Returns:
        list[str]: e.g. ``["2/3"]``; empty when the files do not all name a shard of the same ``n``.
    """
    given: set[int] = set()
    counts: set[int] = set()
    for part in parts:
        shard = part.get("shard")
        if not (isinstance(shard, (list, tuple)) and len(shard) == 2):
            return []
        given.add(int(shard[0]))
        counts.add(int(shard[1]))
    if len(counts) != 1:
        return []
    (count,) = counts
    return [f"{i}/{count}" for i in range(count) if i not in given]


def merge(
    parts: Sequence[Mapping[str, Any]], sources: Sequence[str] | None = None, *, allow_mixed: bool = False
) -> dict[str, Any]:
    """Merge shard results.json files of one ablation into one (see the module docstring for the rules).

    Each shard's total wall time is kept in ``shard_wall_seconds``, the files in ``merged_files``.

    Args:
        parts (Sequence[Mapping[str, Any]]): the files' data (:func:`.files.read`), at least one.
        sources (Sequence[str] | None): how to name each file in messages (None: ``file 1``, ``file 2``, …).
        allow_mixed (bool): ``--allow-mixed``: merge files whose fingerprints differ, or that have none,
            and list the differences in ``mixed``.

    Returns:
        dict[str, Any]: the merged results: every run, by job index.  ``partial`` is True where a shard was
        interrupted or where runs of the ablation are missing (shards not given): then ``planned_runs`` is
        the whole ablation's count and ``missing_shards`` lists the shards not given (``i/n``).

    Raises:
        MergeRefused: the files are not shards of one ablation; a run appears twice; without
            ``allow_mixed``, a file without fingerprints or fingerprints that differ.
    """
    names = list(sources) if sources is not None else [f"file {i + 1}" for i in range(len(parts))]
    mixed = _check_arms(parts, names) + _check_runs(parts, names, allow_mixed)
    if not allow_mixed:
        _refuse(
            mixed,
            "--merge",
            "Merging would pool them in one table: merge only shards that ran alike, or add --allow-mixed to merge them "
            "on purpose (the report then says the data is mixed)",
        )
    first = parts[0]
    runs = sorted((r for p in parts for r in p["runs"]), key=lambda r: r["index"])
    merged = {**first, "runs": runs, "shard": None, "merged_from": len(parts), "partial": False}
    merged["merged_files"] = names
    merged.pop("planned_runs", None)  # a shard's count, not the merge's
    merged.pop("interrupted", None)
    merged.pop("summary", None)  # recomputed from the merged runs
    merged.pop("mixed", None)
    merged["shard_wall_seconds"] = [p.get("wall_seconds") for p in parts]
    merged.pop("wall_seconds", None)  # one shard's, not the merge's
    for part in parts:  # a shard that was interrupted leaves the merge partial
        if part.get("partial"):
            merged.update(partial=True, interrupted=part.get("interrupted"))
    planned = len(first["arms"]) * int(first.get("repeats") or 0)
    if len({int(r["index"]) for r in runs}) < planned:  # shards not given, or runs a shard did not finish
        merged.update(partial=True, planned_runs=planned)
        missing = missing_shards(parts)
        if missing:
            merged["missing_shards"] = missing
    if mixed:
        merged["mixed"] = mixed
    return merged
