#!/usr/bin/env bash
# Issue 28 (session 2026-12-03d), call 6: the GPU suite (every gpu test) on the session's final
# tree: stream_mm (static form, off by default), gluon_host's shared descriptor templates (the
# Gluon prefill kernels' descriptors), skinny's counters. Files in $OUT/c.tgz.
#   cd <repo root> && OUT=/some/dir bash benchmarks/gpu_final32.sh
. benchmarks/gpu_common.sh
timeout ${SUITE_S:-330} python3 -m pytest -q -m gpu -n 16 -p no:cacheprovider tests > "$W/gpu_suite.log" 2>&1
echo "suite rc $? ($(tail -1 "$W/gpu_suite.log")) at $((SECONDS - T0)) s"; save
grep -E "^FAILED|^ERROR" "$W/gpu_suite.log" | head -20
save
