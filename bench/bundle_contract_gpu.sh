#!/usr/bin/env bash
# GPU checks of the serving bundles' contract (docs/serving.md), from the repository root; results under $OUT.
#
#   OUT=/tmp/out bash bench/bundle_contract_gpu.sh tests   # the GPU's facts; the per-call cost of an AOT bundle's
#                                                          # input check (bench/aot_input_check.py); every test marked
#                                                          # gpu, then tests/test_gpu.py again (each test in fresh
#                                                          # caches: the second run must find nothing cached)
#   OUT=/tmp/out bash bench/bundle_contract_gpu.sh recipe  # docs/serving.md's AOT recipe as printed (the host's default
#                                                          # C++ compiler, no CXX): bench/cold_start.py, the Llama's
#                                                          # cold and aot arms
#
# Needs torch >= 2.11, triton, transformers, pytest; no network.
set -uo pipefail
OUT=${OUT:?set OUT to the directory for the results}
PART=${1:?part: tests or recipe}
export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}" HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 PYTHONUNBUFFERED=1
{
    nvidia-smi --query-gpu=index,name,driver_version,memory.total --format=csv
    python3 -c "import torch, triton, sys; print('python', sys.version.split()[0], 'torch', torch.__version__, 'triton', triton.__version__, 'cuda', torch.version.cuda)"
    echo "CPUs $(nproc); CXX=${CXX:-unset}; g++ is $(command -v g++)"
} >"$OUT/env-$PART.txt" 2>&1
case "$PART" in
tests)
    python3 bench/aot_input_check.py --out "$OUT/aot_input_check.json" >"$OUT/aot_input_check.log" 2>&1
    echo "aot_input_check: exit $?" >>"$OUT/status.txt"
    timeout 330 python3 -m pytest -q -p no:cacheprovider -m gpu -rs tests/ >"$OUT/gpu-tests-1.log" 2>&1
    echo "gpu tests: exit $?" >>"$OUT/status.txt"
    timeout 180 python3 -m pytest -q -p no:cacheprovider -m gpu -rs tests/test_gpu.py >"$OUT/gpu-tests-2.log" 2>&1
    echo "tests/test_gpu.py again: exit $?" >>"$OUT/status.txt"
    ;;
recipe)
    timeout 400 python3 bench/cold_start.py --models llama --arms cold aot --out "$OUT/cold_start" >"$OUT/cold_start.log" 2>&1
    echo "cold_start: exit $?" >>"$OUT/status.txt"
    timeout 130 python3 bench/aot_input_check.py --out "$OUT/aot_input_check.json" >"$OUT/aot_input_check.log" 2>&1
    echo "aot_input_check: exit $?" >>"$OUT/status.txt"
    ;;
gate)
    timeout 200 python3 -m pytest -v -p no:cacheprovider -m gpu -rfs tests/test_gpu.py tests/test_ablate_autotune_lock.py >"$OUT/gpu-tests-gate.log" 2>&1
    echo "test_gpu + autotune lock: exit $?" >>"$OUT/status.txt"
    ;;
esac
cat "$OUT/status.txt"
