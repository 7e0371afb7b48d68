# The shared start of the device-call scripts (sourced from the repository root): OUT (where
# the files come back, default .), W (a scratch folder), the source tree on PYTHONPATH,
# unbuffered Python, T0 (the call's start), save (W packed into $OUT/c.tgz), skinny_rows FILE
# (every kernel's GB/s of a bench_skinny.json, a row a line) and probe_rows FILE (a
# probe_stream_mm log's rows without their per-program end times).
set -u
OUT=${OUT:-.}
W=$(mktemp -d)
export PYTHONPATH=$PWD/src${PYTHONPATH:+:$PYTHONPATH} PYTHONUNBUFFERED=1
T0=$SECONDS
save() { tar czf "$OUT/c.tgz" -C "$W" .; }
skinny_rows() {
  python3 -c "
import json, sys
for r in json.load(open(sys.argv[1]))['rows']:
    print(r['shape'], r['m'], 'cublas', round(r['cublas_gbs']), [(c['config'], round(c.get('gbs', 0))) for c in r['kernels']])" "$1"
}
probe_rows() {
  python3 -c "
import json, sys
for l in open(sys.argv[1]):
    if l.startswith('{'):
        r = json.loads(l); r.pop('end_us', None)
        print({k: (round(v, 2) if isinstance(v, float) else v) for k, v in r.items()})" "$1"
}
