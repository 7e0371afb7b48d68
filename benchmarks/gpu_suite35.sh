#!/usr/bin/env bash
# Issue 28 (session 2026-12-04b), call 6: the GPU suite on the session's final tree (the
# queued decode-ahead call, the dsa stand-in fixed). Files in $OUT/c.tgz.
. benchmarks/gpu_common.sh
timeout ${SUITE_S:-400} python3 -m pytest -q -m gpu -n 16 -p no:cacheprovider tests > "$W/gpu_suite.log" 2>&1
echo "suite rc $? ($(tail -1 "$W/gpu_suite.log")) at $((SECONDS - T0)) s"; save
grep -E "^FAILED|^ERROR" "$W/gpu_suite.log" | head -20
