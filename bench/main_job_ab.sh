#!/usr/bin/env bash
# The README's main job from two trees and with several --parallel values, one run after another in one GPU call,
# each from cold caches; everything under $OUT (results.json, the log and the headline lines of each run).
#   git archive <commit> inductor_knobs patches | (mkdir -p .old_ik && tar -x -C .old_ik)
#   OUT=/tmp/out OLD=.old_ik RUNS="old:9 new:9 new:18" bash bench/main_job_ab.sh
# RUNS lists LABEL:PARALLEL: label old runs the package from $OLD, new this checkout, pyc this checkout with the
# bytecode of the standard library and every installed package compiled once into a PYTHONPYCACHEPREFIX directory
# before its first run (bench/cold_start.py's host_bytecode: as a Python installed the usual way has it, where the
# host sets PYTHONDONTWRITEBYTECODE and ships none); PARALLEL is --parallel.
set -u
R=$PWD
F=${OUT:?set OUT to the directory for the results}
export HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 PYTHONUNBUFFERED=1
n=0
for run in ${RUNS:-old:9 new:9}; do
    label=${run%%:*} parallel=${run##*:} n=$((n + 1))
    name=$n-$label-p$parallel dir=$R
    if [ "$label" = old ]; then case ${OLD:-.old_ik} in /*) dir=$OLD ;; *) dir=$R/${OLD:-.old_ik} ;; esac; fi
    prefix=
    if [ "$label" = pyc ]; then
        prefix=/tmp/ik-main-job-bytecode/pycache
        if [ ! -f /tmp/ik-main-job-bytecode/done ]; then  # compiled once per machine, whole (an interrupted one again)
            mkdir -p /tmp/ik-main-job-bytecode
            python3 -c 'import pathlib, sys; sys.path.insert(0, "bench"); import cold_start; print(cold_start.host_bytecode(pathlib.Path(sys.argv[1]), []))' \
                /tmp/ik-main-job-bytecode | tee -a "$F/ab.txt" && touch /tmp/ik-main-job-bytecode/done
        fi
    fi
    (cd "$dir" && PYTHONPATH="$dir" PYTHONPYCACHEPREFIX=$prefix timeout -k 10 "${LIMIT_S:-265}" /usr/bin/time -f "wall %e s" python3 -m inductor_knobs \
        ablate --parallel "$parallel" --out "$F/$name" --overwrite >"$F/$name.log" 2>&1)
    echo "$name exit $?" | tee -a "$F/ab.txt"
    {
        grep -E "^wall " "$F/$name.log"
        grep -E "^\| (gated|force)" "$F/$name.log" | cut -c1-150 | head -6
        grep -oE "The runs took [^;]*|before the first run the command spent [0-9.]+ s" "$F/$name.log" | head -2
    } | tee -a "$F/ab.txt"
    rm -rf "$F/$name/runs"
done
