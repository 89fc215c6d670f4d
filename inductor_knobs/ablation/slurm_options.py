"""The Slurm executor's options, checked before anything is submitted: ``--executor``, the ``--slurm-*``
options and a TOML file's ``[slurm]`` table (:func:`make_options`), and whether Slurm jobs can be
submitted from here at all (:func:`check_available`).  The jobs themselves are :mod:`.slurm`'s.
"""

from __future__ import annotations

import difflib
import re
import shutil
from collections.abc import Mapping
from typing import Any

from ..errors import InvalidKnobValue
from .errors import require_extra
from .plan import SlurmOptions

#: ``--executor`` values.
EXECUTORS = ("local", "slurm")

#: ``sbatch`` options that submitit sets itself for a job array: an extra flag may not replace them.
RESERVED_FLAGS = frozenset({"array", "output", "error", "open-mode", "wrap", "parsable"})

#: The keys of the TOML file's ``[slurm]`` table.
TABLE_KEYS = ("partition", "gpus_per_job", "time", "account", "sbatch")

_FLAG = re.compile(r"^[A-Za-z][A-Za-z0-9_-]*$")


def check_executor(name: Any, source: str) -> str:
    """``name`` if it is one of :data:`EXECUTORS`.

    Args:
        name (Any): what ``--executor`` or the TOML's ``executor`` says.
        source (str): how to name it in an error (``--executor=slurmm``).

    Returns:
        str: ``name``.

    Raises:
        InvalidKnobValue: another value (the message names the closest executor, if any).
    """
    if isinstance(name, str) and name in EXECUTORS:
        return name
    close = difflib.get_close_matches(str(name), EXECUTORS, n=1)
    hint = f"; did you mean {close[0]!r}?" if close else ""
    raise InvalidKnobValue(f"{source} is not an executor: allowed {', '.join(EXECUTORS)}{hint}")


def _text(value: Any, source: str) -> str:
    if not isinstance(value, str) or not value.strip() or any(c.isspace() for c in value.strip()):
        raise InvalidKnobValue(f"{source} is invalid: allowed a name without spaces")
    return value.strip()


def _count(value: Any, source: str, least: int, unit: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < least:
        raise InvalidKnobValue(f"{source} is invalid: allowed an int >= {least} ({unit})")
    return value


def _flag(key: str, value: Any, source: str) -> tuple[str, str | bool]:
    name = key.strip().lstrip("-")
    if not _FLAG.match(name):
        raise InvalidKnobValue(
            f"{source} is invalid: expected KEY=VALUE or KEY with an sbatch option's name, e.g. constraint=a100"
        )
    name = name.replace("_", "-")
    if name in RESERVED_FLAGS:
        raise InvalidKnobValue(
            f"{source} is not allowed: submitit sets --{name} for the job array itself "
            f"(reserved: {', '.join(sorted(RESERVED_FLAGS))})"
        )
    if value is True:
        return name, True
    if isinstance(value, bool) or value is None or (isinstance(value, str) and not value.strip()):
        raise InvalidKnobValue(f"{source} is invalid: give a value (KEY=VALUE), or the bare KEY for a flag without one")
    return name, str(value).strip()


def make_options(
    partition: str | None = None,
    gpus_per_job: int | None = None,
    time_min: int | None = None,
    account: str | None = None,
    flags: list[str] | None = None,
    table: Mapping[str, Any] | None = None,
    table_source: str = "[slurm]",
) -> SlurmOptions:
    """Validate the Slurm options of the command line and of a TOML file's ``[slurm]`` table.

    The command line wins over the table, key by key (and flag by flag for ``sbatch``).

    Args:
        partition (str | None): ``--slurm-partition``.
        gpus_per_job (int | None): ``--slurm-gpus-per-job`` (an int >= 0).
        time_min (int | None): ``--slurm-time``, minutes (an int >= 1).
        account (str | None): ``--slurm-account``.
        flags (list[str] | None): ``--slurm-sbatch-flag`` items: ``KEY=VALUE``, or ``KEY`` for a flag
            without a value.
        table (Mapping[str, Any] | None): the TOML's ``[slurm]`` table (keys :data:`TABLE_KEYS`;
            ``time`` in minutes, ``sbatch`` a table of flags, ``true`` for one without a value), or None.
        table_source (str): how to name the table in an error.

    Returns:
        SlurmOptions: the options.

    Raises:
        InvalidKnobValue: an unknown table key, a bad value, or a reserved or malformed sbatch flag.
    """
    table = dict(table or {})
    unknown = sorted(set(table) - set(TABLE_KEYS))
    if unknown:
        raise InvalidKnobValue(f"{table_source}: unknown keys {unknown}; allowed {', '.join(TABLE_KEYS)}")
    sbatch: dict[str, str | bool] = {}
    extra = table.get("sbatch", {})
    if not isinstance(extra, Mapping):
        raise InvalidKnobValue(
            f"{table_source} sbatch = {extra!r} is invalid: allowed a table of sbatch options, e.g. {{constraint = 'a100'}}"
        )
    for key, value in extra.items():
        name, text = _flag(str(key), value, f"{table_source} sbatch.{key} = {value!r}")
        sbatch[name] = text
    for item in flags or []:
        key, sep, value = item.partition("=")
        name, text = _flag(key, value if sep else True, f"--slurm-sbatch-flag {item!r}")
        sbatch[name] = text

    def pick(cli: Any, key: str, option: str) -> tuple[Any, str]:
        if cli is not None:
            return cli, f"{option}={cli!r}"
        return table.get(key), f"{table_source} {key} = {table.get(key)!r}"

    value, source = pick(partition, "partition", "--slurm-partition")
    part = None if value is None else _text(value, source)
    value, source = pick(account, "account", "--slurm-account")
    acct = None if value is None else _text(value, source)
    value, source = pick(gpus_per_job, "gpus_per_job", "--slurm-gpus-per-job")
    gpus = None if value is None else _count(value, source, 0, "GPUs per job")
    value, source = pick(time_min, "time", "--slurm-time")
    minutes = None if value is None else _count(value, source, 1, "minutes")
    return SlurmOptions(partition=part, gpus_per_job=gpus, time_min=minutes, account=acct, sbatch=sbatch)


def check_available() -> None:
    """Raise unless Slurm jobs can be submitted from here: submitit is installed and ``sbatch`` is on PATH.

    Raises:
        ExtraMissing: submitit is missing (the message names the install).
        InvalidKnobValue: ``sbatch`` is not on PATH.
    """
    require_extra(("submitit",), "--executor slurm", "or --executor local")
    if shutil.which("sbatch") is None:
        raise InvalidKnobValue(
            "--executor slurm needs Slurm's sbatch, which is not on PATH: run the command on a Slurm login node "
            "(with SLURM_CONF set if the cluster's slurm.conf is not the default one); or --executor local"
        )
