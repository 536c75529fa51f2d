#!/usr/bin/env bash
# Scheduling classes through homad (homa_socket_set_class, docs/homad.md):
# one homad with its pacer at LINK_BPS (so that its one send queue, not the
# CPU, decides who goes first), two echo servers and two clients on
# loopback, all through that homad:
#   background  100 KB RPCs, 8 in flight, class 0, to server B (class 0)
#   foreground  1 MB RPCs, 1 in flight, to server F
# Each round runs the foreground alone, then beside the background with
# the foreground's client and server at class 0, then at class 1 (the order
# of the last two alternates between rounds), a fresh homad for each.  With
# both at class 0 SRPT serves the background's shorter messages first; at
# class 1 the foreground's go first.  Prints the median over the rounds of
# each side's p50/p99 latency and goodput.
#
# Usage: bench/homad/homad-class.sh [ROUNDS=3] [BUILD_DIR=build]
#   env LINK_BPS (default 1000000000), FG_SECONDS (default 3)
set -euo pipefail
rounds=${1:-3}
build=${2:-build}
root=$(cd "$(dirname "$0")/../.." && pwd)
[[ $build = /* ]] || build=$root/$build
perf=$build/tools/homa-perf
homad=$build/daemon/homad
for f in "$perf" "$homad"; do
    [[ -x $f ]] || { echo "homad-class: $f not built" >&2; exit 2; }
done
link_bps=${LINK_BPS:-1000000000}
fg_seconds=${FG_SECONDS:-3}
out=$(mktemp -d)
sock=$out/homad.sock
pids=()
stop_all() {
    local p
    for p in ${pids[@]+"${pids[@]}"}; do kill "$p" 2>/dev/null || true; done
    for p in ${pids[@]+"${pids[@]}"}; do wait "$p" 2>/dev/null || true; done
    pids=()
}
trap 'stop_all; rm -rf "$out"' EXIT

# Ports unlikely to be taken: 20000 + pid % 20000, two of them.
pf=$((20000 + $$ % 20000))
pb=$((pf + 1))

# run NAME CLASS WITH_BG: one configuration, results appended to $out/rows
run() {
    local name=$1 cls=$2 bg=$3
    rm -f "$sock"
    "$homad" --socket "$sock" --link-bps "$link_bps" >"$out/homad.log" 2>&1 &
    pids+=($!)
    for _ in $(seq 100); do [[ -S $sock ]] && break; sleep 0.05; done
    [[ -S $sock ]] || { echo "homad-class: homad did not start" >&2; cat "$out/homad.log" >&2; exit 1; }
    HOMA_DAEMON=$sock "$perf" server --proto homa --port "$pf" --class "$cls" >"$out/sf.log" 2>&1 &
    pids+=($!)
    HOMA_DAEMON=$sock "$perf" server --proto homa --port "$pb" >"$out/sb.log" 2>&1 &
    pids+=($!)
    sleep 0.3
    local bgpid=
    if [[ $bg == 1 ]]; then
        HOMA_DAEMON=$sock "$perf" client --proto homa --server "127.0.0.1:$pb" --test tput \
            --size 100000 --outstanding 8 --seconds "$((fg_seconds + 2))" --json >"$out/bg.log" 2>&1 &
        bgpid=$!
        sleep 1 # the background reaches its steady state first
    fi
    HOMA_DAEMON=$sock "$perf" client --proto homa --server "127.0.0.1:$pf" --test tput \
        --size 1000000 --outstanding 1 --seconds "$fg_seconds" --class "$cls" --json >"$out/fg.log" 2>&1 || true
    local bgjson=null
    if [[ -n $bgpid ]]; then
        wait "$bgpid" || true
        bgjson=$(tail -n 1 "$out/bg.log")
    fi
    echo "$name $(tail -n 1 "$out/fg.log" | tr -d ' ') ${bgjson// /}" >>"$out/rows"
    stop_all
}

for r in $(seq "$rounds"); do
    run alone 0 0
    if ((r % 2)); then
        run class0 0 1
        run class1 1 1
    else
        run class1 1 1
        run class0 0 1
    fi
    echo "homad-class: round $r/$rounds done" >&2
done

python3 - "$out/rows" "$rounds" "$link_bps" <<'PY'
import json, statistics as st, sys
rows, rounds, bps = sys.argv[1], sys.argv[2], int(sys.argv[3])
res = {}
for line in open(rows):
    name, fg, bg = line.split(" ", 2)
    try:
        fg = json.loads(fg)
    except ValueError:
        fg = {"rpcs": 0, "gbps": 0.0, "latency_us": None}
    bg = json.loads(bg)
    res.setdefault(name, []).append((fg, bg))

def lat(j, q):
    return j["latency_us"][q] / 1e3 if j and j.get("latency_us") and j.get("rpcs") else float("nan")

print(f"homad with its pacer at {bps / 1e9:g} Gbit/s, loopback; median of {rounds} rounds")
print("foreground: 1 MB RPCs, 1 in flight; background: 100 KB RPCs, 8 in flight, class 0")
print("%-8s %10s %10s %10s %8s | %10s %10s %10s" % ("fg class", "fg p50 ms", "fg p99 ms", "fg Gb/s",
      "fg RPCs", "bg p50 ms", "bg p99 ms", "bg Gb/s"))
for name in ("alone", "class0", "class1"):
    v = res.get(name, [])
    if not v:
        continue
    med = lambda xs: st.median(xs) if xs else float("nan")
    fg50 = med([lat(f, "p50") for f, _ in v]); fg99 = med([lat(f, "p99") for f, _ in v])
    fgg = med([f.get("gbps", 0.0) for f, _ in v]); fgn = med([f.get("rpcs", 0) for f, _ in v])
    if name == "alone":
        print("%-8s %10.1f %10.1f %10.3f %8d | %10s %10s %10s" % ("alone", fg50, fg99, fgg, fgn, "-", "-", "-"))
        continue
    bg50 = med([lat(b, "p50") for _, b in v]); bg99 = med([lat(b, "p99") for _, b in v])
    bgg = med([b.get("gbps", 0.0) for _, b in v])
    print("%-8s %10.1f %10.1f %10.3f %8d | %10.1f %10.1f %10.3f" % (name[-1], fg50, fg99, fgg, fgn,
          bg50, bg99, bgg))
print("(fg RPCs: completed in the foreground's window; 0 means starved, latency n/a)")
PY
