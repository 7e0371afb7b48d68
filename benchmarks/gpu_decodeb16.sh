#!/usr/bin/env bash
# Issue 28's B=16 decode rows (d128, ctx 1k / 4k / 32k): the stream variant (decode_stream.py,
# Gluon TMA ring) checked and timed in one device call, <= 90 s on an H200 (each part
# time-boxed; a part that fails or runs out leaves the others' files). Everything lands in
# $OUT/decodeb16/, packed as ONE file $OUT/decodeb16.tgz:
#   tests_*.log            tests/triton_kernels/test_triton_decode_stream_gpu.py in 3 slices +
#                          a smoke test: the stream kernel vs the float64 reference (unequal
#                          lengths, NaN / inf in every unowned slot, splits, tiles, pages of
#                          16 / 32 / 64, fused write, CUDA-graph replays); run while the kernel
#                          cache is warmed, never while the sweep times; tests_capture.log: the
#                          capture conformance case of stream (a static step replayed over
#                          other lengths, block tables and padded rows)
#   sweep_decode.{json,md} sweep_decodeb16.py: stream tiles vs cuDNN / flash / the plan /
#                          split_merge / split_heads, same process, each checked against SDPA
#                          first; guard rows B=1 1k / 32k, B=64 4k, B=128 4k, d64 B=16 / B=64 4k
#   *.log, run.log         each part's log and the part times
#   cd <repo root> && OUT=/some/dir bash benchmarks/gpu_decodeb16.sh
set -u
OUT=${OUT:-.}
D=$OUT/decodeb16
mkdir -p "$D/warm"
export PYTHONPATH=$PWD/src${PYTHONPATH:+:$PYTHONPATH} PYTHONUNBUFFERED=1
T0=$(date +%s)
left() { echo $(( ${BUDGET_S:-86} - ($(date +%s) - T0) )); }
stamp() { echo "$1 at $(( $(date +%s) - T0 )) s" | tee -a "$D/run.log"; }
PY=python3
TESTS=tests/triton_kernels/test_triton_decode_stream_gpu.py
PYT="$PY -m pytest -q -m gpu -p no:cacheprovider $TESTS"
nvidia-smi --query-gpu=name,clocks.sm,clocks.mem --format=csv > "$D/gpu.txt" 2>&1
# 1. a smoke test (one shape: hangs show here), the tests in 3 slices and the warm-up of every
#    row's candidates (Triton's kernel cache), all in parallel processes, untimed
W=${WARM_S:-30}
timeout 24 $PYT -x -k "matches_reference and 128-32-8-bf16 and None and True" > "$D/tests_smoke.log" 2>&1 &
SMOKE=$!
timeout "$W" $PYT -k "matches_reference and bf16" > "$D/tests_bf16.log" 2>&1 &
timeout "$W" $PYT -k "matches_reference and fp16" > "$D/tests_fp16.log" 2>&1 &
timeout "$W" $PYT -k "not matches_reference" > "$D/tests_rest.log" 2>&1 &
timeout "$W" $PY -m pytest -q -m gpu -p no:cacheprovider tests/conformance/test_capture.py \
  -k "decode_variantstream" > "$D/tests_capture.log" 2>&1 &
for r in b16-1k b16-4k b16-32k; do
  for i in 0 1 2; do
    timeout "$W" $PY benchmarks/sweep_decodeb16.py --only $r --warm --slice $i/3 \
      --out "$D/warm" > "$D/warm_${r}_$i.log" 2>&1 &
  done
done
for r in b1-1k b1-32k b64-4k b128-4k b16-4k-d64 d64; do
  timeout "$W" $PY benchmarks/sweep_decodeb16.py --only $r --warm --out "$D/warm" \
    > "$D/warm_$r.log" 2>&1 &
done
wait $SMOKE
SMOKE_RC=$?
wait
stamp "smoke rc $SMOKE_RC; tests: bf16 $(tail -1 "$D/tests_bf16.log"); fp16 $(tail -1 "$D/tests_fp16.log"); rest $(tail -1 "$D/tests_rest.log"); capture $(tail -1 "$D/tests_capture.log")"
[ "$SMOKE_RC" -eq 124 ] && export NO_STREAM=1 && stamp "stream smoke test timed out: sweep without stream"
# 2. the sweep, timed, alone on the GPU: B=16 rows (one process), then the guards (another)
timeout "$(( $(left) > 30 ? 30 : $(left) ))" $PY benchmarks/sweep_decodeb16.py --only b16-1k,b16-4k,b16-32k \
  --budget-s "${ROW_BUDGET_S:-7}" --out "$D" > "$D/sweep_b16.log" 2>&1
stamp "sweep b16 rc $?"
G=$(( $(left) - 3 )); [ "$G" -lt 5 ] && G=5
timeout "$G" $PY benchmarks/sweep_decodeb16.py --only b1-1k,b1-32k,b64-4k,b128-4k,b16-4k-d64,d64 \
  --guard-budget-s "${GUARD_BUDGET_S:-3}" --out "$D" > "$D/sweep_guards.log" 2>&1
stamp "sweep guards rc $?"
$PY benchmarks/sweep_decodeb16.py --table --out "$D" > /dev/null 2>&1
rm -rf "$D/warm"
tar czf "$OUT/decodeb16.tgz" -C "$OUT" decodeb16 && rm -rf "$D"
tar xzf "$OUT/decodeb16.tgz" -O decodeb16/sweep_decode.md 2>/dev/null | sed -n 3,14p
tar xzf "$OUT/decodeb16.tgz" -O decodeb16/run.log 2>/dev/null
echo "total $(( $(date +%s) - T0 )) s"
