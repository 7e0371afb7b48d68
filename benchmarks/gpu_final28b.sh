#!/usr/bin/env bash
# Issue 28 (session 2026-12-03a), last call: the GPU suite (every gpu test) on the final tree.
# Its log lands in $OUT/c.tgz.
#   cd <repo root> && OUT=/some/dir bash benchmarks/gpu_final28b.sh
set -u
OUT=${OUT:-.}
W=$(mktemp -d)
export PYTHONPATH=$PWD/src${PYTHONPATH:+:$PYTHONPATH} PYTHONUNBUFFERED=1
T0=$SECONDS
save() { tar czf "$OUT/c.tgz" -C "$W" .; }
timeout ${SUITE_S:-300} python3 -m pytest -q -m gpu -n 16 -p no:cacheprovider tests > "$W/gpu_suite.log" 2>&1
echo "suite rc $? ($(tail -1 "$W/gpu_suite.log")) at $((SECONDS - T0)) s"; save
grep -E "^FAILED|^ERROR" "$W/gpu_suite.log" | head -20
