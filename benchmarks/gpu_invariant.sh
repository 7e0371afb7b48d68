#!/usr/bin/env bash
# triton's batch-invariant variants on the GPU (issue 30), in one call, about 3 minutes:
#  1. `attnkit tune --backends triton` resuming a copy of the shipped H200 profile: it times only
#     the variants the profile lacks (split_fixed, paged_fixed; tune/run.py pending) -> $OUT/nvidia-h200.json
#     (a profile from before the near-tie rule, docs/profile.md, is refused with AK232: re-tune it first)
#  2. `attnkit plan llama-3.1-8b --require batch-invariant` with that profile -> $OUT/plan_require.{txt,json}
#  3. the GPU cases of the bitwise suite for every declaring backend / variant (batch invariance,
#     determinism, CUDA-graph replay = eager), the fixed variants against the reference, and the
#     runner's deterministic mode planned with the new profile -> $OUT/invariant_gpu_tests.log
# Usage (repository root, on the CUDA machine): bash benchmarks/gpu_invariant.sh
set -u
export PYTHONPATH=src PYTHONUNBUFFERED=1
FINAL=${OUT:-/tmp/attnkit-gpu}; mkdir -p "$FINAL"
PROFILE="$FINAL/nvidia-h200.json"
cp src/attnkit/planning/profiles/nvidia-h200.json "$PROFILE"
timeout 120 python3 -m attnkit tune --backends triton --out "$PROFILE" 2>&1 | tail -n 5 | tee "$FINAL/tune.log"
python3 -m attnkit plan llama-3.1-8b --device h200 --require batch-invariant --profile "$PROFILE" > "$FINAL/plan_require.txt" 2>&1
python3 -m attnkit plan llama-3.1-8b --device h200 --require batch-invariant --profile "$PROFILE" --json > "$FINAL/plan_require.json" 2>&1
sed -n '/^backends/,/^settings/p' "$FINAL/plan_require.txt"
ATTNKIT_PROFILE="$PROFILE" timeout 150 python3 -m pytest -q -m gpu -p no:cacheprovider -n 4 \
  tests/conformance/test_bitwise.py tests/triton_kernels/test_triton_fixed.py \
  tests/runner/test_deterministic_mode.py 2>&1 | tee "$FINAL/invariant_gpu_tests.log" | tail -n 25
