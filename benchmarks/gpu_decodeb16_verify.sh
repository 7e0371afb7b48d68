#!/usr/bin/env bash
# NOTES-triton.md version 8 (decodeb16, after its round): the stream decode's EARLY prologue
# (every load before the first tile at once; the new key folded in before the key loop)
# checked and timed next to the adopted tile, <= 60 s on an H200, one file
# $OUT/decodeb16_verify.tgz (decodeb16_verify/: tests_early.log, the stream GPU tests of EARLY
# and the graph replays; sweep_decode.{json,md}, VERIFY=1 sweep_decodeb16.py: per row the
# plan, cuDNN, flash, stream as adopted, stream EARLY, both at two programs an SM; run.log).
#   cd <repo root> && OUT=/some/dir bash benchmarks/gpu_decodeb16_verify.sh
set -u
OUT=${OUT:-.}
D=$OUT/decodeb16_verify
mkdir -p "$D/warm"
export PYTHONPATH=$PWD/src${PYTHONPATH:+:$PYTHONPATH} PYTHONUNBUFFERED=1 VERIFY=1
T0=$(date +%s)
left() { echo $(( ${BUDGET_S:-57} - ($(date +%s) - T0) )); }
stamp() { echo "$1 at $(( $(date +%s) - T0 )) s" | tee -a "$D/run.log"; }
PY=python3
ROWS="b16-1k b16-4k b16-32k b1-1k b64-4k b128-4k"
W=${WARM_S:-24}
# 1. the EARLY smoke test (a hang shows here), its tests and the replays, and the warm-up of
#    every row (untimed), in parallel processes
timeout 20 $PY -m pytest -q -m gpu -p no:cacheprovider -x tests/triton_kernels/test_triton_decode_stream_gpu.py \
  -k "early_prologue and 128-32-8-bf16 and None and True" > "$D/tests_smoke.log" 2>&1 &
SMOKE=$!
timeout "$W" $PY -m pytest -q -m gpu -p no:cacheprovider tests/triton_kernels/test_triton_decode_stream_gpu.py \
  -k "early or replays" > "$D/tests_early.log" 2>&1 &
for r in $ROWS; do
  timeout "$W" $PY benchmarks/sweep_decodeb16.py --only $r --warm --out "$D/warm" > "$D/warm_$r.log" 2>&1 &
done
wait $SMOKE
SMOKE_RC=$?
wait
stamp "smoke rc $SMOKE_RC; tests $(tail -1 "$D/tests_early.log")"
[ "$SMOKE_RC" -eq 124 ] && export NO_EARLY=1 && stamp "EARLY smoke test timed out: sweep without it"
# 2. the rows, timed, alone on the GPU (one process)
G=$(( $(left) - 2 )); [ "$G" -lt 5 ] && G=5
timeout "$G" $PY benchmarks/sweep_decodeb16.py --only ${ROWS// /,} --budget-s 6 --guard-budget-s 4 \
  --out "$D" > "$D/sweep.log" 2>&1
stamp "sweep rc $?"
$PY benchmarks/sweep_decodeb16.py --table --out "$D" > /dev/null 2>&1
rm -rf "$D/warm"
tar czf "$OUT/decodeb16_verify.tgz" -C "$OUT" decodeb16_verify && rm -rf "$D"
tar xzf "$OUT/decodeb16_verify.tgz" -O decodeb16_verify/sweep_decode.md 2>/dev/null | sed -n 3,11p
tar xzf "$OUT/decodeb16_verify.tgz" -O decodeb16_verify/run.log 2>/dev/null
echo "total $(( $(date +%s) - T0 )) s"
