#!/usr/bin/env bash
# Incast onto one host, embedded vs homad (docs/homad.md; results in
# docs/perf-log.md): a cluster in a box of 3 hosts; host 0 runs 4 receiving
# processes (bench/homad/incast.c `sink`), hosts 1 and 2 run 4 senders each;
# every round all 8 senders send one SIZE-byte request at the same instant,
# two to each receiving process.  Embedded, each receiving process grants
# on its own (up to max_incoming each); through homad one engine grants for
# the host.  Prints per mode: the median and worst round completion time
# (last reply - round start), the drops at the switch port towards host 0,
# and the engines' peak granted-but-unreceived bytes (embedded: the sum of
# the 4 processes' peaks, an upper bound of the host's; homad: the host's).
#
#   bash bench/homad/homad-incast.sh [--build DIR] [--rounds R] [--rate RATE]
#        [--size BYTES] [--gap-ms G]
# Needs root (network namespaces); exit 77 without.
set -euo pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
BUILD=$ROOT/build ROUNDS=10 RATE=1gbit SIZE=1000000 GAP=300
while [[ $# -gt 0 ]]; do
    case $1 in
    --build) BUILD=$2; shift 2 ;;
    --rounds) ROUNDS=$2; shift 2 ;;
    --rate) RATE=$2; shift 2 ;;
    --size) SIZE=$2; shift 2 ;;
    --gap-ms) GAP=$2; shift 2 ;;
    -h | --help) sed -n 2,15p "$0"; exit 0 ;;
    *) echo "homad-incast: unknown option $1" >&2; exit 2 ;;
    esac
done
[[ $(id -u) -eq 0 ]] || { echo "homad-incast: needs root (network namespaces)" >&2; exit 77; }
INCAST=$BUILD/bench/homad_incast
HOMAD=$BUILD/daemon/homad
for f in "$INCAST" "$HOMAD"; do
    [[ -x $f ]] || { echo "homad-incast: $f not built" >&2; exit 1; }
done
NAME=hxic$$
SUBNET=10.79.0
WORK=$(mktemp -d)
PIDS=()
cleanup() {
    local p
    for p in "${PIDS[@]}"; do kill "$p" 2>/dev/null || true; done
    wait 2>/dev/null || true
    bash "$ROOT/scripts/homa-cluster" down --name "$NAME" >/dev/null 2>&1 || true
    rm -rf "$WORK"
}
trap cleanup EXIT
bash "$ROOT/scripts/homa-cluster" up --name "$NAME" --hosts 3 --rate "$RATE" \
    --host-queues prio --subnet "$SUBNET" >/dev/null

# Packets dropped so far by the switch port towards host 0 (all priorities).
drops() {
    bash "$ROOT/scripts/homa-cluster" status --name "$NAME" --stats |
        awk '/switch port p0 priority/ {s += $(NF - 1)} END {print s + 0}'
}
# Background processes are started with `ip netns exec` itself (it execs
# the program), so $! is the program's pid and kill reaches it.

for mode in embedded homad; do
    envs=()
    if [[ $mode == homad ]]; then
        sock=$WORK/homad.sock
        ip netns exec "$NAME-h0" "$HOMAD" --socket "$sock" 2>"$WORK/homad.log" &
        hpid=$!
        PIDS+=("$hpid")
        for _ in $(seq 100); do [[ -S $sock ]] && break; sleep 0.05; done
        envs=(HOMA_DAEMON="$sock")
    fi
    d0=$(drops)
    spids=()
    for i in 0 1 2 3; do
        ip netns exec "$NAME-h0" env "${envs[@]}" "$INCAST" sink --port $((7001 + i)) --rounds "$ROUNDS" --per-round 2 \
            >"$WORK/$mode.sink$i" 2>&1 &
        spids+=($!)
    done
    for i in 0 1 2 3; do
        for _ in $(seq 100); do grep -q 'sink ready' "$WORK/$mode.sink$i" 2>/dev/null && break; sleep 0.05; done
    done
    start=$(($(date +%s%N) + 1500000000))
    bpids=()
    for i in $(seq 0 7); do
        ip netns exec "$NAME-h$((1 + i / 4))" "$INCAST" burst --server "$SUBNET.1:$((7001 + i % 4))" --size "$SIZE" \
            --start "$start" --rounds "$ROUNDS" --gap-ms "$GAP" >"$WORK/$mode.burst$i" 2>&1 &
        bpids+=($!)
    done
    bad=0
    for p in "${bpids[@]}" "${spids[@]}"; do wait "$p" || bad=1; done
    d1=$(drops)
    echo "$mode $start $((d1 - d0)) $bad" >>"$WORK/modes"
    if [[ $mode == homad ]]; then
        kill "$hpid" 2>/dev/null || true
        wait "$hpid" 2>/dev/null || true
    fi
done
python3 - "$WORK" "$GAP" "$SIZE" "$RATE" "$ROUNDS" <<'PYEOF'
import glob, os, re, statistics as st, sys
work, gap, size, rate, rounds = sys.argv[1], int(sys.argv[2]), sys.argv[3], sys.argv[4], int(sys.argv[5])
print(f"incast: 8 senders x {size} B onto 4 processes of one host, {rate} links, {rounds} rounds")
print("| mode | rounds complete | completion p50 (ms) | completion max (ms) | switch drops (to host 0) | peak incoming (bytes) | failures |")
print("|---|---|---|---|---|---|---|")
for line in open(os.path.join(work, "modes")):
    mode, start, drops, bad = line.split()
    start = int(start)
    done = {}
    for f in glob.glob(os.path.join(work, f"{mode}.burst*")):
        for m in re.finditer(r"^burst round (\d+) done (\d+)", open(f).read(), re.M):
            k = int(m[1])
            done.setdefault(k, []).append(int(m[2]))
    comp = [(max(v) - (start + k * gap * 1000000)) / 1e6 for k, v in done.items() if len(v) == 8]
    peaks = []
    for f in glob.glob(os.path.join(work, f"{mode}.sink*")):
        m = re.search(r"incoming_peak (\d+)", open(f).read())
        if m:
            peaks.append(int(m[1]))
    peak = (sum(peaks) if mode == "embedded" else max(peaks)) if peaks else "-"
    p50 = f"{st.median(comp):.1f}" if comp else "-"
    mx = f"{max(comp):.1f}" if comp else "-"
    print(f"| {mode} | {len(comp)}/{rounds} | {p50} | {mx} | {drops} | {peak} | {'yes' if bad != '0' else 'none'} |")
PYEOF
