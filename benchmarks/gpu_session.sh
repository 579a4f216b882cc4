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
# Budget (cold inductor cache on a fresh machine; compile_s on the 2-core CPU was 15-46 s per mode),
# one part per variant so that one slow compilation cannot cost the others their rows:
#   1. the targets, costliest first: MT+VD+MUR <= 170 s, MT+VD <= 120 s, MT <= 90 s (none/model/step, fp32)
#   2. the other MT variants: MT+MUR direct, MT+MUR PGA 5 steps           <= 100 s
#   3. FixMatch at its own batch: FM, FM+VD, FM+MUR                       <=  60 s
#   4. if time is left: MT+VD+MUR in bf16 + channels_last, eager and step <=  60 s
# The image's Python is python3 (PYTHON overrides it).
# Test it on the CPU first:  GPU_SESSION_DEVICE=cpu STEPS=5 OUT=/tmp/gs bash benchmarks/gpu_session.sh
set -u
OUT=${OUT:-benchmarks/results/gpu_session}
DEVICE=${GPU_SESSION_DEVICE:-cuda}
STEPS=${STEPS:-100}
TOTAL=${TOTAL:-550}   # seconds for the whole script: a part gets min(its limit, what is left), none under 20 s
mkdir -p "$OUT"
export PYTHONPATH=. PYTHONUNBUFFERED=1
PY=${PYTHON:-python3}
LOG="$OUT/session.log"   # one log for every part: the device tool returns at most 8 files
bench() {  # bench SECONDS NAME ARGS...: one part, its JSON in $OUT/NAME.json, its output in the log
    local limit=$1 name=$2 left=$((TOTAL - SECONDS))
    shift 2
    (( left < limit )) && limit=$left
    if (( limit < 20 )); then echo "== $name: skipped, ${left} s left" | tee -a "$LOG"; return; fi
    echo "== $name (<= ${limit} s, at ${SECONDS} s)" | tee -a "$LOG"
    timeout "$limit" "$PY" benchmarks/trainer_throughput.py --device "$DEVICE" --steps "$STEPS" \
        --out "$OUT/$name.json" "$@" 2>&1 | tee -a "$LOG" | grep -v "^\s*$" | tail -12
    echo "== $name: exit ${PIPESTATUS[0]} (124: timed out; the JSON keeps the rows measured)" | tee -a "$LOG"
}
{ nvidia-smi -L 2>/dev/null || echo "no nvidia-smi"; "$PY" -c "import torch; print('torch', torch.__version__)"; } \
    2>&1 | tee -a "$LOG"
bench 170 mt_vd_mur --variants "MT+VD+MUR"
bench 120 mt_vd --variants "MT+VD"
bench 90 mt --variants "MT"
bench 100 mur --variants "MT+MUR direct,MT+MUR PGA 5 steps"
bench 60 fixmatch --family fixmatch
bench 60 mt_vd_mur_bf16 --variants "MT+VD+MUR" --bf16 --channels-last --compile none,step   # only if time is left
rm -f "$OUT"/*.tmp
echo "== done at ${SECONDS} s" | tee -a "$LOG"
