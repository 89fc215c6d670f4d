#!/bin/bash
# The README's main job on one GPU machine, from a cold Inductor cache (every worker gets empty
# private cache directories; the parent compiles nothing), timed with /usr/bin/time.
# Run from the repository root with the package's wheel in .ik22/ and $OUT set:
#   OUT=/tmp/out bash bench/results/ablate-h100-bert-main/run.sh
set -u
R=$OUT
python3 -m pip install -q --no-deps --no-index --target /tmp/site .ik22/*.whl >"$R/pip.log" 2>&1 || { cat "$R/pip.log"; exit 1; }
rm -f "$R/pip.log"
export PYTHONPATH=/tmp/site HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1
cd /tmp
{
    nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv
    python3 -c "import torch, triton, transformers, sys; print('python', sys.version.split()[0], 'torch', torch.__version__, 'triton', triton.__version__, 'cuda', torch.version.cuda, 'transformers', transformers.__version__)"
    echo "CPUs $(nproc)"
} >"$R/env.txt" 2>&1
TIME=()
[ -x /usr/bin/time ] && TIME=(/usr/bin/time -v)
start=$(date +%s)
"${TIME[@]}" timeout -s INT -k 20 450 python3 -m inductor_knobs ablate --out "$R/main" --overwrite --plot >"$R/main.log" 2>"$R/main.err"
rc=$?
echo "exit $rc; wall by date: $(( $(date +%s) - start )) s" | tee -a "$R/main.err"
cat "$R/env.txt" "$R/main.log"
tr '\r' '\n' <"$R/main.err" | grep -v "^ablate " | tail -40
tr '\r' '\n' <"$R/main.err" | grep "^ablate " | awk 'NR % 4 == 1' | tail -8
