#!/usr/bin/env bash
# The main job on one GPU, then on each set of GPUs given, from cold caches each, side by side in one call:
#   OUT=DIR bench/ablate_gpus.sh 0 0,1          # one GPU on half the CPUs, then both GPUs on all of them
# Writes DIR/env.txt, DIR/gpus-<set>/ (the ablation's output) and DIR/gpus-<set>.log; prints each wall time,
# the verdict rows, the phase timings and how the repeats were placed.
set -u
: "${OUT:?set OUT to the output folder}"
export PYTHONPATH=$PWD HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 OUT
N=$(nproc)
nvidia-smi --query-gpu=index,name,driver_version --format=csv > "$OUT/env.txt"
python3 -c "import torch,triton;print(torch.__version__,triton.__version__)" >> "$OUT/env.txt"
for g in "$@"; do
  d=$OUT/gpus-${g//,/-}; c=$(mktemp -d); cpus=0-$((N-1))
  [ "${ONE_GPU_CPUS:-half}" = half ] && [ "$g" = "${g%,*}" ] && [ "$#" -gt 1 ] && cpus=0-$((N/2-1))
  TORCHINDUCTOR_CACHE_DIR=$c/i TRITON_CACHE_DIR=$c/t taskset -c "$cpus" timeout "${LIMIT:-280}" /usr/bin/time -f "wall %e s" \
    python3 -m inductor_knobs ablate --gpus "$g" --out "$d" > "$d.log" 2>&1
  echo "--gpus $g (CPUs $cpus): exit $?, $(grep '^wall' "$d.log")"
  grep -E '^\| (gated|force|A/A|same)' "$d.log" | cut -d'|' -f2,4,7
done
python3 - "$@" <<'PY'
import json, os, sys
from inductor_knobs.ablation.plan import placement_note
for g in sys.argv[1:]:
    path = f"{os.environ['OUT']}/gpus-{g.replace(',', '-')}/results.json"
    if not os.path.exists(path):
        print(f"--gpus {g}: no results.json"); continue
    R = json.load(open(path)); rs = [r for r in R["runs"] if r.get("ok")]; t0 = min(r["started_at"] for r in rs)
    s = lambda r, p, i: r["phase_spans"][p][i]
    print(f"--gpus {g}: runs {max(r['ended_at'] for r in rs) - t0:.1f} s; last compile ends {max(s(r, 'compile', 1) for r in rs) - t0:.1f} s; "
          f"measurement turns {sum(s(r, 'extras', 1) - s(r, 'wait', 1) for r in rs):.1f} s; "
          f"longest start-to-compiled {max(s(r, 'compile', 1) - r['started_at'] for r in rs):.1f} s")
    print(" ", placement_note(R) or "(one GPU)", sorted({(r['repeat'], r['gpu']) for r in rs}))
PY
