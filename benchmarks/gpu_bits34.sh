#!/usr/bin/env bash
# Issue 28 (session 2026-12-04), call 2: the graphed decode's bits under GPU load.
# probe_graph_bits.py in 8 processes at once, under the default, then under the 2026-12-03d
# launch settings (ATTNKIT_FUSED_PDL=early ATTNKIT_STREAM_MM=0-0); then the whole GPU suite
# (where tests/runner/test_prefetch.py failed once). Files in $OUT/c.tgz.
. benchmarks/gpu_common.sh
for v in - "ATTNKIT_FUSED_PDL=early ATTNKIT_STREAM_MM=0-0"; do
  tag=${v// /_}
  for i in 1 2 3 4 5 6 7 8; do
    env $([ "$v" = - ] || echo $v) timeout 200 python3 benchmarks/probe_graph_bits.py --reps ${REPS:-4} \
      --tag "$tag" > "$W/bits_${tag}_$i.log" 2>&1 &
  done
  wait
  echo "$v at $((SECONDS - T0)) s:"; grep -h summary "$W"/bits_${tag}_*.log; grep -h '"three": "diff\|"one": "diff\|"dirty_counters": [1-9]' "$W"/bits_${tag}_*.log | head -8
  grep -h -E "Error|error" "$W"/bits_${tag}_*.log | sort | uniq -c | head -5
  save
done
timeout ${SUITE_S:-300} python3 -m pytest -q -m gpu -n 16 -p no:cacheprovider tests > "$W/gpu_suite.log" 2>&1
echo "suite rc $? ($(tail -1 "$W/gpu_suite.log")) at $((SECONDS - T0)) s"; save
grep -E "^FAILED|^ERROR" "$W/gpu_suite.log" | head -20
grep -E "^E  " "$W/gpu_suite.log" | head -40
