#!/bin/bash
# The main job alone, timed, with per-phase worker times; then the gpu-marked tests.
set -u
REPO=$PWD; END=$(( $(date +%s) + 570 ))
left() { local l=$(( END - $(date +%s) )); [ $l -lt $1 ] && echo $l || echo $1; }
pip install -q --no-deps --no-index --target /tmp/site dist/*.whl .whl/*.whl > $OUT/pip.log 2>&1
export PYTHONPATH=/tmp/site HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1
R=/tmp/r; mkdir -p $R; cd /tmp
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv > $R/env.txt
python -c "import torch, triton; print(torch.__version__, triton.__version__, torch.version.cuda)" >> $R/env.txt
nproc >> $R/env.txt
( time timeout -s INT -k 20 $(left 420) python -m inductor_knobs ablate --out $R/main --plot ) > $R/main.log 2>&1
timeout $(left 150) python -m pytest -q -m gpu $REPO/tests -p no:cacheprovider -x > $R/gpu_tests.log 2>&1
tar czf $OUT/r.tgz -C /tmp r
cat $R/env.txt; tail -25 $R/main.log; tail -5 $R/gpu_tests.log
python -c "
import json; r=json.load(open('$R/main/results.json'))
for x in r['runs']: print(x['arm'], round(x['wall_seconds'],1), {k:round(v,2) for k,v in x.get('phase_seconds',{}).items()})"
