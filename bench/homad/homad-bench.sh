#!/usr/bin/env bash
# homad benchmark: echo round trips over loopback, the same program
# (bench/runtime/bench_pingpong) embedded, through homad (HOMA_DAEMON),
# and over TCP, interleaved in each round so that all three see the same
# machine load.  Prints the median over ROUNDS of each p50/p99 and the
# ratios to embedded; 1 MB echoes are also given as throughput (2 MB moved
# per round trip).
#
# Usage: bench/homad/homad-bench.sh [ROUNDS=5] [BUILD_DIR=build]
set -euo pipefail
rounds=${1:-5}
build=${2:-build}
root=$(cd "$(dirname "$0")/../.." && pwd)
[[ $build = /* ]] || build=$root/$build
bench=$build/bench/bench_pingpong
homad=$build/daemon/homad
for f in "$bench" "$homad"; do
    [[ -x $f ]] || { echo "homad-bench: $f not built" >&2; exit 2; }
done
sock=$(mktemp -u /tmp/homad-bench.XXXXXX.sock)
out=$(mktemp -d)
"$homad" --socket "$sock" 2>"$out/homad.log" &
hpid=$!
trap 'kill $hpid 2>/dev/null; wait $hpid 2>/dev/null; rm -rf "$out" "$sock"' EXIT
for _ in $(seq 100); do [[ -S $sock ]] && break; sleep 0.05; done

run() { # name size count mode [env...]
    local name=$1 size=$2 count=$3 mode=$4
    shift 4
    if ! env "$@" "$bench" "$size" "$count" "$mode" >"$out/run" 2>&1; then
        echo "homad-bench: $name $size B run failed: $(tail -n 1 "$out/run")" >&2
        echo "$name $size" >>"$out/failed"
        return 0
    fi
    awk -v n="$name" -v s="$size" \
        '$1=="homa"||$1=="tcp" {for(i=1;i<=NF;i++){if($i=="p50")p50=$(i+1);if($i=="p99")p99=$(i+1)}
         print n, s, p50, p99}' "$out/run" >>"$out/results"
}
for r in $(seq "$rounds"); do
    run embedded 100 5000 homa HOMA_DAEMON=
    run homad 100 5000 homa HOMA_DAEMON="$sock"
    run tcp 100 5000 tcp
    run embedded 1000000 200 homa HOMA_DAEMON=
    run homad 1000000 200 homa HOMA_DAEMON="$sock"
    run tcp 1000000 200 tcp
    echo "round $r/$rounds done" >&2
done
touch "$out/failed"
python3 - "$out/results" "$rounds" "$out/failed" <<'PY'
import sys, statistics as st
failed = [l.split() for l in open(sys.argv[3])]
rows = [l.split() for l in open(sys.argv[1])]
res = {}
for name, size, p50, p99 in rows:
    res.setdefault((name, int(size)), []).append((float(p50), float(p99)))
print("median of %s rounds (us); ratio = / embedded; loopback, machine shared with other work" % sys.argv[2])
print("%-9s %8s %10s %10s %8s %8s %12s" % ("mode", "size", "p50", "p99", "p50 x", "p99 x", "MB/s (p50)"))
for size in (100, 1000000):
    base = res.get(("embedded", size))
    b50 = st.median(v[0] for v in base); b99 = st.median(v[1] for v in base)
    for name in ("embedded", "homad", "tcp"):
        v = res.get((name, size), [])
        if not v: continue
        p50 = st.median(x[0] for x in v); p99 = st.median(x[1] for x in v)
        tput = "%12.0f" % (2 * size / p50) if size >= 100000 else "%12s" % "-"
        nf = sum(1 for f in failed if f == [name, str(size)])
        print("%-9s %8d %10.1f %10.1f %8.2f %8.2f %s%s" % (name, size, p50, p99, p50 / b50, p99 / b99, tput,
              "  (%d of %s runs failed)" % (nf, sys.argv[2]) if nf else ""))
PY
