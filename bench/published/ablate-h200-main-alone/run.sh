#!/bin/bash
# The main job alone on one H200, timed, then the gpu-marked tests.
set -u
REPO=$PWD; R=/tmp/r; mkdir -p $R
pip install -q --no-deps --no-index --target /tmp/site dist/*.whl .whl/*.whl > $R/pip.log 2>&1 || { cat $R/pip.log; exit 1; }
export PYTHONPATH=/tmp/site HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1
cd /tmp
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv > $R/env.txt
python -c "import torch, triton; print(torch.__version__, triton.__version__, torch.version.cuda)" >> $R/env.txt
nproc >> $R/env.txt
( time timeout -s INT -k 20 330 python -m inductor_knobs ablate --out $R/main --plot ) > $R/main.log 2>&1
timeout 140 python -m pytest -q -m gpu $REPO/tests -p no:cacheprovider > $R/gpu_tests.log 2>&1
tar czf $OUT/r.tgz -C /tmp r
cat $R/env.txt; sed -n '/^workload/,$p' $R/main.log | grep -v "^wrote"; tail -3 $R/gpu_tests.log
