#!/usr/bin/env bash
# Env activation: no code change.  Every Python process started from here (and its child
# processes) opens the SM gate at >= 40 SMs and turns GEMM autotuning on.  The installed startup
# .pth hook applies the variables when Inductor's compile entry (torch._inductor.compile_fx) is
# first imported, i.e. at the process's first Inductor compile: before it, torch's config and gate
# are untouched, and a process that never compiles imports neither torch nor inductor_knobs.
# `inductor-knobs doctor` shows what the variables resolve to.
set -euo pipefail
# The README's virtualenv (.venv at the repository root) unless $PYTHON names another interpreter.
python="${PYTHON:-$(cd "$(dirname "$0")/.." && pwd)/.venv/bin/python}"
[ -x "$python" ] || python=python3
export INDUCTOR_KNOBS_PRESET=force_gemm_autotune   # max_autotune_gemm=1, gemm_backends=ATEN,TRITON
export INDUCTOR_KNOBS_MIN_SMS=40
export INDUCTOR_KNOBS_CUDAGRAPHS=0
"$python" -m inductor_knobs doctor --min-sms "$INDUCTOR_KNOBS_MIN_SMS"
# The demo compiles in a fresh Inductor cache: a graph served from an earlier run's cache is not
# compiled again, so there would be nothing to read inside a compile.
demo_cache="$(mktemp -d)"
trap 'rm -rf "$demo_cache"' EXIT
TORCHINDUCTOR_CACHE_DIR="$demo_cache" "$python" - <<'PY'
import torch
import torch._inductor.utils as utils

import inductor_knobs as ik
from inductor_knobs.core import gate

torch_gate = utils.is_big_gpu


def state() -> str:
    wrapped = utils.is_big_gpu is gate.installed_wrapper() and gate.original_gate() is torch_gate
    applied = ik.active_env_knobs()
    return f"env knobs applied: {applied.to_dict() if applied else None} | is_big_gpu is inductor_knobs' wrapper of torch's: {wrapped}"


print("before the first compile:", state())


def f(x):
    return torch.relu(x @ x.T) + 1


# A tiny compile (CPU is fine).  record_compiles reads every asked value inside Inductor's compile.
with ik.record_compiles() as rec:
    torch.compile(f)(torch.randn(8, 8))
if not rec.attestations:
    print("no Inductor compile ran (served from a cache?): nothing was read inside one")
for att in rec.attestations:
    print(f"compile {att.compile_id} ({att.graph}) compiled with:")
    for s in att.settings:
        print(f"  {s.key} = {s.compiled_with!r}  (from {s.came_from}{'' if s.ok else ': ' + str(s.cause)})")
print("after it:", state(), "| gate override:", gate.current_override())
PY
