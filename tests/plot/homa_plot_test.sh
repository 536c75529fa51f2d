#!/bin/sh
# homa-plot on a JSON fixture of every kind (fixtures/: real, trimmed output
# of the tools): the kind is detected, every figure of it is drawn as a
# valid PNG; SVG, PDF and stdin work; bad input gives a message and exit
# status 1, never a traceback.  Skipped (77) when matplotlib is missing,
# after the checks that need none.
# Usage: homa_plot_test.sh HOMA_PLOT FIXTURE_DIR OUTDIR
set -u
plot=$1
fx=$2
out=$3/homa_plot_test
here=$(dirname "$0")
rm -rf "$out"
mkdir -p "$out" || exit 1
fail=0
bad() {
    echo "FAIL: $*"
    fail=1
}

# expect_error DESCRIPTION ARGS...: exit status 1, a homa-plot message, no traceback
expect_error() {
    what=$1
    shift
    "$plot" "$@" > "$out/err.out" 2> "$out/err.txt"
    rc=$?
    if [ "$rc" -ne 1 ] || ! grep -q '^homa-plot: ' "$out/err.txt" ||
        grep -q Traceback "$out/err.txt"; then
        bad "$what: exit status $rc, stderr: $(head -c 300 "$out/err.txt")"
    fi
}

# ---- without matplotlib too --------------------------------------------------
"$plot" --help > "$out/help.txt" 2>&1 || bad "--help failed"
grep -q -- '--figure' "$out/help.txt" || bad "--help does not describe --figure"
for k in sim sim-runs fluid client compare cluster coll allreduce ddp link; do
    grep -q "^  $k " "$out/help.txt" || bad "--help does not list kind $k"
done
printf '{"tool": "homa-sim", ' > "$out/truncated.json"
echo '{"something": "else"}' > "$out/unknown.json"
expect_error "truncated JSON" "$out/truncated.json" -o "$out/x.png"
expect_error "JSON of no known tool" "$out/unknown.json" -o "$out/x.png"
expect_error "missing file" "$out/no-such.json" -o "$out/x.png"
expect_error "--kind that does not match" "$fx/sim.json" --kind coll -o "$out/x.png"
expect_error "unknown figure" "$fx/sim.json" --figure no-such -o "$out/x.png"
expect_error "unsupported extension" "$fx/sim.json" -o "$out/x.jpg"
"$plot" > /dev/null 2>&1
[ $? -eq 2 ] || bad "no JSON argument: not exit status 2"
"$plot" "$fx/sim.json" "$fx/coll.json" -o "$out/x.png" > /dev/null 2>&1
[ $? -eq 2 ] || bad "-o with two JSON files: not exit status 2"

"$plot" --check > "$out/check.txt" 2>&1
rc=$?
if [ "$rc" -eq 3 ]; then
    [ "$fail" -eq 0 ] || exit 1
    echo "SKIP: matplotlib is missing ($(cat "$out/check.txt")); apt-get install python3-matplotlib"
    exit 77
fi
[ "$rc" -eq 0 ] || { echo "FAIL: homa-plot --check: exit status $rc"; exit 1; }
cat "$out/check.txt"

# ---- every kind, every figure ------------------------------------------------
# One call draws them all (matplotlib's import costs the most); at a low
# resolution, as the test's time goes into drawing.
# fixture  kind  figures (the first is the default)
cat > "$out/kinds.txt" << 'LIST'
sim sim slowdown load backlog
sim-runs sim-runs slowdown short load backlog
fluid fluid load backlog
client client slowdown bucket-latency latency
compare compare slowdown slowdown-panels bucket-latency latency summary goodput
compare-rtt compare latency summary goodput
cluster cluster slowdown slowdown-panels bucket-latency latency short goodput
coll coll latency bandwidth
allreduce allreduce latency bandwidth
ddp ddp steps
link link goodput cpu rtt rtt-p99
LIST
files=$(while read -r name _; do printf '%s ' "$fx/$name.json"; done < "$out/kinds.txt")
# shellcheck disable=SC2086 # one word per file
"$plot" $files --list > "$out/list.txt" 2>&1 || bad "--list failed: $(cat "$out/list.txt")"
"$plot" -q $files --figure all --dpi 40 --outdir "$out" 2> "$out/all.err" ||
    bad "homa-plot failed: $(cat "$out/all.err")"
n=0
while read -r name kind figs; do
    n=$((n + 1))
    got=$(sed -n "${n}p" "$out/list.txt")
    [ "$got" = "$kind: $figs" ] || bad "$name: --list says '$got', want '$kind: $figs'"
    for f in $figs; do
        "$here/png_ok.sh" "$out/$name-$f.png" > /dev/null ||
            bad "$name: figure $f: $("$here/png_ok.sh" "$out/$name-$f.png")"
    done
done < "$out/kinds.txt"
[ "$(ls "$out"/*-*.png | wc -l)" -eq 36 ] || bad "not 36 figures: $(ls "$out"/*-*.png | wc -l)"

# ---- formats, stdin, options --------------------------------------------------
"$plot" -q "$fx/sim.json" -o "$out/sim.svg" && grep -q '<svg' "$out/sim.svg" || bad "SVG output"
"$plot" -q "$fx/cluster.json" -o "$out/cluster.pdf" && [ "$(head -c 5 "$out/cluster.pdf")" = "%PDF-" ] ||
    bad "PDF output"
"$plot" -q - -o "$out/stdin.png" < "$fx/coll.json" && "$here/png_ok.sh" "$out/stdin.png" > /dev/null ||
    bad "JSON from stdin"
"$plot" -q "$fx/sim-runs.json" --title "a title" --label=-1 --label "two, with a comma" \
    --kind sim-runs --figure short --dpi 50 -o "$out/opts.png" && "$here/png_ok.sh" "$out/opts.png" ||
    bad "--title, --label, --kind, --figure, --dpi"
# a one-run JSON drawn as a list of runs
"$plot" -q "$fx/sim.json" --kind sim-runs -o "$out/one-run.png" && "$here/png_ok.sh" "$out/one-run.png" > /dev/null ||
    bad "sim.json as sim-runs"
# without --figure: the kind's first, under the name given
"$plot" -q "$fx/cluster.json" -o "$out/cluster-default.png" &&
    "$here/png_ok.sh" "$out/cluster-default.png" > /dev/null || bad "default figure"
# several files: a bad one is reported, the others are still drawn
mkdir -p "$out/mixed"
"$plot" -q "$out/unknown.json" "$fx/coll.json" --outdir "$out/mixed" --format svg 2> "$out/mixed.err"
[ $? -eq 1 ] && grep -q unknown.json "$out/mixed.err" && [ -s "$out/mixed/coll.svg" ] ||
    bad "several files with a bad one"
# without -o: next to the JSON, with .png
cp "$fx/coll.json" "$out/default-name.json"
"$plot" -q "$out/default-name.json" && "$here/png_ok.sh" "$out/default-name.png" > /dev/null || bad "default output name"

# ---- the right kind with unusable values: a message, no traceback -------------
echo '{"tool": "homa-sim", "workload": "w1", "buckets": "oops", "backlog_mb": 5, "achieved_load_intervals": null}' > "$out/odd.json"
expect_error "sim JSON without usable buckets" "$out/odd.json" -o "$out/odd.png"
echo '{"tool": "homa-sim", "buckets": [{"max_bytes": null, "p99_slowdown": "x"}, 7]}' > "$out/odd2.json"
expect_error "sim JSON with odd buckets" "$out/odd2.json" --figure all -o "$out/odd2.png"
echo '{"experiment": "cluster"}' > "$out/noproto.json"
expect_error "cluster JSON without results" "$out/noproto.json" -o "$out/np.png"
echo '[]' > "$out/empty.json"
expect_error "empty list" "$out/empty.json" -o "$out/e.png"
expect_error "unwritable output" "$fx/sim.json" -o "$out/no-such-dir/x.png"

[ "$fail" -eq 0 ] || exit 1
echo "homa-plot ok: every kind and figure drawn, bad input refused"
