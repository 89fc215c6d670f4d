"""``ablate --merge``: the shards' results.json files of one ablation as one."""

from __future__ import annotations

from typing import Any

from ..errors import InvalidKnobValue


def merge(parts: list[dict[str, Any]]) -> dict[str, Any]:
    """Merge shard results.json files of one ablation (same workload and arms) into one.

    The processes of all shards are concatenated: each is one more replicate of its arm, whichever
    machine ran it.  Each shard's total wall time is kept in ``shard_wall_seconds``.

    Raises:
        InvalidKnobValue: the parts come from different ablations.
    """
    first = parts[0]
    for part in parts[1:]:
        if part["workload"] != first["workload"] or part["arms"] != first["arms"]:
            raise InvalidKnobValue("--merge: the files come from different ablations (workload or arms differ)")
    runs = sorted((r for p in parts for r in p["runs"]), key=lambda r: r["index"])
    merged = {**first, "runs": runs, "shard": None, "merged_from": len(parts), "partial": False}
    merged.pop("planned_runs", None)  # a shard's count, not the merge's
    merged.pop("interrupted", None)
    merged.pop("summary", None)  # recomputed from the merged runs
    merged["shard_wall_seconds"] = [p.get("wall_seconds") for p in parts]
    merged.pop("wall_seconds", None)  # one shard's, not the merge's
    for part in parts:  # a shard that was interrupted leaves the merge partial
        if part.get("partial"):
            merged.update(partial=True, interrupted=part.get("interrupted"))
    return merged
