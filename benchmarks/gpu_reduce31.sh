#!/usr/bin/env bash
# Issue 28 (session 2026-12-03c), call 4: the MLA split reduce's tile by split count
# (configs.reduce_tile): the GPU tests of triton_mla and triton_dsa (their kernels and
# conformance cases), then gpu_mla16.sh (bench_mla16 and its profiler split).
#   cd <repo root> && OUT=/some/dir bash benchmarks/gpu_reduce31.sh
. benchmarks/gpu_common.sh
timeout ${TEST_S:-200} python3 -m pytest -q -m gpu -n 16 -p no:cacheprovider tests/triton_mla tests/triton_dsa \
  tests/conformance -k "mla or dsa" > "$W/gpu_tests.log" 2>&1
echo "tests rc $? ($(tail -1 "$W/gpu_tests.log")) at $((SECONDS - T0)) s"
grep -E "^FAILED|^ERROR" "$W/gpu_tests.log" | head -20
save
OUT=$OUT bash benchmarks/gpu_mla16.sh
echo "gpu_mla16 done at $((SECONDS - T0)) s"
