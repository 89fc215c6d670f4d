"""The files an ablation writes into ``--out`` (:func:`write`: results.json, results.csv, results.md and
results.png) and reads back for ``--compare`` and ``--merge`` (:func:`read`, :func:`check`).

results.json keeps everything raw (every run's samples, load readings, attestations) plus the
``summary`` rows of :mod:`.summary`; ``schema`` is :data:`SCHEMA` (files without the key are schema 1,
from before per-process statistics, and still load for ``--compare`` and ``--merge``).
"""

from __future__ import annotations

import csv
import json
import math
import os
import re
from collections.abc import Mapping, Sequence
from typing import Any

from ..errors import InvalidKnobValue
from ..ext import atomic_write, write_json
from . import explain
from .report import markdown
from .summary import summarize

#: Every file :func:`write` may write into ``--out`` (what ``--overwrite`` replaces, see :mod:`.outdir`).
OUTPUT_FILES = ("results.json", "results.csv", "results.md", "results.png")

#: The keys :func:`summarize`, :func:`markdown`, :func:`compare` and :func:`merge` read.
REQUIRED_KEYS = ("workload", "baseline", "repeats", "arms", "runs")

#: results.json format: 2 adds per-process statistics, sections, load readings, kernel time and
#: the total wall time.  A newer file than this module reads is refused.
SCHEMA = 2

CSV_COLUMNS = [
    "section",
    "arm",
    "baseline",
    "median_ms",
    "median_low_ms",
    "median_high_ms",
    "speedup",
    "speedup_low",
    "speedup_high",
    "verdict",
    "processes",
    "n",
    "kernel_ms",
    "kernel_speedup",
    "kernel_speedup_low",
    "kernel_speedup_high",
    "kernel_verdict",
    "compile_seconds",
    "autotune_seconds",
    "peak_memory_mib",
    "max_abs_diff",
    "mismatch",
    "not_applied",
    "gemm_kernels",
    "runs",
    "failed",
    "error",
]


def _csv_row(row: Mapping[str, Any]) -> dict[str, Any]:
    return {**row, "gemm_kernels": explain.gemm_summary(row.get("gemm_calls") or {}) if "median_ms" in row else ""}


def write(results: dict[str, Any], out: str, plot: bool = False) -> list[str]:
    """Write results.json (everything, raw samples included), results.csv (one row per arm),
    results.md (the report) and, with ``plot``, results.png; each whole or not at all (a temporary file
    in ``out``, then :func:`os.replace`: :func:`~inductor_knobs.ext.atomic_write`).

    Args:
        results (dict[str, Any]): the results (schema :data:`SCHEMA` is added).
        out (str): the directory (made if missing).
        plot (bool): also draw results.png.

    Returns:
        list[str]: the paths written.

    Raises:
        OSError: a file could not be written (the earlier files are whole; that file is as it was).
        ExtraMissing: ``plot`` without matplotlib (the command checks this before running).
    """
    os.makedirs(out, exist_ok=True)
    rows = summarize(results)
    written = [os.path.join(out, "results.json"), os.path.join(out, "results.csv"), os.path.join(out, "results.md")]
    write_json(written[0], {"schema": SCHEMA, **results, "summary": rows}, indent=2)
    with atomic_write(written[1], newline="") as dst:
        writer = csv.DictWriter(dst, fieldnames=CSV_COLUMNS, extrasaction="ignore")
        writer.writeheader()
        writer.writerows(_csv_row(r) for r in rows)
    with atomic_write(written[2]) as dst:
        dst.write(markdown(results, rows) + "\n")
    if plot:
        from .plot import plot as draw

        where = (results.get("environment") or {}).get("device_name") or results.get("device")
        title = f"{results['workload']} on {where}"
        if results.get("emulate_sms") or any(a.get("emulate") for a in results.get("arms", [])):
            title += "\n" + explain.EMULATION_MEANS
        png = os.path.join(out, "results.png")
        written.append(draw(rows, png, title, str(results.get("device") or "cuda")))
    return written


#: A successful run's numbers that the summary reads (each >= 0; ``samples_ms`` is checked apart).
RUN_NUMBERS = ("compile_seconds", "autotune_seconds", "peak_memory_bytes", "max_abs_diff")


def _number(value: Any) -> float | None:
    return float(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else None


def _run_problem(run: Any, arms: Sequence[Any]) -> str | None:
    """What is wrong with one record of ``runs`` (a phrase naming the key, the value and what is allowed), or None."""
    if not isinstance(run, dict):
        return f"a JSON {type(run).__name__}, not an object"
    index = run.get("index")
    if not isinstance(index, int) or isinstance(index, bool) or index < 0:
        return (f"index = {index!r}" if "index" in run else "no index") + ": allowed the job's index, an int >= 0"
    if run.get("arm") not in arms:
        return f"arm = {run.get('arm')!r}: allowed one of the file's arms {list(arms)}"
    if not run.get("ok"):
        return None
    samples = run.get("samples_ms")
    if not isinstance(samples, list) or not samples:
        return f"samples_ms = {samples!r}: allowed a non-empty list of latencies in ms (the run is ok)"
    bad = [v for v in samples if not 0 < (_number(v) or 0.0) < math.inf]
    if bad:
        return f"samples_ms holds {bad[0]!r}: allowed latencies in ms > 0 and finite"
    for key in RUN_NUMBERS:
        number = _number(run.get(key))
        if number is None or number < 0:
            return f"{key} = {run.get(key)!r}: allowed a number >= 0 (the run is ok)"
    if "mismatch" not in run:
        return "no mismatch: allowed true or false (the run is ok)"
    return None


def record_lines(text: str) -> list[int]:
    """The line (1-based) on which each element of the top-level ``runs`` array of a JSON text starts.

    Args:
        text (str): a results.json's text (already known to parse).

    Returns:
        list[int]: one line per record, in order; empty where the text has no top-level ``runs`` array.
    """
    decoder = json.JSONDecoder()
    ws = re.compile(r"\s*")

    def skip(pos: int) -> int:
        match = ws.match(text, pos)
        return match.end() if match else pos

    pos = skip(0)
    if text[pos : pos + 1] != "{":
        return []
    pos = skip(pos + 1)
    while text[pos : pos + 1] == '"':
        key, pos = decoder.raw_decode(text, pos)
        pos = skip(skip(pos) + 1)  # past the colon
        if key != "runs" or text[pos : pos + 1] != "[":
            pos = skip(decoder.raw_decode(text, pos)[1])
            pos = skip(pos + 1) if text[pos : pos + 1] == "," else pos
            continue
        lines, pos = [], skip(pos + 1)
        while text[pos : pos + 1] not in ("]", ""):
            lines.append(text.count("\n", 0, pos) + 1)
            pos = skip(decoder.raw_decode(text, pos)[1])
            pos = skip(pos + 1) if text[pos : pos + 1] == "," else pos
        return lines
    return []


def check(data: Any, source: str, text: str | None = None) -> dict[str, Any]:
    """``data`` if it looks like a results.json that this module can read: its keys, its schema, and every
    record of ``runs`` (an object with an int ``index`` >= 0 and one of the file's arms; a successful one
    with positive finite ``samples_ms`` and the numbers :func:`.summary.summarize` reads).

    Args:
        data (Any): the parsed JSON.
        source (str): what to name in the error, e.g. ``--compare 'old/results.json'``.
        text (str | None): the file's text, so that a bad record is named by its line; None: by its place
            in ``runs`` only.

    Returns:
        dict[str, Any]: ``data``.

    Raises:
        InvalidKnobValue: not an object, a required key missing, a newer schema than :data:`SCHEMA`, or a
            malformed record (the message names the record's place in ``runs``, its line, the key and value).
    """
    if not isinstance(data, dict):
        raise InvalidKnobValue(f"{source} is not an ablation results.json: a JSON {type(data).__name__}, not an object")
    missing = [k for k in REQUIRED_KEYS if k not in data]
    if missing or not isinstance(data["runs"], list) or not isinstance(data["arms"], list):
        raise InvalidKnobValue(
            f"{source} is not an ablation results.json: "
            + (f"missing {', '.join(missing)}" if missing else "'runs' and 'arms' must be lists")
            + f"; allowed: what `inductor-knobs ablate --out` writes ({', '.join(REQUIRED_KEYS)}, ...)"
        )
    schema = data.get("schema", 1)
    if not isinstance(schema, int) or schema > SCHEMA:
        raise InvalidKnobValue(
            f"{source} has results schema {schema!r}: allowed 1..{SCHEMA}; it was written by a newer inductor-knobs"
        )
    arms = [a.get("name") if isinstance(a, dict) else a for a in data["arms"]]
    for place, run in enumerate(data["runs"]):
        problem = _run_problem(run, arms)
        if problem is not None:
            lines = record_lines(text) if text is not None else []
            line = f" (line {lines[place]})" if place < len(lines) else ""
            raise InvalidKnobValue(
                f"{source}: record runs[{place}]{line} is malformed: {problem}; fix or remove that record (the file is "
                "not as `inductor-knobs ablate --out` wrote it)"
            )
    return data


def read(path: str, option: str) -> dict[str, Any]:
    """Read one results.json named by ``--compare`` or ``--merge``.

    Args:
        path (str): the file.
        option (str): the option that names it, for the message (``--merge``).

    Returns:
        dict[str, Any]: its data, checked with :func:`check`.

    Raises:
        InvalidKnobValue: unreadable, not JSON, or not an ablation's results (the message names the file).
    """
    source = f"{option} {path!r}"
    try:
        with open(path, encoding="utf-8") as src:
            text = src.read()
        data = json.loads(text)
    except OSError as err:
        raise InvalidKnobValue(f"{source} cannot be read: {err.strerror or err}") from err
    except ValueError as err:  # JSONDecodeError and UnicodeDecodeError
        raise InvalidKnobValue(f"{source} is not JSON ({err}): allowed a results.json written by ablate --out") from err
    return check(data, source, text)
