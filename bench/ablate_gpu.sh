#!/usr/bin/env bash
# GPU measurements for `inductor-knobs ablate`: the main job on one GPU and on two, real models gated
# vs forced at emulated SM counts and on the full GPU.  Everything goes under $OUT.
#
#   OUT=/path/to/results PYTHONPATH=/path/to/inductor-knobs bash bench/ablate_gpu.sh
#
# Needs: a CUDA machine, torch >= 2.11 for SM emulation, and for "models" transformers and timm.
# No network: models are built from configs with random weights.
#
# Parts (PARTS, default all three; each one runs even if another failed):
#   main    `inductor-knobs ablate` with no arguments on one GPU, timed: the main job (gemm_mlp;
#           default / max-autotune-no-cudagraphs / force_gemm_autotune; plus the same arms on an
#           emulated T4 on a >= 68-SM GPU).  Budget: <= 5 min on one H200.
#   twogpu  the same main job with --gpus on two GPUs: the wall time against `main`'s, same format.
#   allgpus the same main job on every GPU of the host (all CPUs), run right after `main` (which then
#           runs alone on GPU 0 with its lane's CPUs, as on a one-GPU node), never beside it; prints
#           both wall times and every arm's speedup intervals side by side (allgpus.compare.txt).
#   models  for each of MODELS and each section of SECTIONS ("full" or an emulated SM count): arms
#           `gated` (mode=max-autotune-no-cudagraphs) and `forced` (the same mode plus preset
#           force_gemm_autotune, i.e. min_sms lowered to 1), --quick inputs, MODEL_PROCS processes per
#           arm.  On the full GPU both arms autotune (an A/A control: expect "no detectable
#           difference"); below the 68-SM gate only `forced` autotunes GEMMs.  The queue is taken
#           section by section in SECTIONS' order, so the first sections finish first.
#
# Layout: every GPU is a lane with its share of the CPUs (taskset, nproc / GPUs each, so Inductor's
# compile workers of one lane do not slow another's).  With 3 or more GPUs the parts run at once:
# `main` on GPU 0, `twogpu` on GPUs 1,2 (concurrently, so their wall times compare), the other GPUs
# take model sections from the start, and GPUs 0-2 join them when their part ends.  With fewer GPUs
# the parts run one after another.  Nothing starts after DEADLINE_S (from the script's start), every
# ablate is capped at what is left of it, and a capped ablation stops its workers and still writes
# the runs that finished (results.json with "partial": true).
set -uo pipefail

OUT=${OUT:?set OUT to the directory for the results}
PYTHON=${PYTHON:-python}
PARTS=${PARTS:-"main twogpu models"}
MODELS=${MODELS:-"hf:bert-base timm:vit_small_patch16_224 hf:tinyllama-2layer timm:resnet50"}
SECTIONS=${SECTIONS:-"40 full 24 58"}
MODEL_PROCS=${MODEL_PROCS:-3}
DEADLINE_S=${DEADLINE_S:-1500}
MIN_SECTION_S=${MIN_SECTION_S:-120}   # a model section is not started with less time left than this
WORKER_TIMEOUT_S=${WORKER_TIMEOUT_S:-300}
# Appended to every ablate (e.g. EXTRA_ARGS="--device cpu --smoke" for a dry run of this script
# without a GPU; the emulated sections then fail and the others go on).
read -r -a EXTRA <<<"${EXTRA_ARGS:-}"
export HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1  # never reach for the network

mkdir -p "$OUT/models"
status_file="$OUT/status.txt"
queue="$OUT/models/queue.txt"
: >"$status_file"
start=$(date +%s)
end=$((start + DEADLINE_S))
gpu_count=$("$PYTHON" -c 'import torch; print(torch.cuda.device_count())' 2>/dev/null || echo 0)
lanes=$((gpu_count > 0 ? gpu_count : 1))
cpus=$(nproc)
PLOT=()
"$PYTHON" -c 'import matplotlib' 2>/dev/null && PLOT=(--plot)

want() { [[ " $PARTS " == *" $1 "* ]]; }
left() { echo $((end - $(date +%s))); }

cpus_of() {  # cpus_of GPUS: the CPU list of these lanes ("1,2" -> "16-47" on 64 CPUs and 4 GPUs)
    local share=$((cpus / lanes)) list="" g
    [ "$share" -ge 1 ] || { echo "0-$((cpus - 1))"; return; }
    for g in ${1//,/ }; do list+="${list:+,}$((g * share))-$((g * share + share - 1))"; done
    echo "$list"
}

ablate() {  # ablate LABEL GPUS ARGS...: one capped invocation on those lanes, its output in $OUT/LABEL.log
    local label=$1 gpus=$2 limit
    shift 2
    limit=$(left)
    if [ "$limit" -le 0 ]; then
        echo "$label: not started, deadline passed" | tee -a "$status_file"
        return 1
    fi
    local where=()
    [ "$gpu_count" -gt 0 ] && where=(--gpus "$gpus")
    echo "== $label ($(date -u +%T), GPUs $gpus, CPUs $(cpus_of "$gpus"), cap ${limit}s): inductor-knobs ablate $*"
    taskset -c "$(cpus_of "$gpus")" timeout -s TERM -k 60 "$limit" "$PYTHON" -m inductor_knobs ablate \
        --timeout "$WORKER_TIMEOUT_S" "${where[@]}" "$@" ${EXTRA[@]+"${EXTRA[@]}"} >"$OUT/$label.log" 2>&1
    local rc=$?
    echo "$label: exit $rc at $(($(date +%s) - start)) s" | tee -a "$status_file"
    tail -n 25 "$OUT/$label.log"
    return $rc
}

wall() {  # wall RESULTS_JSON: the run's wall_seconds
    "$PYTHON" -c 'import json, sys; print(round(json.load(open(sys.argv[1])).get("wall_seconds", float("nan")), 1))' "$1" 2>/dev/null || echo "?"
}

part_main() {  # part_main GPU
    { time ablate main "$1" --out "$OUT/main" --overwrite ${PLOT[@]+"${PLOT[@]}"}; } 2>"$OUT/main.time"
    local rc=$?
    cat "$OUT/main.time"
    return $rc
}

part_twogpu() {  # part_twogpu GPU,GPU
    { time ablate twogpu "$1" --out "$OUT/twogpu" --overwrite ${PLOT[@]+"${PLOT[@]}"}; } 2>"$OUT/twogpu.time"
    local rc=$?
    echo "main job wall seconds: 1 GPU $(wall "$OUT/main/results.json"), 2 GPUs ($1) $(wall "$OUT/twogpu/results.json")" \
        | tee "$OUT/twogpu.wall.txt"
    return $rc
}

part_allgpus() {  # part_allgpus GPU,GPU,...: the main job on all of them, compared with `main`
    { time ablate allgpus "$1" --out "$OUT/allgpus" --overwrite ${PLOT[@]+"${PLOT[@]}"}; } 2>"$OUT/allgpus.time"
    local rc=$?
    "$PYTHON" - "$OUT/main/results.json" "$OUT/allgpus/results.json" <<'PY' | tee "$OUT/allgpus.compare.txt"
import json, sys

from inductor_knobs.ablation import report, summary

runs = [json.load(open(path)) for path in sys.argv[1:]]
print("wall seconds: 1 GPU", round(runs[0]["wall_seconds"], 1), "| all GPUs", round(runs[1]["wall_seconds"], 1))
rows = [{r["arm"]: r for r in summary.summarize(data)} for data in runs]
for arm in rows[0]:
    cells = []
    for key in ("speedup", "kernel_speedup"):
        for side in rows:
            r = side.get(arm, {})
            cells.append(report._interval(r[key], r.get(f"{key}_low"), r.get(f"{key}_high"), ".2f", "x") if key in r else "-")
    print(f"{arm}: latency 1 GPU {cells[0]} | all {cells[1]}; kernel 1 GPU {cells[2]} | all {cells[3]}")
PY
    return $rc
}

# shellcheck disable=SC2016 # the quoted script expands its own "$1"
next_section() {  # prints and removes the queue's first line ("MODEL SECTION"), or nothing
    flock "$queue.lock" sh -c 'head -n 1 "$1"; sed -i 1d "$1"' _ "$queue"
}

lane() {  # lane GPU: model sections from the queue until it is empty or the deadline is near
    local item model section slug extra
    while [ "$(left)" -ge "$MIN_SECTION_S" ] && item=$(next_section) && [ -n "$item" ]; do
        read -r model section <<<"$item"
        slug=$(echo "$model" | tr ':/' '__')
        extra=()
        [ "$section" != full ] && extra=(--emulate-sms "$section")
        ablate "models-$slug-$section" "$1" --workload "$model" --quick --repeats "$MODEL_PROCS" \
            --arm "gated:mode=max-autotune-no-cudagraphs" \
            --arm "forced:mode=max-autotune-no-cudagraphs,preset=force_gemm_autotune" \
            --baseline gated ${extra[@]+"${extra[@]}"} --out "$OUT/models/$slug-$section" --overwrite \
            ${PLOT[@]+"${PLOT[@]}"}
    done
}

model_table() {  # model_table DIR...: the README's table from DIR/*/results.json (rows sorted by model, GPU)
    "$PYTHON" - "$@" <<'PY'
import json, pathlib, sys

from inductor_knobs.ablation import report, summary


def ratio(row, key):  # the report's own formatting: an interval that excludes 1.00x never prints as [1.00–...]
    if key not in row:
        return "-"
    return report._interval(row[key], row.get(f"{key}_low"), row.get(f"{key}_high"), ".2f", "x")


def order(path):
    data = json.loads(path.read_text())
    sms = str(data.get("emulate_sms") or "")
    return data["workload"], int(sms) if sms.isdigit() else 10**6  # the full GPU after the emulated sections


print("| model | GPU | processes | latency ms gated / forced | latency speedup [95% CI] | GPU kernel ms gated / forced | kernel speedup [95% CI] | compile s gated / forced |")
print("|---|---|---|---|---|---|---|---|")
for path in sorted((p for d in sys.argv[1:] for p in pathlib.Path(d).glob("*/results.json")), key=order):
    data = json.loads(path.read_text())
    rows = {r["arm"]: r for r in summary.summarize(data)}  # today's statistics, also for older files
    gated, forced = rows.get("gated", {}), rows.get("forced", {})
    where = f"emulated {data['emulate_sms']} SMs" if data.get("emulate_sms") else "full GPU"
    procs = f"{gated.get('processes', 0)} / {forced.get('processes', 0)}" + (" (partial)" if data.get("partial") else "")
    if "median_ms" not in gated or "median_ms" not in forced:
        print(f"| {data['workload']} | {where} | {procs} | not run to the end | | | | |")
        continue
    kernel = lambda r: f"{r['kernel_ms']:.3f}" if r.get("kernel_ms") is not None else "-"
    print(
        f"| {data['workload']} | {where} | {procs} | {gated['median_ms']:.2f} / {forced['median_ms']:.2f} | "
        f"{ratio(forced, 'speedup')} {forced.get('verdict', '')} | {kernel(gated)} / {kernel(forced)} | "
        f"{ratio(forced, 'kernel_speedup')} {forced.get('kernel_verdict', '')} | "
        f"{gated['compile_seconds']:.0f} / {forced['compile_seconds']:.0f} |"
    )
PY
}

{
    nvidia-smi || true
    "$PYTHON" -c 'import torch, triton; print("torch", torch.__version__, "triton", triton.__version__)' || true
    echo "CPUs $cpus, GPUs $gpu_count"
    "$PYTHON" -m inductor_knobs doctor || true
} >"$OUT/environment.txt" 2>&1

if want allgpus && [ "$gpu_count" -ge 2 ]; then  # first, and one after the other: their wall times compare
    want main && part_main 0
    part_allgpus "$(seq -s, 0 $((gpu_count - 1)))"
    PARTS=${PARTS//main/}
fi

: >"$queue"
if want models; then
    for section in $SECTIONS; do
        for model in $MODELS; do echo "$model $section" >>"$queue"; done
    done
fi

if [ "$gpu_count" -ge 3 ]; then
    { want main && part_main 0; lane 0; } &
    { want twogpu && part_twogpu 1,2; lane 1 & lane 2; wait; } &
    for ((g = 3; g < gpu_count; g++)); do lane "$g" & done
else
    want main && part_main 0
    want twogpu && [ "$gpu_count" -ge 2 ] && part_twogpu 0,1
    for ((g = 0; g < lanes; g++)); do lane "$g" & done
fi
wait
echo "not run (deadline): $(tr '\n' ';' <"$queue")" | tee -a "$status_file"
model_table "$OUT/models" >"$OUT/models/table.md"
cat "$OUT/models/table.md"
echo "all parts: $(($(date +%s) - start)) s" | tee -a "$status_file"
