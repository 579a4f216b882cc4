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
#   1. the EMA and compiled-vs-eager equivalence tests on CUDA (skipped on the CPU)        <= 40 + 180 s
#   2. MT, none/step: today's code against the baseline tree side by side, A B A, 7 rounds each (the
#      step without the teacher's BN save-and-restore, with the multi-tensor EMA: ~107 fewer
#      launches, perhaps 5-7 % of the step; single rounds spread 10-15 %, so one cannot tell)  <= 150 s
#   3. graph_step_bound.py: the step captured as one CUDA graph and replayed, against eager  <= 100 s
#      (MT, the launch-bound one; an upper bound: the per-step host decisions are frozen in it)
#   4. MT+VD+MUR in bf16 + channels_last, none/step (the route to 2.0x: fewer flops per conv) <= 150 s
#   5. what the first run's time cut: MT+MUR PGA 5 steps and FixMatch, none/step             <= 120 s
# The baseline tree is the code the first run measured, carried as an ignored folder:
#     echo /.baseline/ >> .git/info/exclude; mkdir -p .baseline; git archive a0599e8 | tar -x -C .baseline
# Then copy $OUT/*.json into benchmarks/results/ (named after the card) and update the README table.
# Each part has its own timeout and the benchmark rewrites its JSON after every row, so a part cut
# short keeps what it measured; the script stops starting parts when TOTAL seconds are spent. Parts 1-3
# fill most of one call; if device time is left, a second call runs the rest while the machine is warm:
#     run(command="OUT=$OUT PARTS=bf16,pga,fixmatch TOTAL=250 bash benchmarks/gpu_session.sh", timeout_s=280)
# Test it on the CPU first:  GPU_SESSION_DEVICE=cpu STEPS=5 OUT=/tmp/gs bash benchmarks/gpu_session.sh
set -u
OUT=${OUT:-benchmarks/results/gpu_session}
DEVICE=${GPU_SESSION_DEVICE:-cuda}
STEPS=${STEPS:-100}
TOTAL=${TOTAL:-560}   # seconds for the whole script: a part gets min(its limit, what is left), none under 20 s
PARTS=${PARTS:-tests,mt,graph,bf16,pga,fixmatch}   # which parts run; a second call can run the rest
want() { [[ ",$PARTS," == *",$1,"* ]]; }
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
cuda_tests() {  # cuda_tests SECONDS NAME PYTEST-ARGS...: the CUDA cases of some tests, exit status logged
    local limit=$1 name=$2
    shift 2
    echo "== tests: $name (<= ${limit} s, at ${SECONDS} s)" | tee -a "$LOG"
    PYTHONPATH=. timeout "$limit" "$PY" -m pytest -q -p no:cacheprovider "$@" -k cuda 2>&1 | tee -a "$LOG" | tail -4
    echo "== tests: $name: exit ${PIPESTATUS[0]} (0 passed, 1 failed, 5 none collected, 124 timed out)" | tee -a "$LOG"
}
if [[ "$DEVICE" == cuda ]] && want tests; then
    cuda_tests 40 "EMA bit-for-bit" tests/test_loss_values.py                  # cheap: first
    cuda_tests 180 "compiled vs eager" tests/test_compile.py                   # two cold compiles
fi
if want mt; then
    bench 60 mt --variants MT --compile none,step --repeats 7
    if [[ -d .baseline ]]; then  # the same part in the first run's code, then today's eager again (A B A)
        TREE=.baseline bench 60 mt_baseline --variants MT --compile none,step --repeats 7
        bench 30 mt_recheck --variants MT --compile none --repeats 7
    else
        echo "== mt_baseline: skipped, no .baseline tree (see the header)" | tee -a "$LOG"
    fi
fi
left=$((TOTAL - SECONDS)); limit=$(( left < 100 ? left : 100 ))
if [[ "$DEVICE" == cuda ]] && want graph && (( limit >= 20 )); then  # a step launched by no host at all (an upper bound)
    echo "== graph (<= ${limit} s, at ${SECONDS} s)" | tee -a "$LOG"
    PYTHONPATH=. timeout "$limit" "$PY" benchmarks/graph_step_bound.py --variants MT --compile none,step \
        --out "$OUT/graph.json" 2>&1 | tee -a "$LOG" | grep -E "steps/s|FAILED"
fi
want bf16 && bench 150 mt_vd_mur_bf16 --variants "MT+VD+MUR" --bf16 --channels-last --compile none,step
want pga && bench 60 pga --variants "MT+MUR PGA 5 steps" --compile none,step
want fixmatch && bench 60 fixmatch --family fixmatch --variants FM,FM+VD --compile none,step
rm -f "$OUT"/*.tmp
echo "== done at ${SECONDS} s" | tee -a "$LOG"
