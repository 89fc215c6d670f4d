#!/usr/bin/env bash
# Issue 32 on a GPU host with two GPUs: bench/cold_start.py with the Llama on GPU 0 and BERT-base on GPU 1
# in parallel (each lane pinned to half the CPUs: the cold arm's Inductor compile workers use them), then,
# on GPU 0 once the Llama is done, the serving bundle's GPU test (CUDA graphs captured in the load path,
# Triton on an empty TRITON_CACHE_DIR).  Everything goes under $OUT.  About 5 minutes of wall time.
#
#   OUT=/path/to/results bash bench/cold_start_gpu.sh        # from the repository root
#
# Needs torch >= 2.7 (the cache artifacts API), triton and transformers installed; no network (models
# are built from configs with random weights).
set -uo pipefail
OUT=${OUT:?set OUT to the directory for the results}
PYTHON=${PYTHON:-python3}
mkdir -p "$OUT"
export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}" HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1
{
    nvidia-smi --query-gpu=index,name,driver_version,memory.total --format=csv
    "$PYTHON" -c "import torch, triton, transformers, sys; print('python', sys.version.split()[0], 'torch', torch.__version__, 'triton', triton.__version__, 'cuda', torch.version.cuda, 'transformers', transformers.__version__)"
    echo "CPUs $(nproc)"
} >"$OUT/env.txt" 2>&1
half=$(($(nproc) / 2))
start=$(date +%s)
(
    CUDA_VISIBLE_DEVICES=0 taskset -c "0-$((half - 1))" "$PYTHON" bench/cold_start.py --models llama --out "$OUT/llama" >"$OUT/llama.log" 2>&1
    echo "llama: exit $? after $(($(date +%s) - start)) s" >>"$OUT/status.txt"
    CUDA_VISIBLE_DEVICES=0 taskset -c "0-$((half - 1))" "$PYTHON" -m pytest -q -m gpu tests/test_serving_bundle.py -p no:cacheprovider \
        >"$OUT/gpu-test.log" 2>&1
    echo "gpu test: exit $? after $(($(date +%s) - start)) s" >>"$OUT/status.txt"
) &
(
    CUDA_VISIBLE_DEVICES=1 taskset -c "$half-$(($(nproc) - 1))" "$PYTHON" bench/cold_start.py --models bert --out "$OUT/bert" >"$OUT/bert.log" 2>&1
    echo "bert: exit $? after $(($(date +%s) - start)) s" >>"$OUT/status.txt"
) &
wait
cat "$OUT/env.txt" "$OUT/status.txt"
for model in llama bert; do
    [ -f "$OUT/$model/cold_start.md" ] && sed -n '1,/^### /p' "$OUT/$model/cold_start.md" | head -n -1 || tail -n 30 "$OUT/$model.log"
done
tail -n 5 "$OUT/gpu-test.log"
