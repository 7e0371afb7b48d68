#!/usr/bin/env bash
# Issue 28 (session 2026-12-03a), last call: the GPU suite (every gpu test) on the final tree.
# Then bench_runner with the default launches and with ATTNKIT_FUSED_PDL=0, while there is
# time. Files in $OUT/c.tgz.
#   cd <repo root> && OUT=/some/dir bash benchmarks/gpu_final28b.sh
. benchmarks/gpu_common.sh
timeout ${SUITE_S:-300} python3 -m pytest -q -m gpu -n 16 -p no:cacheprovider tests > "$W/gpu_suite.log" 2>&1
echo "suite rc $? ($(tail -1 "$W/gpu_suite.log")) at $((SECONDS - T0)) s"; save
grep -E "^FAILED|^ERROR" "$W/gpu_suite.log" | head -20
# Then, while the call has time: bench_runner with the default launches and with ATTNKIT_FUSED_PDL=0.
for name in default pdl0; do
  [ $((SECONDS - T0)) -lt ${BENCH_BY_S:-300} ] || break
  pdl=auto; [ $name = pdl0 ] && pdl=0
  ATTNKIT_FUSED_PDL=$pdl timeout 60 python3 benchmarks/bench_runner.py --no-peer --no-compile --no-greedy-check \
    --json "$W/runner_$name.json" > "$W/runner_$name.log" 2>&1
  echo "bench_runner $name rc=$? at $((SECONDS - T0)) s"; save
done
python3 - "$W" <<'PY'
import glob, json, sys
for f in sorted(glob.glob(sys.argv[1] + "/runner_*.json")):
    rows = json.load(open(f))["rows"]
    print(f.rsplit("/", 1)[1], [(r["case"][:14], r["peer"][13:], round(r["tok_s"])) for r in rows if r.get("tok_s")])
PY
