#!/usr/bin/env bash
# Issue 28 (session 2026-12-02f): the GPU tests of what changed (stream EARLY at d128, the
# argmax kernel, the decode graphs), then the H200 profile measured afresh by `attnkit tune`
# (resumable: a profile left in $OUT by an earlier call is continued), all phases.
#   cd <repo root> && OUT=/some/dir [PROFILE=path] bash benchmarks/gpu_retune28.sh
set -u
OUT=${OUT:-.}
export PYTHONPATH=$PWD/src${PYTHONPATH:+:$PYTHONPATH} PYTHONUNBUFFERED=1
T0=$SECONDS
LIMIT=${LIMIT_S:-560}
P=$OUT/nvidia-h200.json
[ -n "${PROFILE:-}" ] && cp "$PROFILE" "$P"
if [ -z "${NO_TESTS:-}" ]; then
  timeout 150 python3 -m pytest -q -m gpu -n 8 -p no:cacheprovider \
    tests/triton_kernels/test_triton_decode_stream_gpu.py tests/runner/test_fused_layers.py \
    tests/runner/test_runner_graphs_gpu.py tests/runner/test_runner_gpu.py > "$OUT/gpu_tests.log" 2>&1
  echo "tests rc $? ($(tail -1 "$OUT/gpu_tests.log")) at $((SECONDS - T0)) s"
fi
for args in "" "--phase varlen" "--models deepseek-v3.2 --backends triton_dsa"; do
  left=$(( LIMIT - (SECONDS - T0) )); [ "$left" -lt 20 ] && break
  timeout "$left" python3 -m attnkit tune $args --out "$P" >> "$OUT/tune.log" 2>&1
  echo "tune '$args' rc $? at $((SECONDS - T0)) s"
done
grep -v USDT "$OUT/tune.log" | tail -5
