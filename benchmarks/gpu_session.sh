#!/usr/bin/env bash
# Issue 14's GPU measurements, prepared for a session that is lent an H100/H200 (15 minutes of device
# time in all, a machine start included, at most 10 minutes a command). One call runs this:
#
#     run(command="OUT=$OUT bash benchmarks/gpu_session.sh", timeout_s=590)     # the device tool
#
# Parts in priority order, each under its own timeout so that a slow compilation cuts the part
# short, not the session: trainer_throughput.py rewrites its JSON after every measured row, so a
# part that times out still returns the rows it finished. Eager and compiled modes of a variant
# run back to back in one process (the ratios are side by side). Then copy $OUT/*.json into
# benchmarks/results/ (named after the card) and fill the README's compiled-step table from them.
#
# Budget (cold inductor cache on a fresh machine; compile_s on the 2-core CPU was 15-46 s per mode):
#   1. the targets: MT, MT+VD, MT+VD+MUR x none/model/step, fp32        <= 300 s
#   2. the other MT variants: MT+MUR direct, MT+MUR PGA 5 steps           <= 150 s
#   3. FixMatch at its own batch: FM, FM+VD, FM+MUR                       <= 120 s
# Test it on the CPU first:  GPU_SESSION_DEVICE=cpu STEPS=5 OUT=/tmp/gs bash benchmarks/gpu_session.sh
set -u
OUT=${OUT:-benchmarks/results/gpu_session}
DEVICE=${GPU_SESSION_DEVICE:-cuda}
STEPS=${STEPS:-100}
mkdir -p "$OUT"
export PYTHONPATH=.
bench() {  # bench SECONDS NAME ARGS...: one part, its log beside its JSON
    local limit=$1 name=$2
    shift 2
    echo "== $name (<= ${limit} s)"
    timeout "$limit" python benchmarks/trainer_throughput.py --device "$DEVICE" --steps "$STEPS" \
        --out "$OUT/$name.json" "$@" 2>&1 | tee "$OUT/$name.log" | grep -v "^\s*$" | tail -12
    echo "== $name: exit ${PIPESTATUS[0]} (124: timed out; the JSON keeps the rows measured)"
}
{ nvidia-smi -L 2>/dev/null || echo "no nvidia-smi"; python -c "import torch; print('torch', torch.__version__)"; } \
    | tee "$OUT/machine.txt"
bench 300 targets --variants "MT,MT+VD,MT+VD+MUR"
bench 150 mur --variants "MT+MUR direct,MT+MUR PGA 5 steps"
bench 120 fixmatch --family fixmatch
