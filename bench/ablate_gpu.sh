#!/usr/bin/env bash
# GPU measurements for `inductor-knobs ablate` (issue 13): the main job, real models gated vs forced
# at an emulated 40-SM GPU and on the full GPU, and one GPU against two.  Everything goes under $OUT.
#
#   OUT=/path/to/results PYTHONPATH=/path/to/inductor-knobs bash bench/ablate_gpu.sh
#
# Needs: a CUDA machine (two GPUs for the "twogpu" part), torch >= 2.11 for SM emulation, and for
# "models" transformers and timm.  No network: models are built from configs with random weights.
#
# Parts (PARTS, default all three; each one runs even if another failed):
#   main    `inductor-knobs ablate` with no arguments on one GPU (MAIN_GPUS=0), timed: the main job
#           (gemm_mlp; default / max-autotune-no-cudagraphs / force_gemm_autotune; plus the same arms
#           on an emulated T4 on a >= 68-SM GPU).  Budget: <= 5 min on one H200.
#   models  for each of MODELS: arms `gated` (mode=max-autotune-no-cudagraphs) and `forced` (the same
#           mode plus preset force_gemm_autotune, i.e. min_sms lowered to 1), once on the full GPU
#           (both arms autotune there: an A/A control, expect "no detectable difference") and once
#           at each SM count of EMULATE_SMS (default 40; the README's table wants EMULATE_SMS="24 40 58":
#           all below the 68-SM gate, where only `forced` autotunes GEMMs).
#           --quick inputs, MODEL_PROCS processes per arm, spread over MODEL_GPUS.  The table at the
#           end has the speedups of forced over gated with 95% intervals and the compile times.
#   twogpu  a small ablation with --gpus 0 and with --gpus 0,1; prints both wall times.
#
# Budget (wall clock on a 2 x H200 node, about what one H200 session allows): main ~4 min, models
# ~6 min (2 models x 2 sections x 2 arms x 3 processes, ~30 s each under max-autotune, on 2 GPUs),
# twogpu ~2 min.  Add hf:tinyllama-2layer and timm:resnet50 with MODELS=... when time allows
# (about +3 min each).  Every invocation is capped by PART_LIMIT_S; a capped ablation stops its
# workers and still writes the runs that finished (results.json with "partial": true).
set -uo pipefail

OUT=${OUT:?set OUT to the directory for the results}
PYTHON=${PYTHON:-python}
PARTS=${PARTS:-"main models twogpu"}
MAIN_GPUS=${MAIN_GPUS-0}
MODELS=${MODELS:-"hf:bert-base timm:vit_small_patch16_224"}
MODEL_PROCS=${MODEL_PROCS:-3}
EMULATE_SMS=${EMULATE_SMS:-40}
TWO_GPU_PROCS=${TWO_GPU_PROCS:-4}
PART_LIMIT_S=${PART_LIMIT_S:-600}
WORKER_TIMEOUT_S=${WORKER_TIMEOUT_S:-300}
# Appended to every ablate (e.g. EXTRA_ARGS="--device cpu --smoke" MAIN_GPUS= MODEL_GPUS= for a
# dry run of this script without a GPU; the emulated parts then fail and the others go on).
read -r -a EXTRA <<<"${EXTRA_ARGS:-}"
export HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1  # never reach for the network

mkdir -p "$OUT"
status_file="$OUT/status.txt"
: >"$status_file"
gpu_count=$("$PYTHON" -c 'import torch; print(torch.cuda.device_count())' 2>/dev/null || echo 0)
MODEL_GPUS=${MODEL_GPUS-$([ "$gpu_count" -ge 2 ] && echo 0,1 || echo 0)}
PLOT=()
"$PYTHON" -c 'import matplotlib' 2>/dev/null && PLOT=(--plot)

gpus() {  # gpus LIST: the --gpus option, or nothing for an empty list
    [ -n "$1" ] && echo "--gpus $1"
}

ablate() {  # ablate LABEL ARGS...: one capped invocation, its output in $OUT/LABEL.log
    local label=$1
    shift
    echo "== $label: inductor-knobs ablate $*"
    timeout -s TERM -k 60 "$PART_LIMIT_S" "$PYTHON" -m inductor_knobs ablate --timeout "$WORKER_TIMEOUT_S" "$@" \
        ${EXTRA[@]+"${EXTRA[@]}"} >"$OUT/$label.log" 2>&1
    local rc=$?
    echo "$label exit $rc" | tee -a "$status_file"
    tail -n 25 "$OUT/$label.log"
    return $rc
}

wall() {  # wall RESULTS_JSON: the run's wall_seconds
    "$PYTHON" -c 'import json, sys; print(round(json.load(open(sys.argv[1])).get("wall_seconds", float("nan")), 1))' "$1" 2>/dev/null || echo "?"
}

part_main() {
    # `time` for the budget claim; results.json keeps wall_seconds too.
    # shellcheck disable=SC2046 # gpus prints nothing or two words
    { time ablate main $(gpus "$MAIN_GPUS") --out "$OUT/main" --overwrite ${PLOT[@]+"${PLOT[@]}"}; } 2>"$OUT/main.time"
    local rc=$?
    cat "$OUT/main.time"
    return $rc
}

part_models() {
    local rc=0 model slug
    mkdir -p "$OUT/models"
    for model in $MODELS; do
        slug=$(echo "$model" | tr ':/' '__')
        # shellcheck disable=SC2086 # EMULATE_SMS is a list of SM counts
        for section in full $EMULATE_SMS; do
            local extra=()
            [ "$section" != full ] && extra=(--emulate-sms "$section")
            # shellcheck disable=SC2046 # gpus prints nothing or two words
            ablate "models-$slug-$section" --workload "$model" --quick --repeats "$MODEL_PROCS" $(gpus "$MODEL_GPUS") \
                --arm "gated:mode=max-autotune-no-cudagraphs" \
                --arm "forced:mode=max-autotune-no-cudagraphs,preset=force_gemm_autotune" \
                --baseline gated ${extra[@]+"${extra[@]}"} --out "$OUT/models/$slug-$section" --overwrite \
                ${PLOT[@]+"${PLOT[@]}"} || rc=1
        done
    done
    "$PYTHON" - "$OUT/models" >"$OUT/models/table.md" <<'PY' || rc=1
import json, pathlib, sys

print("| model | GPU | gated ms | forced ms | forced speedup [95% CI] | verdict | compile s gated / forced | GEMM kernels gated / forced |")
print("|---|---|---|---|---|---|---|---|")
for path in sorted(pathlib.Path(sys.argv[1]).glob("*/results.json")):
    data = json.loads(path.read_text())
    rows = {r["arm"]: r for r in data["summary"]}
    gated, forced = rows.get("gated", {}), rows.get("forced", {})
    where = f"emulated {data['emulate_sms']} SMs" if data.get("emulate_sms") else "full GPU"
    if "median_ms" not in gated or "median_ms" not in forced:
        print(f"| {data['workload']} | {where} | {gated.get('error', '-')} | {forced.get('error', '-')} | | | | |")
        continue
    ci = f" [{forced['speedup_low']:.2f}–{forced['speedup_high']:.2f}]" if forced.get("speedup_low") is not None else ""
    calls = lambda r: ", ".join(f"{k}×{v}" for k, v in sorted((r.get("gemm_calls") or {}).items())) or "-"
    print(
        f"| {data['workload']} | {where} | {gated['median_ms']:.3f} | {forced['median_ms']:.3f} | {forced['speedup']:.2f}x{ci} | "
        f"{forced.get('verdict', 'n/a')} | {gated['compile_seconds']:.0f} / {forced['compile_seconds']:.0f} | {calls(gated)} / {calls(forced)} |"
        + (" PARTIAL" if data.get("partial") else "")
    )
PY
    cat "$OUT/models/table.md"
    return $rc
}

part_twogpu() {
    if [ "$gpu_count" -lt 2 ]; then
        echo "twogpu: skipped, $gpu_count GPU(s) visible" | tee -a "$status_file"
        return 0
    fi
    local rc=0 args=(--workload gemm_mlp --quick --repeats "$TWO_GPU_PROCS" --arm default --arm "ma:mode=max-autotune-no-cudagraphs")
    ablate twogpu-1 "${args[@]}" --gpus 0 --out "$OUT/twogpu/1gpu" --overwrite || rc=1
    ablate twogpu-2 "${args[@]}" --gpus 0,1 --out "$OUT/twogpu/2gpu" --overwrite || rc=1
    echo "wall seconds: 1 GPU $(wall "$OUT/twogpu/1gpu/results.json"), 2 GPUs $(wall "$OUT/twogpu/2gpu/results.json")" \
        | tee "$OUT/twogpu/wall.txt"
    return $rc
}

{
    nvidia-smi || true
    "$PYTHON" -c 'import torch, triton; print("torch", torch.__version__, "triton", triton.__version__)' || true
    "$PYTHON" -m inductor_knobs doctor || true
} >"$OUT/environment.txt" 2>&1

start=$(date +%s)
for part in $PARTS; do
    if declare -F "part_$part" >/dev/null; then
        part_start=$(date +%s)
        "part_$part"
        echo "part $part: exit $? after $(($(date +%s) - part_start)) s" | tee -a "$status_file"
    else
        echo "unknown part '$part': allowed main, models, twogpu" | tee -a "$status_file"
    fi
done
echo "all parts: $(($(date +%s) - start)) s" | tee -a "$status_file"
