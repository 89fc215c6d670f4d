# The README main job twice in one GPU call: with the package from $OLD (a copy of an older tree, e.g.
#   git archive <commit> inductor_knobs patches | tar -x -C .old_ik), then with this checkout; bench/published/2026-11-26-h100-aot-load-aa/ab.
#   OUT=/tmp/out OLD=.old_ik bash bench/main_job_ab.sh
set -u
R=$PWD; F=$OUT; export HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 PYTHONUNBUFFERED=1
one() {  # one LABEL DIR: the README's main job with six workers, the package from DIR
  (cd "$2" && PYTHONPATH="$2" timeout -k 10 265 /usr/bin/time -f "wall %e s" python3 -m inductor_knobs ablate --parallel 6 \
      --out /tmp/ab-$1 --overwrite >/tmp/ab-$1.log 2>&1); echo "$1 exit $?" | tee -a $F/ab.txt
  python3 -c "import inductor_knobs, sys; print(inductor_knobs.__file__)" 2>&1 | head -1
  grep -E "^wall " /tmp/ab-$1.log | tee -a $F/ab.txt
  grep -o "autotuned one benchmark at a time[^;]*" /tmp/ab-$1.log | tee -a $F/ab.txt
  grep -E "^\| (gated|force)" /tmp/ab-$1.log | cut -c1-150 | head -6 | tee -a $F/ab.txt
  cp /tmp/ab-$1/results.md $F/ab-$1-results.md 2>/dev/null
  tar czf $F/ab-$1-runs.tgz -C /tmp/ab-$1 runs 2>/dev/null
}
one old "$R/${OLD:-.old_ik}"
one new "$R"
