"""The files an ablation writes into ``--out`` (:func:`write`: results.json, results.csv, results.md and
results.png) and reads back for ``--compare`` and ``--merge`` (:func:`read`, :func:`check`).

results.json keeps everything raw (every run's samples, load readings, attestations) plus the
``summary`` rows of :mod:`.summary`; ``schema`` is :data:`SCHEMA` (files without the key are schema 1,
from before per-process statistics, and still load for ``--compare`` and ``--merge``).
"""

from __future__ import annotations

import csv
import json
import os
from collections.abc import Mapping
from typing import Any

from ..core._atomic import atomic_write, write_json
from ..errors import InvalidKnobValue
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
    in ``out``, then :func:`os.replace`: :func:`~inductor_knobs.core._atomic.atomic_write`).

    Args:
        results (dict[str, Any]): the results (schema :data:`SCHEMA` is added).
        out (str): the directory (made if missing).
        plot (bool): also draw results.png.

    Returns:
        list[str]: the paths written.

    Raises:
        OSError: a file could not be written (the earlier files are whole; that file is as it was).
        NotSupportedOnThisTorch: ``plot`` without matplotlib (the command checks this before running).
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
        written.append(draw(rows, os.path.join(out, "results.png"), f"{results['workload']} on {where}"))
    return written


def check(data: Any, source: str) -> dict[str, Any]:
    """``data`` if it looks like a results.json that this module can read.

    Args:
        data (Any): the parsed JSON.
        source (str): what to name in the error, e.g. ``--compare 'old/results.json'``.

    Returns:
        dict[str, Any]: ``data``.

    Raises:
        InvalidKnobValue: not an object, a required key missing, or a newer schema than :data:`SCHEMA`.
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
            data = json.load(src)
    except OSError as err:
        raise InvalidKnobValue(f"{source} cannot be read: {err.strerror or err}") from err
    except ValueError as err:  # JSONDecodeError and UnicodeDecodeError
        raise InvalidKnobValue(f"{source} is not JSON ({err}): allowed a results.json written by ablate --out") from err
    return check(data, source)
