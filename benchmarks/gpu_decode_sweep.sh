#!/usr/bin/env bash
# Issue 28's decode sweep in one device call (about 3-4 min on the H200), then the decode GPU
# tests of the kernel switches. Results: $OUT/sweep_decode.json / .md, logs in $OUT.
#   cd <repo root> && OUT=/some/dir bash benchmarks/gpu_decode_sweep.sh
# 1. Warm Triton's on-disk kernel cache: each row's candidates run once, untimed, in parallel
#    processes (compiling is most of a cold candidate's time). 2. Time the rows, a few a
#    process, one process after another (a hung kernel costs its group, not the run).
set -u
OUT=${OUT:-.}
mkdir -p "$OUT"
export PYTHONPATH=$PWD/src${PYTHONPATH:+:$PYTHONPATH} PYTHONUNBUFFERED=1
# VERIFY=1: the previous defaults against the plan's row (today's), ~2 min with the tests
if [ "${VERIFY:-0}" = 1 ]; then
  MODE=--verify
  GROUPS_=${GROUPS_:-"d256,d64,b1-1k,b1-4k,d256-b1-32k,d64-b1-32k,b16-1k,b64-4k"}
else
  MODE=
  GROUPS_=${GROUPS_:-"d256,d64,b1-1k b16-1k,b16-4k,b16-32k b64-1k,b64-4k,b1-32k"}
fi
T0=$(date +%s)
for g in $GROUPS_; do
  for r in ${g//,/ }; do
    timeout "${WARM_S:-90}" python3 benchmarks/sweep_decode.py --only "$r" --warm $MODE --out "$OUT" \
      > "$OUT/warm_$r.log" 2>&1 &
  done
done
wait
echo "warm done after $(( $(date +%s) - T0 )) s" | tee -a "$OUT/sweep_decode.log"
for g in $GROUPS_; do
  timeout "${GROUP_S:-90}" python3 benchmarks/sweep_decode.py --only "$g" $MODE --out "$OUT" \
    --budget-s "${ROW_BUDGET_S:-18}" >> "$OUT/sweep_decode.log" 2>&1
  echo "rows $g rc $? at $(( $(date +%s) - T0 )) s" | tee -a "$OUT/sweep_decode.log"
done
python3 benchmarks/sweep_decode.py --table --out "$OUT" | head -20
if [ "${TESTS:-1}" = 1 ]; then
  timeout "${TEST_S:-60}" python3 -m pytest -q -m gpu -n 4 -p no:cacheprovider \
    tests/triton_kernels/test_triton_gpu.py -k "decode_config_switches or long_decode or pdl or (head_dims_and_dtypes and decode)" 2>&1 | tail -5
fi
echo "total $(( $(date +%s) - T0 )) s"
