#!/usr/bin/env bash
# Issue 28, engine (session 2026-12-03a): skinny.py with its prologue folds off by default.
# The runner's GPU tests; bench_fold.py (a layer's products five ways) with the PDL switch off
# and on; bench_runner with the products off (ATTNKIT_SKINNY=0), on (the default: epilogues
# only) and on with ATTNKIT_FUSED_PDL=1, alternating ROUNDS times; the step's profile.
#   cd <repo root> && OUT=/some/dir bash benchmarks/gpu_engine28d.sh
set -u
OUT=${OUT:-.}
export PYTHONPATH=$PWD/src${PYTHONPATH:+:$PYTHONPATH} PYTHONUNBUFFERED=1
T0=$SECONDS
nvidia-smi --query-gpu=name,clocks.sm,clocks.mem,temperature.gpu --format=csv,noheader
timeout ${TESTS_S:-150} python3 -m pytest -q -m gpu -n 4 -p no:cacheprovider tests/runner/test_skinny.py \
  tests/runner/test_fused_layers.py tests/runner/test_runner_gpu.py tests/runner/test_runner_graphs_gpu.py \
  > "$OUT/gpu_tests.log" 2>&1
echo "tests rc $? ($(tail -1 "$OUT/gpu_tests.log")) at $((SECONDS - T0)) s"
for pdl in 0 1; do
  mkdir -p "$OUT/fold_pdl$pdl"
  ATTNKIT_FUSED_PDL=$pdl timeout 120 python3 benchmarks/bench_fold.py --ms ${MS:-1,4,16} --out "$OUT/fold_pdl$pdl" \
    > "$OUT/fold_pdl$pdl/bench_fold.log" 2>&1
  echo "bench_fold pdl=$pdl rc $? at $((SECONDS - T0)) s"
done
run() {   # run NAME SKINNY PDL
  ATTNKIT_SKINNY=$2 ATTNKIT_FUSED_PDL=$3 timeout 110 python3 benchmarks/bench_runner.py --no-peer --no-compile \
    --no-greedy-check --json "$OUT/runner_$1.json" > "$OUT/runner_$1.log" 2>&1
  echo "bench_runner $1 (skinny=$2 pdl=$3) rc=$? at $((SECONDS - T0)) s"
}
for r in $(seq 1 "${ROUNDS:-2}"); do
  run "off_r$r" 0 0
  run "on_r$r" 1 0
  run "pdl_r$r" 1 1
done
for pdl in 0 1; do
  mkdir -p "$OUT/profile_pdl$pdl"
  ATTNKIT_FUSED_PDL=$pdl timeout 90 python3 benchmarks/profile_engine_step.py --batches 1,16,64 --steps 16 \
    --out "$OUT/profile_pdl$pdl" > "$OUT/profile_pdl$pdl/profile.log" 2>&1
  echo "profile pdl=$pdl rc $? at $((SECONDS - T0)) s"
done
python3 - "$OUT" <<'PY'
import glob, json, sys
for f in sorted(glob.glob(sys.argv[1] + "/runner_*.json")):
    rows = json.load(open(f))["rows"]
    print(f.rsplit("/", 1)[1], [(r["case"][:14], r["peer"][13:], round(r["tok_s"])) for r in rows if r.get("tok_s")])
PY
for pdl in 0 1; do grep -E "^### " "$OUT/profile_pdl$pdl/profile_engine_step.md"; done
cat "$OUT"/fold_pdl*/bench_fold.md
grep -E "passed|failed|Error" "$OUT/gpu_tests.log" | tail -15
