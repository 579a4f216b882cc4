#!/usr/bin/env bash
# Issue 14's GPU measurements, for a session that is lent an H100/H200 (15 minutes of device time in
# all, a machine start included, at most 10 minutes a command). One call runs this:
#
#     run(command="OUT=$OUT bash benchmarks/gpu_session.sh", timeout_s=590, carry=[".baseline"])
#
# The first run (H200, 2026-11-26) measured every variant eager/model/step:
# benchmarks/results/trainer_throughput_h200_compile_*.json (MT+VD 2.40x: met; MT 0.96x and
# MT+VD+MUR 1.34x: not; profile_step.py: MT is bound by the host's launches, MT+VD+MUR by its fp32
# convolutions). This second script measures what came after it, in priority order:
#   1. the compiled-vs-eager equivalence and EMA tests on CUDA (tests skipped on the CPU)     <=  90 s
#   2. MT, none/step: today's code against the baseline tree side by side (the step without the
#      teacher's BN save-and-restore and with the multi-tensor EMA: ~115 fewer launches)      <= 2 x 60 s
#   3. graph_step_bound.py: the step captured as one CUDA graph and replayed, against eager  <= 100 s
#      (MT, the launch-bound one; an upper bound: the per-step host decisions are frozen in it)
#   4. MT+VD+MUR in bf16 + channels_last, none/step (the route to 2.0x: fewer flops per conv) <= 150 s
#   5. what the first run's time cut: MT+MUR PGA 5 steps and FixMatch, none/step             <= 120 s
# The baseline tree is the code the first run measured, carried as an ignored folder:
#     echo /.baseline/ >> .git/info/exclude; mkdir -p .baseline; git archive a0599e8 | tar -x -C .baseline
# Then copy $OUT/*.json into benchmarks/results/ (named after the card) and update the README table.
# Each part has its own timeout and the benchmark rewrites its JSON after every row, so a part cut
# short keeps what it measured; the script stops starting parts when TOTAL seconds are spent.
# Test it on the CPU first:  GPU_SESSION_DEVICE=cpu STEPS=5 OUT=/tmp/gs bash benchmarks/gpu_session.sh
set -u
OUT=${OUT:-benchmarks/results/gpu_session}
DEVICE=${GPU_SESSION_DEVICE:-cuda}
STEPS=${STEPS:-100}
TOTAL=${TOTAL:-550}   # seconds for the whole script: a part gets min(its limit, what is left), none under 20 s
mkdir -p "$OUT" && OUT=$(cd "$OUT" && pwd)   # absolute: a part may run in another tree
export PYTHONUNBUFFERED=1
PY=${PYTHON:-python3}
LOG="$OUT/session.log"   # one log for every part: the device tool returns at most 8 files
bench() {  # [TREE=dir] bench SECONDS NAME ARGS...: one part run in TREE (default .), $OUT/NAME.json, the log
    local limit=$1 name=$2 left=$((TOTAL - SECONDS)) tree=${TREE:-.}
    shift 2
    (( left < limit )) && limit=$left
    if (( limit < 20 )); then echo "== $name: skipped, ${left} s left" | tee -a "$LOG"; return; fi
    echo "== $name in $tree (<= ${limit} s, at ${SECONDS} s)" | tee -a "$LOG"
    (cd "$tree" && PYTHONPATH=. timeout "$limit" "$PY" benchmarks/trainer_throughput.py --device "$DEVICE" \
        --steps "$STEPS" --out "$OUT/$name.json" "$@") 2>&1 | tee -a "$LOG" | grep -v "^\s*$" | tail -12
    echo "== $name: exit ${PIPESTATUS[0]} (124: timed out; the JSON keeps the rows measured)" | tee -a "$LOG"
}
{ nvidia-smi -L 2>/dev/null || echo "no nvidia-smi"; "$PY" -c "import torch; print('torch', torch.__version__)"; } \
    2>&1 | tee -a "$LOG"
if [[ "$DEVICE" == cuda ]]; then
    echo "== tests on CUDA (at ${SECONDS} s)" | tee -a "$LOG"
    PYTHONPATH=. timeout 90 "$PY" -m pytest -q -p no:cacheprovider tests/test_compile.py tests/test_loss_values.py \
        -k cuda 2>&1 | tee -a "$LOG" | tail -5
fi
bench 60 mt --variants MT --compile none,step
if [[ -d .baseline ]]; then  # the same part in the first run's code, then today's eager again (A B A)
    TREE=.baseline bench 60 mt_baseline --variants MT --compile none,step
    bench 30 mt_recheck --variants MT --compile none
else
    echo "== mt_baseline: skipped, no .baseline tree (see the header)" | tee -a "$LOG"
fi
if [[ "$DEVICE" == cuda ]]; then  # how fast a step launched by no host at all could be (an upper bound)
    left=$((TOTAL - SECONDS)); limit=$(( left < 100 ? left : 100 ))
    echo "== graph (<= ${limit} s, at ${SECONDS} s)" | tee -a "$LOG"
    PYTHONPATH=. timeout "$limit" "$PY" benchmarks/graph_step_bound.py --variants MT --compile none,step \
        --out "$OUT/graph.json" 2>&1 | tee -a "$LOG" | grep -E "steps/s|FAILED"
fi
bench 150 mt_vd_mur_bf16 --variants "MT+VD+MUR" --bf16 --channels-last --compile none,step
bench 60 pga --variants "MT+MUR PGA 5 steps" --compile none,step
bench 60 fixmatch --family fixmatch --variants FM,FM+VD --compile none,step
rm -f "$OUT"/*.tmp
echo "== done at ${SECONDS} s" | tee -a "$LOG"
