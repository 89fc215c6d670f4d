#!/usr/bin/env bash
# The GPU runs behind the results in bench/published/ (each results README names its part), from the repository
# root; parts a-j need a host with 2 to 4 GPUs (16 CPUs each), k-s one GPU; everything goes under $OUT.
#
#   OUT=/tmp/out bash bench/gpu_parts.sh a   # lanes at once, each GPU with its own 16 CPUs (taskset):
#                                              #   GPU 0: every GPU test; GPU 1: cold start, Llama;
#                                              #   GPU 2: cold start, BERT-base; GPU 3: the main job's --smoke
#   OUT=/tmp/out bash bench/gpu_parts.sh b   # the README's main job on GPU 0 alone with CPUs 0-15 (as on a
#                                              #   one-GPU node), then on all 4 GPUs with all CPUs (ablate_gpu.sh
#                                              #   parts main + allgpus), one after the other, nothing beside them
#   OUT=/tmp/out bash bench/gpu_parts.sh c   # bench/serving_soak.py, one served model per GPU, 4 GPUs
#   OUT=/tmp/out bash bench/gpu_parts.sh d   # part b again (after the fork server preloaded Inductor),
#                                              #   then bench/cold_start.py, Llama on GPU 0 and BERT-base on
#                                              #   GPU 1 at once (their own 16 CPUs each), nothing beside them
#   OUT=/tmp/out bash bench/gpu_parts.sh e   # lanes at once, each GPU with its own 16 CPUs: GPU 0 the main
#                                              #   job (ablate_gpu.sh part main, timed); GPU 1 cold start, Llama;
#                                              #   GPU 2 cold start, BERT-base; GPU 3 every GPU test
#   OUT=/tmp/out bash bench/gpu_parts.sh f   # cold start, Llama on GPU 0 and BERT-base on GPU 1 at once
#   OUT=/tmp/out bash bench/gpu_parts.sh g   # the main job on GPU 0 alone (CPUs 0-15), then part f beside
#                                              #   the fork-server and bundle GPU tests on GPU 2
#   OUT=/tmp/out bash bench/gpu_parts.sh h   # lanes at once: GPU 0 the main job (timed); GPU 2 the fork-server,
#                                              #   release-knob and bundle GPU tests; GPU 3 tests/test_gpu.py
#   OUT=/tmp/out bash bench/gpu_parts.sh j   # the README's main job four times at once, one run per GPU with
#                                              #   its own 16 CPUs (replicates of its wall time and intervals)
#   OUT=/tmp/out bash bench/gpu_parts.sh i   # lanes at once: GPU 0 the main job (timed); GPU 1 cold start, Llama;
#                                              #   GPU 2 cold start, BERT-base (both with the aot arm); GPU 3 the
#                                              #   bundle, AOT bundle and autotune-lock GPU tests
#   OUT=/tmp/out bash bench/gpu_parts.sh k llama bert   # one-GPU node, all its CPUs: bench/cold_start.py for
#                                              #   each model in turn (arms $ARMS, default all), then the AOT bundle GPU test
#   OUT=/tmp/out bash bench/gpu_parts.sh m   # one-GPU node: the main job with --parallel 6 (timed), then the
#                                              #   A/A control alone with --parallel 1 (bench/aa_alone.toml)
#   OUT=/tmp/out bash bench/gpu_parts.sh p   # one-GPU node: the main job alone with --parallel 6 (timed), per-run lines
#   OUT=/tmp/out bash bench/gpu_parts.sh r   # one-GPU node: variants of the main job (timed) one after the other:
#                                              #   VARIANTS="main onebatch parallel9" (as a new user runs it; every run
#                                              #   live at once, bench/ablate_cap.py 18; --parallel 9)
#   OUT=/tmp/out bash bench/gpu_parts.sh t   # 4-GPU host, lanes at once, each GPU with its own 16 CPUs: GPU 0
#                                              #   bench/per_bucket.py for BERT-base (128, 512, 2048 tokens, 2,000
#                                              #   requests); GPU 1 bench/aot_build.py (Llama), then the main job;
#                                              #   GPUs 2 and 3 the main job twice each (replicates of its verdicts)
#   OUT=/tmp/out OLD=DIR bash bench/gpu_parts.sh u   # 4-GPU host, lanes at once, each GPU with its own 16 CPUs: GPUs 0
#                                              #   and 1 bench/per_bucket.py for BERT-base (128/512 and 512/2048 tokens,
#                                              #   2,000 requests, each arm's GPU kernels at 128 and 2048); GPUs 2 and 3
#                                              #   the main job three times each, alternately from the tree in DIR and
#                                              #   this one (an A/B of its wall time)
#   OUT=/tmp/out bash bench/gpu_parts.sh w   # one-GPU node: the main job alternately with the default compile threads
#                                              #   and with --compile-threads $THREADS (2), $PAIRS pairs (2), timed
#   OUT=/tmp/out bash bench/gpu_parts.sh x   # 4-GPU host, lanes at once, each GPU with its own 16 CPUs: the main job
#                                              #   with the default compile threads and with --compile-threads 2, 3
#                                              #   and 4, $ROUNDS rounds (3), every arm on another GPU each round
#   OUT=/tmp/out bash bench/gpu_parts.sh y   # 4-GPU host, lanes at once: bench/aot_build.py for the Llama without
#                                              #   coordinate descent at build time, as AOTInductor builds by default
#                                              #   (GPU 0), with its wrapper at -O0 (GPU 1), without precompiled
#                                              #   headers (GPU 2), with both (GPU 3)
#   OUT=/tmp/out bash bench/gpu_parts.sh z   # 4-GPU host, lanes at once: bench/isa_probe.py (GPU 0); bench/aot_build.py
#                                              #   for the Llama without coordinate descent at build time (GPU 1), the
#                                              #   same with the vector-ISA probes on a thread beside the build (GPU 2)
#   OUT=/tmp/out bash bench/gpu_parts.sh n   # one-GPU node: bench/aot_build.py for the Llama, $BUILDS builds (1) without
#                                              #   coordinate descent at build time (the package's own ISA probe thread)
#                                              #   and with the KEY=VALUE words of $BUILD_OPTIONS (none); with $ALSO_BUILD
#                                              #   (KEY=VALUE words) one more bundle so built, its kernels and the first's
#                                              #   timed against the warm-up's side by side ($ROUNDS rounds, 3); then the
#                                              #   CPU tests in $TESTS (none) on this host's torch
#   OUT=/tmp/out bash bench/gpu_parts.sh o   # one-GPU node: bench/aot_build.py for the Llama as built (coordinate
#                                              #   descent on), $BUILDS builds (2), $ROUNDS rounds (3), the kernel
#                                              #   sources kept, into aot_one/; then the same --without-descent-fix
#                                              #   (the package's fix of cached descent winners off) into aot_without/
#   OUT=/tmp/out bash bench/gpu_parts.sh v   # 4-GPU host, two lanes at once: bench/aot_build.py for the Llama as built
#                                              #   (GPU 0) and with --build-option coordinate_descent_tuning=False (GPU 1)
#   OUT=/tmp/out bash bench/gpu_parts.sh s   # one-GPU node: the main job $MAIN_RUNS times (default 1, timed), then
#                                              #   the Llama's AOT cold start (bench/cold_start.py --arms cold aot
#                                              #   $AOT_FLAGS, default: two aot processes, then one with -X importtime
#                                              #   and cProfile)
#
# Needs torch >= 2.11 (SM emulation), triton, transformers; no network.  The results are written to a
# scratch directory and packed into $OUT/<part>.tgz at the end (the device tool returns at most 8 files).
set -uo pipefail
FINAL=${OUT:?set OUT to the directory for the results}
PART=${1:?part a, b or c}
OUT=/tmp/gpu-part-$PART
rm -rf "$OUT" && mkdir -p "$OUT"
trap 'tar czf "$FINAL/$PART.tgz" -C "$OUT" . ; cp "$OUT/status.txt" "$FINAL/$PART-status.txt" 2>/dev/null' EXIT
export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}" HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 PYTHONUNBUFFERED=1
{
    nvidia-smi --query-gpu=index,name,driver_version,memory.total --format=csv
    python3 -c "import torch, triton, transformers, sys; print('python', sys.version.split()[0], 'torch', torch.__version__, 'triton', triton.__version__, 'cuda', torch.version.cuda, 'transformers', transformers.__version__)"
    echo "CPUs $(nproc)"
    lscpu | grep -E "Model name|MHz|^CPU\(s\)|NUMA node"
    nvidia-smi --query-gpu=clocks.sm,clocks.max.sm,clocks.mem,power.draw,power.limit,temperature.gpu,clocks_throttle_reasons.active --format=csv
} >"$OUT/env.txt" 2>&1
start=$(date +%s)
lane() { local n=$(($(nproc) / 4)); echo "$(($1 * n))-$(($1 * n + n - 1))"; }
done_at() { echo "$1: exit $2 after $(($(date +%s) - start)) s" | tee -a "$OUT/status.txt"; }
cold_start() {  # cold_start GPU MODEL SECONDS: bench/cold_start.py for one model on one lane (parts e, f, g)
    CUDA_VISIBLE_DEVICES=$1 taskset -c "$(lane "$1")" timeout -k 10 "$3" python3 bench/cold_start.py --models "$2" \
        --out "$OUT/cold_$2" >"$OUT/cold_$2.log" 2>&1
    done_at "cold_$2" $?
}
main_job_timed() {  # main_job_timed SECONDS [ablate options...]: the README's main job, timed, and its headline lines
    local limit=$1
    shift
    timeout -k 10 "$limit" /usr/bin/time -f "wall %e s" python3 -m inductor_knobs ablate "$@" --out "$OUT/main" --overwrite \
        >"$OUT/main.log" 2>&1
    done_at main $?
    grep -E "^wall " "$OUT/main.log"
    grep -E "^\| (gated|force)" "$OUT/main.log" | cut -c1-200
    grep -E "autotuned one|The runs took" "$OUT/main.log" | cut -c1-400
}
ablate_timed() {  # ablate_timed NAME SECONDS COMMAND...: one main-job variant into $OUT/NAME, timed, its headline lines
    local name=$1 limit=$2
    shift 2
    timeout -k 10 "$limit" /usr/bin/time -f "wall %e s" "$@" --out "$OUT/$name" --overwrite >"$OUT/$name.log" 2>&1
    done_at "$name" $?
    grep -E "^wall " "$OUT/$name.log"
    grep -E "^\| (gated|force)" "$OUT/$name.log" | cut -c1-200
    grep -E "The runs took" "$OUT/$name.log" | cut -c1-400
}
show_cold_starts() {
    for m in llama bert; do
        if [ -f "$OUT/cold_$m/cold_start.md" ]; then sed -n '3,20p' "$OUT/cold_$m/cold_start.md"; else tail -n 20 "$OUT/cold_$m.log"; fi
    done
}

aot_lane() {  # aot_lane "GPU NAME [options...]": bench/aot_build.py on one lane, in the background
    # shellcheck disable=SC2086 - the option words split on purpose
    set -- $1
    local gpu=$1 name=$2
    shift 2
    (CUDA_VISIBLE_DEVICES=$gpu taskset -c "$(lane "$gpu")" timeout -k 10 "${AOT_TIMEOUT_S:-400}" python3 bench/aot_build.py \
        --out "$OUT/$name" "$@" >"$OUT/$name.log" 2>&1; done_at "$name" $?) &
}

case "$PART" in
s)
    for i in $(seq "${MAIN_RUNS:-1}"); do ablate_timed "main$i" "${MAIN_TIMEOUT_S:-230}" python3 -m inductor_knobs ablate; done
    # shellcheck disable=SC2086 - AOT_FLAGS is a list of flags
    timeout -k 10 "${COLD_TIMEOUT_S:-330}" python3 bench/cold_start.py --models llama --arms cold aot \
        ${AOT_FLAGS:---aot-runs 2 --profile-aot} --out "$OUT/cold_llama" >"$OUT/cold_llama.log" 2>&1
    done_at cold_llama $?
    show_cold_starts
    ;;
a)
    (CUDA_VISIBLE_DEVICES=0 taskset -c "$(lane 0)" timeout -k 10 520 python3 -m pytest -q -m gpu tests/test_gpu.py \
        tests/test_ablate_forkserver.py tests/test_release_knobs.py tests/test_sdpa_trial.py tests/test_serving_bundle.py -p no:cacheprovider \
        -o faulthandler_timeout=200 >"$OUT/gpu_tests.txt" 2>&1; done_at gpu_tests $?) &
    cold_start 1 llama 540 &
    cold_start 2 bert 540 &
    (CUDA_VISIBLE_DEVICES=3 taskset -c "$(lane 3)" timeout -k 10 400 python3 -m inductor_knobs ablate --smoke --out "$OUT/smoke" \
        --overwrite >"$OUT/smoke.log" 2>&1; done_at smoke $?) &
    wait
    tail -n 15 "$OUT/gpu_tests.txt"
    show_cold_starts
    tr '\r' '\n' <"$OUT/smoke.log" | grep -v "^ablate " | tail -n 25
    ;;
b)
    PARTS="main allgpus" DEADLINE_S=560 OUT="$OUT" PYTHON=python3 bash bench/ablate_gpu.sh >"$OUT/ablate_gpu.log" 2>&1
    done_at ablate_gpu $?
    cat "$OUT/status.txt" "$OUT/main.time" "$OUT/allgpus.time" "$OUT/allgpus.compare.txt" 2>/dev/null
    grep -A3 "Where the time went" "$OUT/main.log" | head -5
    grep -E "^\| (gated|force|all runs)" "$OUT/main.log" | tail -n 8
    ;;
d)
    PARTS="main allgpus" DEADLINE_S=390 OUT="$OUT" PYTHON=python3 bash bench/ablate_gpu.sh >"$OUT/ablate_gpu.log" 2>&1
    done_at ablate_gpu $?
    cold_start 0 llama 180 &
    cold_start 1 bert 180 &
    wait
    cat "$OUT/main.time" "$OUT/allgpus.time" "$OUT/allgpus.compare.txt" 2>/dev/null
    grep -E "^\| (gated|force|all runs)" "$OUT/main.log" | tail -n 8
    grep -E "fork server|started|quiet" "$OUT/main.log" | head -5
    show_cold_starts
    ;;
e)
    (PARTS="main" DEADLINE_S=420 OUT="$OUT" PYTHON=python3 bash bench/ablate_gpu.sh >"$OUT/ablate_gpu.log" 2>&1; done_at main $?) &
    cold_start 1 llama 480 &
    cold_start 2 bert 480 &
    (CUDA_VISIBLE_DEVICES=3 taskset -c "$(lane 3)" timeout -k 10 420 python3 -m pytest -q -m gpu tests/test_gpu.py \
        tests/test_ablate_forkserver.py tests/test_release_knobs.py tests/test_serving_bundle.py -p no:cacheprovider \
        -o faulthandler_timeout=200 >"$OUT/gpu_tests.txt" 2>&1; done_at gpu_tests $?) &
    wait
    cat "$OUT/status.txt" "$OUT/main.time" 2>/dev/null
    grep -E "^\| (gated|force|all runs)" "$OUT/main.log" | tail -n 8
    grep -E "fork server|forked|quiet" "$OUT/main.log" | head -4
    tail -n 6 "$OUT/gpu_tests.txt"
    show_cold_starts
    ;;
f)
    cold_start 0 llama 480 &
    cold_start 1 bert 480 &
    wait
    show_cold_starts
    ;;
g)
    PARTS="main" DEADLINE_S=300 OUT="$OUT" PYTHON=python3 bash bench/ablate_gpu.sh >"$OUT/ablate_gpu.log" 2>&1
    done_at main $?
    cold_start 0 llama 250 &
    cold_start 1 bert 250 &
    (CUDA_VISIBLE_DEVICES=2 taskset -c "$(lane 2)" timeout -k 10 250 python3 -m pytest -q -m gpu tests/test_ablate_forkserver.py \
        tests/test_serving_bundle.py -p no:cacheprovider -o faulthandler_timeout=200 >"$OUT/gpu_tests.txt" 2>&1; done_at gpu_tests $?) &
    wait
    cat "$OUT/main.time" 2>/dev/null
    grep -E "^\| (gated|force|all runs)" "$OUT/main.log" | tail -n 8
    grep -E "fork server|forked|new interpreters|The runs took" "$OUT/main.log" | head -4
    tail -n 4 "$OUT/gpu_tests.txt"
    show_cold_starts
    ;;
h)
    (PARTS="main" DEADLINE_S=420 OUT="$OUT" PYTHON=python3 bash bench/ablate_gpu.sh >"$OUT/ablate_gpu.log" 2>&1; done_at main $?) &
    (CUDA_VISIBLE_DEVICES=2 taskset -c "$(lane 2)" timeout -k 10 540 python3 -m pytest -q -rf --tb=short -m gpu \
        tests/test_ablate_forkserver.py tests/test_release_knobs.py tests/test_serving_bundle.py -p no:cacheprovider \
        >"$OUT/gpu_tests_serving.txt" 2>&1; done_at gpu_tests_serving $?) &
    (CUDA_VISIBLE_DEVICES=3 taskset -c "$(lane 3)" timeout -k 10 540 python3 -m pytest -q -rf --tb=short -m gpu \
        tests/test_gpu.py -p no:cacheprovider >"$OUT/gpu_tests.txt" 2>&1; done_at gpu_tests $?) &
    wait
    cat "$OUT/status.txt" "$OUT/main.time" 2>/dev/null
    grep -E "^\| (gated|force|all runs)" "$OUT/main.log" | tail -n 8
    grep -E "fork server|forked|new interpreters|The runs took|autotuned one" "$OUT/main.log" | head -4
    tail -n 25 "$OUT/gpu_tests.txt" "$OUT/gpu_tests_serving.txt"
    ;;
i)
    (PARTS="main" DEADLINE_S=420 OUT="$OUT" PYTHON=python3 bash bench/ablate_gpu.sh >"$OUT/ablate_gpu.log" 2>&1; done_at main $?) &
    cold_start 1 llama 540 &
    cold_start 2 bert 540 &
    (CUDA_VISIBLE_DEVICES=3 taskset -c "$(lane 3)" timeout -k 10 540 python3 -m pytest -q -rf --tb=short -m gpu \
        tests/test_serving_bundle_aot.py tests/test_serving_bundle.py -p no:cacheprovider >"$OUT/gpu_tests.txt" 2>&1
        done_at gpu_tests $?
        python3 -m pytest -q -rf --tb=short tests/test_ablate_autotune_lock.py -p no:cacheprovider >>"$OUT/gpu_tests.txt" 2>&1
        done_at lock_tests $?) &
    wait
    cat "$OUT/status.txt" "$OUT/main.time" 2>/dev/null
    grep -E "^\| (gated|force|all runs)" "$OUT/main.log" | tail -n 8
    grep -E "fork server|forked|The runs took|autotuned one" "$OUT/main.log" | head -4
    tail -n 12 "$OUT/gpu_tests.txt"
    show_cold_starts
    for m in llama bert; do grep -E "^- |AOT bundle|bundle:" "$OUT/cold_$m/cold_start.md" 2>/dev/null; done
    ;;
j)
    for g in 0 1 2 3; do  # the README's main job, four independent runs at once, each alone on its GPU and 16 CPUs
        (CUDA_VISIBLE_DEVICES=$g taskset -c "$(lane "$g")" timeout -k 10 500 /usr/bin/time -f "wall %e s" \
            python3 -m inductor_knobs ablate --out "$OUT/main$g" --overwrite >"$OUT/main$g.log" 2>&1
            done_at "main$g" $?) &
    done
    wait
    cat "$OUT/status.txt"
    for g in 0 1 2 3; do
        echo "== GPU $g: $(grep -E '^wall ' "$OUT/main$g.log")"
        grep -E "^\| (gated|force)" "$OUT/main$g.log" | cut -c1-190 | head -n 6
    done
    ;;
t)
    main_once() {  # main_once GPU NAME: the README's main job alone on its GPU and 16 CPUs, timed
        CUDA_VISIBLE_DEVICES=$1 taskset -c "$(lane "$1")" timeout -k 10 "${MAIN_TIMEOUT_S:-250}" /usr/bin/time -f "wall %e s" \
            python3 -m inductor_knobs ablate --out "$OUT/$2" --overwrite >"$OUT/$2.log" 2>&1
        done_at "$2" $?
    }
    (CUDA_VISIBLE_DEVICES=0 taskset -c "$(lane 0)" timeout -k 10 "${BERT_TIMEOUT_S:-540}" python3 bench/per_bucket.py --model bert \
        --sizes 128,512,2048 --requests 2000 --out "$OUT/pb_bert" >"$OUT/pb_bert.log" 2>&1; done_at pb_bert $?) &
    (CUDA_VISIBLE_DEVICES=1 taskset -c "$(lane 1)" timeout -k 10 "${AOT_TIMEOUT_S:-300}" python3 bench/aot_build.py --out "$OUT/aot" \
        >"$OUT/aot.log" 2>&1; done_at aot $?; main_once 1 main1a) &
    for g in 2 3; do (main_once "$g" "main${g}a"; main_once "$g" "main${g}b") & done
    wait
    cat "$OUT/status.txt"
    for name in main1a main2a main2b main3a main3b; do
        echo "== $name: $(grep -E '^wall ' "$OUT/$name.log")"
        grep -E "^\| (gated|force)" "$OUT/$name.log" | cut -c1-190 | head -n 6
    done
    tail -n 25 "$OUT/pb_bert.log"
    ;;
u)
    # GPUs 2 and 3: the main job alternately with the package of $OLD (a copy of another tree: git archive <commit>
    # inductor_knobs patches | tar -x -C DIR) and with this tree, the order flipped on GPU 3 (side by side, one call).
    main_from() {  # main_from GPU NAME DIR: the README's main job alone on its GPU and 16 CPUs, the package from DIR
        (cd "$3" && CUDA_VISIBLE_DEVICES=$1 PYTHONPATH="$3" taskset -c "$(lane "$1")" timeout -k 10 "${MAIN_TIMEOUT_S:-200}" \
            /usr/bin/time -f "wall %e s" python3 -m inductor_knobs ablate --out "$OUT/$2" --overwrite >"$OUT/$2.log" 2>&1)
        done_at "$2" $?
    }
    OLD_DIR=$(cd "${OLD:?set OLD to a copy of the older tree}" && pwd)
    bert() {  # bert GPU NAME SIZES AT: bench/per_bucket.py for BERT-base on its GPU and 16 CPUs, 2,000 requests
        CUDA_VISIBLE_DEVICES=$1 taskset -c "$(lane "$1")" timeout -k 10 "${BERT_TIMEOUT_S:-560}" python3 bench/per_bucket.py \
            --model bert --sizes "$3" --requests 2000 --kernels-at "$4" --out "$OUT/$2" >"$OUT/$2.log" 2>&1
        done_at "$2" $?
    }
    bert 0 pb_bert_128 128,512 128 &
    bert 1 pb_bert_2048 512,2048 2048 &
    (main_from 2 new2a "$PWD"; main_from 2 old2b "$OLD_DIR"; main_from 2 new2c "$PWD") &
    (main_from 3 old3a "$OLD_DIR"; main_from 3 new3b "$PWD"; main_from 3 old3c "$OLD_DIR") &
    wait
    cat "$OUT/status.txt"
    for log in "$OUT"/new*.log "$OUT"/old*.log; do echo "== $(basename "$log" .log): $(grep -E '^wall ' "$log")"; done
    for name in pb_bert_128 pb_bert_2048; do grep -v -E "^(INFO|STAGE|VERBOSE|WARNING):" "$OUT/$name.log" | tail -n 22; done
    ;;
w)
    # One-GPU node: the main job alternately with the default compile threads and with --compile-threads $THREADS
    # (default 2), $PAIRS pairs (default 2), the order flipped in every other pair (an A/B of its wall time).
    for pair in $(seq "${PAIRS:-2}"); do
        if [ $((pair % 2)) = 1 ]; then order="default threads"; else order="threads default"; fi
        for arm in $order; do
            if [ "$arm" = default ]; then
                ablate_timed "default$pair" "${MAIN_TIMEOUT_S:-185}" python3 -m inductor_knobs ablate
            else
                ablate_timed "threads$pair" "${MAIN_TIMEOUT_S:-185}" python3 -m inductor_knobs ablate --compile-threads "${THREADS:-2}"
            fi
        done
    done
    cat "$OUT/status.txt"
    ;;
x)
    # A Latin square of compile threads per worker over the host's 4 GPUs: in round r, GPU g runs arm (g + r) mod 4,
    # so every arm meets every GPU once in 4 rounds and no arm keeps a GPU of its own.
    arms=(default 2 3 4)
    lane_runs() {  # lane_runs GPU: this GPU's main jobs, one per round
        local gpu=$1 r arm name
        for r in $(seq 0 $((${ROUNDS:-3} - 1))); do
            arm=${arms[$(((gpu + r) % 4))]}
            name="t${arm}_r${r}_gpu${gpu}"
            set -- python3 -m inductor_knobs ablate
            if [ "$arm" != default ]; then set -- "$@" --compile-threads "$arm"; fi
            CUDA_VISIBLE_DEVICES=$gpu taskset -c "$(lane "$gpu")" timeout -k 10 "${MAIN_TIMEOUT_S:-185}" \
                /usr/bin/time -f "wall %e s" "$@" --out "$OUT/$name" --overwrite >"$OUT/$name.log" 2>&1
            done_at "$name" $?
        done
    }
    for gpu in 0 1 2 3; do lane_runs "$gpu" & done
    wait
    cat "$OUT/status.txt"
    for log in "$OUT"/t*.log; do
        echo "== $(basename "$log" .log): $(grep -E '^wall ' "$log")"
        grep -E "^\| (gated|force)" "$log" | cut -c1-160
    done
    ;;
n)
    extra=()
    for option in ${BUILD_OPTIONS:-}; do extra+=(--build-option "$option"); done  # KEY=VALUE words, more keys
    for option in ${ALSO_BUILD:-}; do extra+=(--also-build "$option"); done        # one more bundle, timed beside
    timeout -k 10 "${AOT_TIMEOUT_S:-400}" python3 bench/aot_build.py --out "$OUT/aot_one" --builds "${BUILDS:-1}" --rounds "${ROUNDS:-3}" \
        --build-option coordinate_descent_tuning=False "${extra[@]}" >"$OUT/aot_one.log" 2>&1
    done_at aot_one $?
    if [ -n "${TESTS:-}" ]; then  # CPU tests on this host's torch, after the timing
        # shellcheck disable=SC2086 - TESTS is a list of test files
        timeout -k 10 "${TESTS_TIMEOUT_S:-240}" python3 -m pytest -q -x -m "not gpu" $TESTS -p no:cacheprovider >"$OUT/tests.txt" 2>&1
        done_at tests $?
        tail -n 5 "$OUT/tests.txt"
    fi
    grep -E '^(build 1|\{"warm_up)' "$OUT/aot_one.log"
    python3 -c "import json,sys; d=json.load(open(sys.argv[1])); print(d['warm_up_s']); [print(b['wall_s'], b['steps'], json.dumps(b['child_processes']['by_program'])) for b in d['builds']]" "$OUT/aot_one/aot_build.json" 2>&1 | cut -c1-700
    ;;
o)
    for arm in aot_one aot_without; do
        flags=(--keep-sources)
        [ "$arm" = aot_without ] && flags+=(--without-descent-fix)
        timeout -k 10 "${AOT_TIMEOUT_S:-270}" python3 bench/aot_build.py --out "$OUT/$arm" --builds "${BUILDS:-2}" \
            --rounds "${ROUNDS:-3}" "${flags[@]}" >"$OUT/$arm.log" 2>&1
        done_at "$arm" $?
        python3 -c "import json,sys; d=json.load(open(sys.argv[1])); print(d['arm'], d['warm_up_s']); [print(b['wall_s'], b['steps'], b['new_autotune_entries'], b['recorder']['cold'][1:], b['torch_phases_s'].get('CachingAutotuner.coordinate_descent_tuning')) for b in d['builds']]; print(d.get('bundle_vs_warm_up_ms'))" "$OUT/$arm/aot_build.json" 2>&1 | cut -c1-900
    done
    ;;
z)
    (CUDA_VISIBLE_DEVICES=0 taskset -c "$(lane 0)" timeout -k 10 300 python3 bench/isa_probe.py --out "$OUT/isa" \
        >"$OUT/isa.log" 2>&1; done_at isa $?) &
    aot_lane "1 aot_base --build-option coordinate_descent_tuning=False"
    aot_lane "2 aot_beside --build-option coordinate_descent_tuning=False --probe-isa-beside"
    wait
    cat "$OUT/status.txt"
    python3 -c "import json,sys; d=json.load(open(sys.argv[1])); print(d['torch'], d['fix_applies'], d['isas'], d['valid_vec_isa_list_s']); [print(r['library'][:10], *[(k, r[k]['ok'], r[k]['seconds']) for k in ('fixed', 'libraries_only', 'import_torch')]) for r in d['probes']]" "$OUT/isa/isa_probe.json"
    for name in aot_base aot_beside; do
        echo "== $name"
        grep -E '^(build [12]|\{"warm_up)' "$OUT/$name.log"
        python3 -c "import json,sys; d=json.load(open(sys.argv[1])); [print(b['wall_s'], b['steps'], json.dumps(b['child_processes']['by_program']), [(r['seconds'], r['program']) for r in b['child_processes']['slowest'][:8]]) for b in d['builds']]" "$OUT/$name/aot_build.json" 2>&1 | cut -c1-700
    done
    ;;
y)
    # The C++ side of the Llama's first AOT build after the warm-up: AOTInductor's wrapper optimisation level and its
    # precompiled header, each lane with coordinate descent off at build time, every child process timed.
    nocd="--build-option coordinate_descent_tuning=False"
    o0="--build-option aot_inductor.compile_wrapper_opt_level='O0'"
    nopch="--build-option aot_inductor.precompile_headers=False"
    specs=("0 aot_base $nocd" "1 aot_o0 $nocd $o0" "2 aot_nopch $nocd $nopch" "3 aot_o0_nopch $nocd $o0 $nopch")
    if [ -n "${PROBES:-}" ]; then  # the vector-ISA probe fix in the tree: as built, -O0, probes beside; GPU 3 cold start
        specs=("0 aot_base $nocd" "1 aot_o0 $nocd $o0" "2 aot_beside $nocd --probe-isa-beside")
        (CUDA_VISIBLE_DEVICES=3 taskset -c "$(lane 3)" timeout -k 10 "${COLD_TIMEOUT_S:-420}" python3 bench/cold_start.py \
            --models llama --arms aot --aot-runs 2 --out "$OUT/cold_llama" >"$OUT/cold_llama.log" 2>&1; done_at cold_llama $?) &
    fi
    for spec in "${specs[@]}"; do aot_lane "$spec"; done
    wait
    cat "$OUT/status.txt"
    show_cold_starts
    for name in aot_base aot_o0 aot_nopch aot_o0_nopch aot_beside; do
        [ -f "$OUT/$name.log" ] || continue
        echo "== $name"
        grep -E '^(build [12]|\{"warm_up)' "$OUT/$name.log"
        python3 -c "import json,sys; d=json.load(open(sys.argv[1])); [print(b['wall_s'], b['steps'], json.dumps(b['child_processes']['by_program']), json.dumps(b['child_processes']['slowest'][:6])) for b in d['builds']]" "$OUT/$name/aot_build.json" 2>&1 | cut -c1-900
    done
    ;;
v)
    # The Llama's AOT build after the warm-up, as built (GPU 0) and without coordinate descent at build time (GPU 1),
    # side by side on a 4-GPU host, each with its own 16 CPUs; each bundle timed against its own process's warm-up.
    aot_lane "0 aot_default"
    aot_lane "1 aot_no_cd --build-option coordinate_descent_tuning=False"
    wait
    cat "$OUT/status.txt"
    for name in aot_default aot_no_cd; do grep -E '^(build [12]|\{"warm_up)' "$OUT/$name.log"; done
    ;;
c)
    timeout -k 10 560 python3 bench/serving_soak.py --gpus 0 1 2 3 --requests 2000 --threads 1 4 16 --out "$OUT/soak" >"$OUT/soak.log" 2>&1
    done_at soak $?
    cat "$OUT/soak/serving_soak.md" 2>/dev/null || tail -n 40 "$OUT/soak.log"
    ;;
k)
    shift
    # The GPU host sets CXX=/opt/gcc/bin/g++, which links libstdc++ statically into AOTInductor's wrapper library:
    # every package it builds crashes its loader (aot_package.check_loads refuses to save it).  Its system g++
    # links libstdc++ dynamically.  Only AOTInductor's C++ wrapper and Inductor's CPU ISA probes use this compiler.
    if [ -x /usr/bin/g++ ]; then export CXX=/usr/bin/g++; fi
    echo "CXX=${CXX:-g++ from PATH}" >>"$OUT/env.txt"
    for MODEL in "$@"; do
        # shellcheck disable=SC2086
        timeout -k 10 "${MODEL_TIMEOUT_S:-400}" python3 bench/cold_start.py --models "$MODEL" --arms ${ARMS:-cold aot bundle warm-caches} \
            --out "$OUT/cold_$MODEL" >"$OUT/cold_$MODEL.log" 2>&1
        done_at "cold_$MODEL" $?
        if [ -f "$OUT/cold_$MODEL/cold_start.md" ]; then sed -n '3,30p' "$OUT/cold_$MODEL/cold_start.md"; else tail -n 30 "$OUT/cold_$MODEL.log"; fi
    done
    if [ "${TEST_TIMEOUT_S:-150}" != 0 ]; then  # TEST_TIMEOUT_S=0: no GPU test after the models
        timeout -k 10 "${TEST_TIMEOUT_S:-150}" python3 -m pytest -q -rf --tb=short -m gpu tests/test_serving_bundle_aot.py \
            -p no:cacheprovider >"$OUT/gpu_tests.txt" 2>&1
        done_at gpu_tests $?
        tail -n 12 "$OUT/gpu_tests.txt"
    fi
    cat "$OUT/status.txt"
    ;;
m)
    # The README's main job with --parallel 6 (timed), then the A/A control alone (bench/aa_alone.toml) with
    # --parallel 1: how much the GEMM picks and kernel times of one arm's processes spread with nothing beside them.
    main_job_timed "${MAIN_TIMEOUT_S:-280}" --parallel "${PARALLEL:-6}"
    timeout -k 10 "${AA_TIMEOUT_S:-290}" python3 -m inductor_knobs ablate --config bench/aa_alone.toml --parallel 1 --iters 200 \
        --out "$OUT/aa" --overwrite >"$OUT/aa.log" 2>&1
    done_at aa $?
    grep -E "^\| (gated|force)" "$OUT/aa.log" | cut -c1-300
    for f in "$OUT"/main/runs/run-*.json "$OUT"/aa/runs/run-*.json; do
        python3 -c "import json, sys; d = json.load(open(sys.argv[1])); print(sys.argv[1].split('/')[-3], d.get('arm'), d.get('repeat'), \
            round(d.get('kernel_ms') or 0, 4), d.get('gemm_calls'), round(d.get('autotune_seconds') or 0, 1))" "$f" 2>/dev/null
    done
    cat "$OUT/status.txt"
    ;;
p)
    # The README's main job alone with --parallel $PARALLEL (default 6; timed), and each run's kernel time, picks and lock use.
    main_job_timed "${MAIN_TIMEOUT_S:-280}" --parallel "${PARALLEL:-6}"
    for f in "$OUT"/main/runs/run-*.json; do
        python3 -c "import json, sys; d = json.load(open(sys.argv[1])); print(d.get('arm'), d.get('repeat'), round(d.get('kernel_ms') or 0, 4), \
            d.get('gemm_calls'), round(d.get('autotune_seconds') or 0, 1), round(d.get('autotune_lock_wait_seconds') or 0, 1), \
            round(d.get('autotune_lock_longest_hold_seconds') or 0, 2))" "$f" 2>/dev/null
    done
    cat "$OUT/status.txt"
    ;;
r)
    # Variants of the main job one after the other, $VARIANTS (default "main onebatch"): main (as a new user runs
    # it), onebatch (every run live at once: bench/ablate_cap.py 18, one batch of the quiet barrier), parallelN
    # (--parallel N): where the barrier's batches leave the GPU's compile slots idle.
    for v in ${VARIANTS:-main onebatch}; do
        case "$v" in
        main) ablate_timed main "${MAIN_TIMEOUT_S:-250}" python3 -m inductor_knobs ablate ;;
        onebatch) ablate_timed onebatch "${MAIN_TIMEOUT_S:-250}" python3 bench/ablate_cap.py 18 ablate ;;
        parallel*) ablate_timed "$v" "${MAIN_TIMEOUT_S:-250}" python3 -m inductor_knobs ablate --parallel "${v#parallel}" ;;
        esac
    done
    cat "$OUT/status.txt"
    ;;
esac
cat "$OUT/env.txt"
