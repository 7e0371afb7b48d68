# The shared start of the device-call scripts (sourced from the repository root): OUT (where
# the files come back, default .), W (a scratch folder), the source tree on PYTHONPATH,
# unbuffered Python, T0 (the call's start) and save (W packed into $OUT/c.tgz).
set -u
OUT=${OUT:-.}
W=$(mktemp -d)
export PYTHONPATH=$PWD/src${PYTHONPATH:+:$PYTHONPATH} PYTHONUNBUFFERED=1
T0=$SECONDS
save() { tar czf "$OUT/c.tgz" -C "$W" .; }
