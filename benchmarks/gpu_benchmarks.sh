#!/usr/bin/env bash
# The training step's GPU benchmarks, in priority order, on one CUDA GPU (about 10 minutes):
#
#     OUT=/tmp/gpu bash benchmarks/gpu_benchmarks.sh
#
# Eager against TrainConfig.compile="step" and "graphs" (the compiled step recorded and replayed as
# CUDA graphs), ConvNet-13 on CIFAR-shaped data, batch 25 + 75 (benchmarks/trainer_throughput.py):
#   1. mt:      MT none/step/graphs, 5 rounds                                               <= 100 s
#   2. mur:     MT+VD+MUR none/step/graphs                                                  <= 190 s
#   3. tests:   the compiled-vs-eager equivalence test on CUDA, graphs then step (TF32 off),
#               and the EMA's bit-for-bit test; exit codes logged                           <= 150 + 30 s
#   4. vd:      MT+VD none/graphs                                                           <= 90 s
#   5. bf16:    MT+VD+MUR in bf16 + channels_last, none/graphs                              <= 150 s
#   6. pga, fixmatch: MT+MUR PGA 5 steps none/step, FixMatch none/graphs                    <= 120 s each
# Each part has its own timeout and the benchmark rewrites its JSON after every row, so a part cut
# short keeps what it measured; no part starts once TOTAL seconds are spent. PARTS picks the parts,
# e.g. the rest of a run cut short, at once while inductor's cache is warm:
#     OUT=/tmp/gpu PARTS=vd,bf16,pga,fixmatch TOTAL=250 bash benchmarks/gpu_benchmarks.sh
# To keep the figures, copy $OUT/<part>.json to benchmarks/results/trainer_throughput_<card>_graphs_<part>.json
# (the paper presets' compile modes, search_spaces/common.py PAPER_COMPILED, rest on those files) and
# $OUT/gpu_benchmarks.log beside them.
# A check that it runs, on the CPU:  DEVICE=cpu STEPS=2 TOTAL=90 OUT=/tmp/gb bash benchmarks/gpu_benchmarks.sh
set -u
OUT=${OUT:-benchmarks/results/gpu}
DEVICE=${DEVICE:-cuda}
STEPS=${STEPS:-100}
TOTAL=${TOTAL:-560}   # seconds for the whole script: a part gets min(its limit, what is left), none under 20 s
PARTS=${PARTS:-mt,mur,tests,vd,bf16,pga,fixmatch}   # which parts run
want() { [[ ",$PARTS," == *",$1,"* ]]; }
mkdir -p "$OUT" && OUT=$(cd "$OUT" && pwd)
export PYTHONUNBUFFERED=1
PY=${PYTHON:-python3}
LOG="$OUT/gpu_benchmarks.log"   # one log for every part
limit_for() {  # limit_for SECONDS: min(SECONDS, what TOTAL leaves); prints nothing if under 20 s
    local left=$((TOTAL - SECONDS)) limit=$1
    (( left < limit )) && limit=$left
    (( limit >= 20 )) && echo "$limit"
}
bench() {  # bench SECONDS NAME ARGS...: one benchmark part, $OUT/NAME.json, the log
    local name=$2 limit
    limit=$(limit_for "$1") || { echo "== $name: skipped, $((TOTAL - SECONDS)) s left" | tee -a "$LOG"; return; }
    shift 2
    echo "== $name (<= ${limit} s, at ${SECONDS} s)" | tee -a "$LOG"
    PYTHONPATH=. timeout "$limit" "$PY" benchmarks/trainer_throughput.py --device "$DEVICE" \
        --steps "$STEPS" --out "$OUT/$name.json" "$@" 2>&1 | tee -a "$LOG" | grep -v "^\s*$" | tail -12
    echo "== $name: exit ${PIPESTATUS[0]} (124: timed out; the JSON keeps the rows measured)" | tee -a "$LOG"
}
cuda_tests() {  # cuda_tests SECONDS NAME PYTEST-ARGS...: CUDA cases of some tests, exit status logged
    local name=$2 limit
    limit=$(limit_for "$1") || { echo "== tests: $name: skipped, $((TOTAL - SECONDS)) s left" | tee -a "$LOG"; return; }
    shift 2
    echo "== tests: $name (<= ${limit} s, at ${SECONDS} s)" | tee -a "$LOG"
    PYTHONPATH=. timeout "$limit" "$PY" -m pytest -q -p no:cacheprovider "$@" 2>&1 | tee -a "$LOG" | tail -4
    echo "== tests: $name: exit ${PIPESTATUS[0]} (0 passed, 1 failed, 5 none collected, 124 timed out)" | tee -a "$LOG"
}
{ nvidia-smi -L 2>/dev/null || echo "no nvidia-smi"; "$PY" -c "import torch; print('torch', torch.__version__)"; } \
    2>&1 | tee -a "$LOG"
want mt && bench 100 mt --variants MT --compile none,step,graphs --repeats 5
want mur && bench 190 mt_vd_mur --variants "MT+VD+MUR" --compile none,step,graphs
if [[ "$DEVICE" == cuda ]] && want tests; then
    cuda_tests 150 "compiled vs eager" tests/test_compile.py -k "matches_eager and cuda"   # model, step, graphs
    cuda_tests 30 "EMA bit-for-bit" tests/test_loss_values.py -k cuda
fi
want vd && bench 90 mt_vd --variants "MT+VD" --compile none,graphs
want bf16 && bench 150 mt_vd_mur_bf16 --variants "MT+VD+MUR" --bf16 --channels-last --compile none,graphs
want pga && bench 120 pga --variants "MT+MUR PGA 5 steps" --compile none,step   # graphs: ConfigError (fails on CUDA)
want fixmatch && bench 120 fixmatch --family fixmatch --variants FM,FM+VD --compile none,graphs
rm -f "$OUT"/*.tmp
echo "== done at ${SECONDS} s" | tee -a "$LOG"
