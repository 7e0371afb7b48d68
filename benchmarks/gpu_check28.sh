#!/usr/bin/env bash
# Issue 28 (session 2026-12-02f), after the profile was measured afresh: the engine step's
# profile again (profile_engine_step.py), selection quality (bench_selection.py, every row),
# and bench_runner against the session's starting commit (.prev: git archive 084f82a src
# benchmarks), alternating ROUNDS times (gpu_defaults.sh).
#   cd <repo root> && OUT=/some/dir bash benchmarks/gpu_check28.sh
set -u
OUT=${OUT:-.}
export PYTHONPATH=$PWD/src${PYTHONPATH:+:$PYTHONPATH} PYTHONUNBUFFERED=1
T0=$SECONDS
timeout 120 python3 benchmarks/profile_engine_step.py --batches 1,64 --steps 16 --out "$OUT" > "$OUT/profile_engine_step.log" 2>&1
echo "profile rc $? at $((SECONDS - T0)) s"
[ -n "${NO_SELECTION:-}" ] || timeout ${SELECTION_S:-260} python3 benchmarks/bench_selection.py --out "$OUT" > "$OUT/bench_selection.log" 2>&1
echo "selection rc $? at $((SECONDS - T0)) s"
OUT=$OUT/defaults ROUNDS=${ROUNDS:-2} RUN_S=${RUN_S:-100} bash benchmarks/gpu_defaults.sh bench_runner > "$OUT/defaults.log" 2>&1
echo "defaults rc $? at $((SECONDS - T0)) s"
mv "$OUT/defaults/compare_defaults.md" "$OUT/defaults/defaults.tgz" "$OUT/" 2>/dev/null
grep -v USDT "$OUT/profile_engine_step.md" | grep -E "^### |^\| (gemm|attention|norm|sampling|copy|other|rope|activation) "
grep -v USDT "$OUT/bench_selection.log" | tail -12
cat "$OUT/defaults.log" "$OUT/compare_defaults.md"
