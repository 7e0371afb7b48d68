#!/usr/bin/env bash
# Issue 28 (session 2026-12-04), call 1: why tests/runner/test_prefetch.py's graphed-decode
# test failed on the 2026-12-03e tree (gpu_final33.sh). The prefetch tests under the default,
# with PDL 2 between the products (ATTNKIT_FUSED_PDL=early), and with skinny's products at
# one row (ATTNKIT_STREAM_MM=0-0), each three times. Files in $OUT/c.tgz.
. benchmarks/gpu_common.sh
for v in - ATTNKIT_FUSED_PDL=early ATTNKIT_STREAM_MM=0-0 "ATTNKIT_FUSED_PDL=early ATTNKIT_STREAM_MM=0-0"; do
  for i in 1 2 3; do
    log="$W/prefetch_${v// /_}_$i.log"
    env $([ "$v" = - ] || echo $v) timeout 120 python3 -m pytest -q -m gpu -p no:cacheprovider \
      tests/runner/test_prefetch.py -vv > "$log" 2>&1
    echo "$v #$i rc $? $(tail -1 "$log") at $((SECONDS - T0)) s"
  done
done
save
for f in "$W"/prefetch_-_*.log; do grep -E "^E " "$f" | head -30; done
