#!/usr/bin/env bash
# Issue 28 (session 2026-12-04c), call 1: the ws MLA kernel's forms (NOTES-mla.md version 11)
# tested and timed, and bench_triton's table (the decode rows as they stand). Files in $OUT/c.tgz.
. benchmarks/gpu_common.sh
timeout ${TEST_S:-170} python3 -m pytest -q -m gpu -n 8 -p no:cacheprovider \
  tests/triton_mla/test_gluon_gpu.py > "$W/ws_tests.log" 2>&1
echo "ws tests rc $? ($(tail -1 "$W/ws_tests.log")) at $((SECONDS - T0)) s"
grep -E "^FAILED|^ERROR" "$W/ws_tests.log" | head -20
PYTHONPATH=$PYTHONPATH:$PWD/tests timeout ${MLA_S:-150} python3 benchmarks/bench_mla_candidates.py --heads 128 \
  --budget ${MLA_BUDGET_S:-110} --out "$W/mla_ws.json" > "$W/mla_ws.log" 2>&1
echo "bench_mla_candidates rc $? at $((SECONDS - T0)) s"; save
python3 -c "
import json, sys
r = json.load(open(sys.argv[1]))
print({k: v for k, v in r['checks'].items() if v != 'ok'} or 'checks: all ok')
for x in r['rows']:
    print(x['heads'], x['batch'], x['ctx'], x['name'], round(x.get('us', 0), 1), round(x.get('tflops', 0)), x.get('error', ''), x.get('fell_back', ''))
" "$W/mla_ws.json" 2>&1 | tail -60
if [ "${TRITON_BENCH:-1}" = 1 ]; then
  timeout ${TRITON_S:-200} python3 benchmarks/bench_triton.py --out "$W/bench_triton" > "$W/bench_triton.log" 2>&1
  echo "bench_triton rc $? at $((SECONDS - T0)) s"; save
  grep "^| decode\|^| prefill\|^| extend" "$W/bench_triton/bench_triton.md" | cut -c1-200
fi
