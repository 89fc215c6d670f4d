"""The README's main-job table from one or more results.json files of the main job:

python bench/results/ablate-h100-bert-main/table.py bench/results/ablate-h100-bert-main/run*/results.json
"""

import json
import sys

from inductor_knobs.ablation import report, summary


def ratio(row, key):  # the report's own formatting (an interval that excludes 1.00x never prints as [1.00–...])
    if key not in row:
        return "-"
    return report._interval(row[key], row.get(f"{key}_low"), row.get(f"{key}_high"), ".2f", "x")


print(
    "| run | GPU class | GPU kernel ms gated / forced | kernel speedup [95% CI] | latency ms gated / forced "
    "| latency speedup [95% CI] | cold compile s gated / forced |"
)
print("|---|---|---|---|---|---|---|")
for path in sys.argv[1:]:
    data = json.load(open(path))
    label = path.split("/")[-2]
    rows = {r["arm"]: r for r in summary.summarize(data)}
    for name, row in rows.items():
        if not name.startswith("force_gemm_autotune"):
            continue
        base = rows[row["baseline"]]
        section = (row.get("section") or "").split(" (")[0].replace("this GPU", "this GPU, A/A control")
        print(
            f"| {label} | {section} | {base['kernel_ms']:.3f} / {row['kernel_ms']:.3f} | "
            f"{ratio(row, 'kernel_speedup')} {row.get('kernel_verdict', '')} | "
            f"{base['median_ms']:.2f} / {row['median_ms']:.2f} | "
            f"{ratio(row, 'speedup')} {row.get('verdict', '')} | {base['compile_seconds']:.0f} / {row['compile_seconds']:.0f} |"
        )
