#!/usr/bin/env bash
# Issue 28, engine (session 2026-12-02g): the few-row products with the norm, silu * up and the
# residual add folded in (runner/layers/skinny.py). Their GPU tests and the runner's, then
# bench_runner with the products off (ATTNKIT_SKINNY=0: cuBLAS and the separate kernels) and
# on, alternating ROUNDS times, then on with the PDL switch; the step's profile with them on;
# bench_skinny at a few row counts (the configuration rule against the best of 12).
#   cd <repo root> && OUT=/some/dir bash benchmarks/gpu_engine28b.sh
set -u
OUT=${OUT:-.}
export PYTHONPATH=$PWD/src${PYTHONPATH:+:$PYTHONPATH} PYTHONUNBUFFERED=1
T0=$SECONDS
nvidia-smi --query-gpu=name,clocks.sm,clocks.mem,temperature.gpu --format=csv,noheader
timeout ${TESTS_S:-150} python3 -m pytest -q -m gpu -n 4 -p no:cacheprovider tests/runner/test_skinny.py \
  tests/runner/test_fused_layers.py tests/runner/test_runner_gpu.py tests/runner/test_runner_graphs_gpu.py \
  > "$OUT/gpu_tests.log" 2>&1
echo "tests rc $? ($(tail -1 "$OUT/gpu_tests.log")) at $((SECONDS - T0)) s"
run() {   # run NAME SKINNY PDL
  ATTNKIT_SKINNY=$2 ATTNKIT_FUSED_PDL=$3 timeout 110 python3 benchmarks/bench_runner.py --no-peer --no-compile \
    --no-greedy-check --json "$OUT/runner_$1.json" > "$OUT/runner_$1.log" 2>&1
  echo "bench_runner $1 (skinny=$2 pdl=$3) rc=$? at $((SECONDS - T0)) s"
}
for r in $(seq 1 "${ROUNDS:-1}"); do
  run "off_r$r" 0 0
  run "on_r$r" 1 0
done
[ -n "${NO_PDL:-}" ] || run on_pdl 1 1
timeout 90 python3 benchmarks/profile_engine_step.py --batches 1,16,64 --steps 16 --out "$OUT" > "$OUT/profile.log" 2>&1
echo "profile rc $? at $((SECONDS - T0)) s"
timeout ${SKINNY_S:-120} python3 benchmarks/bench_skinny.py --ms ${MS:-1,2,16} --out "$OUT" --budget-s $(( ${SKINNY_S:-120} - 20 )) > "$OUT/bench_skinny.log" 2>&1
echo "skinny rc $? at $((SECONDS - T0)) s"
python3 - "$OUT" <<'PY'
import glob, json, sys
for f in sorted(glob.glob(sys.argv[1] + "/runner_*.json")):
    rows = json.load(open(f))["rows"]
    print(f.rsplit("/", 1)[1], [(r["case"][:14], r["peer"][13:], round(r["tok_s"])) for r in rows if r.get("tok_s")])
PY
grep -E "^### |busy|GEMM" "$OUT/profile_engine_step.md" | head -30
cat "$OUT/bench_skinny.md"
grep -E "passed|failed|Error" "$OUT/gpu_tests.log" | tail -15
