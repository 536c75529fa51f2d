#!/bin/sh
# --plot where matplotlib is missing (ctest plot_without_matplotlib): the
# plot is optional, so a tool that measured successfully still exits 0,
# keeps its JSON, and says what it skipped and how to get it.  matplotlib is
# hidden by a package of that name first on PYTHONPATH whose import raises
# ImportError, as on a machine without python3-matplotlib (the test runs the
# same with or without it installed).  homa-perf cluster's own check of this
# path needs root and is in tests/cluster/cluster_smoke.sh.
# Usage: without_matplotlib.sh HOMA_SIM OUTDIR
set -u
sim=$1
out=$2/without_matplotlib
plot="$(dirname "$sim")/homa-plot"
rm -rf "$out"
mkdir -p "$out/shadow/matplotlib" "$out/tmp" || exit 1
echo "raise ImportError('matplotlib hidden by without_matplotlib.sh')" \
    > "$out/shadow/matplotlib/__init__.py"
PYTHONPATH=$out/shadow
export PYTHONPATH
fail=0
bad() {
    echo "FAIL: $*"
    fail=1
}

# homa-plot itself: exit status 3, the package named
"$plot" --check > "$out/check.txt" 2>&1
rc=$?
[ "$rc" -eq 3 ] || bad "homa-plot --check: exit status $rc (want 3): $(cat "$out/check.txt")"
grep -q 'apt-get install python3-matplotlib' "$out/check.txt" ||
    bad "homa-plot --check does not say how to install matplotlib: $(cat "$out/check.txt")"

# homa-sim --json --plot: exit 0, the JSON written, no figure, a warning
# that names what was skipped and the package
args="--workload w2 --load 0.5 --hosts 8 --seed 3 --warmup-ms 0.1 --measure-ms 0.2 --quiet"
# shellcheck disable=SC2086 # one word per option
TMPDIR="$out/tmp" "$sim" $args --json "$out/run.json" --plot "$out/run.png" \
    > "$out/run.out" 2> "$out/run.err"
rc=$?
[ "$rc" -eq 0 ] || bad "homa-sim --plot without matplotlib: exit status $rc: $(cat "$out/run.err")"
grep -q '"short_p99_slowdown"' "$out/run.json" 2> /dev/null || bad "homa-sim: no JSON written"
[ ! -e "$out/run.png" ] || bad "homa-sim: a figure appeared without matplotlib"
grep -q 'warning: .*matplotlib is missing' "$out/run.err" ||
    bad "homa-sim: no warning about the skipped plot: $(cat "$out/run.err")"
grep -q 'apt-get install python3-matplotlib' "$out/run.err" ||
    bad "homa-sim: the warning does not name the package: $(cat "$out/run.err")"

# --plot alone (a temporary JSON for homa-plot): still 0, nothing left behind
# shellcheck disable=SC2086
TMPDIR="$out/tmp" "$sim" $args --plot "$out/alone.png" > /dev/null 2> "$out/alone.err"
rc=$?
[ "$rc" -eq 0 ] || bad "homa-sim --plot alone without matplotlib: exit status $rc"
[ -z "$(ls "$out/tmp")" ] || bad "temporary JSON left behind: $(ls "$out/tmp")"

# a real failure of homa-plot is still one: exit status 1
# shellcheck disable=SC2086
HOMA_PLOT=/nonexistent/homa-plot "$sim" $args --plot "$out/none.png" > /dev/null 2>&1
rc=$?
[ "$rc" -eq 1 ] || bad "homa-sim with HOMA_PLOT=/nonexistent: exit status $rc (want 1)"

[ "$fail" -eq 0 ] && echo "ok: without matplotlib, --plot is skipped with a warning and exit status 0"
exit "$fail"
