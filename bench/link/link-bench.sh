#!/usr/bin/env bash
# link-bench: Homa against TCP on a real link, not only on loopback.
#
# Builds two network namespaces joined by a veth pair (a device with
# MTU-sized frames, GSO/GRO and device queues, as a NIC), optionally with a
# tc rate (and a delay where the kernel has netem), and runs the same
# request/response patterns over Homa (homa-perf, UDP or raw-IP driver) and
# over TCP (homa-perf's TCP transport), alternating them run by run so both
# see the same machine, and beside them the ceiling of the kernel's UDP
# path one way (bench/link/udp_ceiling: full GSO batches, GRO, recvmmsg).
# For every run it measures, on both ends, the CPU time and the system calls
# of the processes (perf stat: task-clock and raw_syscalls:sys_enter, for the
# window the client measures), and reports goodput, latency percentiles, CPU
# seconds per GB moved and system calls per MB, as the median of the runs.
#
# Usage: bash bench/link/link-bench.sh [options]   (as root)
#   --mtus "1500 9000"   veth MTUs to run, in order              [1500 9000]
#   --loopback           run the same tests on loopback too (one namespace)
#   --rate RATE          tc tbf rate on both veth ends (e.g. 10gbit)    [none]
#   --delay D            netem delay on both ends (e.g. 50us), if netem exists
#   --driver udp|raw|both  Homa driver(s)                                [udp]
#   --tests "..."        echo-1M-8 echo-64K-8 echo-1M-1 echo-64K-1
#                        oneway-1M-8 oneway-64K-8 rtt-100         [all but 64K-1]
#   --runs N             runs per test and protocol, median reported      [3]
#   --seconds S          measured seconds per run                          [3]
#   --json OUT           write every run and the medians as JSON
#   --plot OUT.png       draw the medians with homa-plot (kind link)
#   --build DIR          the build directory                          [build]
#   --no-ceiling         skip the UDP ceiling
#   --keep               keep the namespaces' logs (printed at the end)
#
# Needs root (namespaces, veth, tc), iproute2 and perf (linux-perf; without
# it CPU and system calls are not reported).  sockperf, if installed, is run
# for the 100-byte round trips as the reference TCP ping-pong beside
# homa-perf's own TCP test.  Nothing it creates outlives it (trap).
set -euo pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)

MTUS="1500 9000"
LOOPBACK=0
RATE=""
DELAY=""
DRIVERS="udp"
TESTS="echo-1M-8 echo-64K-8 echo-1M-1 oneway-1M-8 oneway-64K-8 rtt-100"
RUNS=3
SECS=3
JSON=""
PLOT=""
BUILD="$ROOT/build"
CEILING=1
KEEP=0
while [[ $# -gt 0 ]]; do
    case $1 in
    --mtus) MTUS=$2; shift 2 ;;
    --mtu) MTUS=$2; shift 2 ;;
    --loopback) LOOPBACK=1; shift ;;
    --rate) RATE=$2; shift 2 ;;
    --delay) DELAY=$2; shift 2 ;;
    --driver) DRIVERS=$2; [[ $DRIVERS == both ]] && DRIVERS="udp raw"; shift 2 ;;
    --tests) TESTS=$2; shift 2 ;;
    --runs) RUNS=$2; shift 2 ;;
    --seconds) SECS=$2; shift 2 ;;
    --json) JSON=$2; shift 2 ;;
    --plot) PLOT=$2; shift 2 ;;
    --build) BUILD=$2; shift 2 ;;
    --no-ceiling) CEILING=0; shift ;;
    --keep) KEEP=1; shift ;;
    -h | --help) sed -n '2,/^set -euo/p' "$0" | sed '$d; s/^# \{0,1\}//'; exit 0 ;;
    *) echo "link-bench: unknown option $1 (see --help)" >&2; exit 2 ;;
    esac
done
[[ $BUILD == /* ]] || BUILD=$ROOT/$BUILD

if [[ $(id -u) -ne 0 ]]; then
    echo "link-bench: needs root: it creates network namespaces, a veth pair and tc qdiscs." >&2
    echo "  Run it as root (sudo bash bench/link/link-bench.sh ...)." >&2
    exit 2
fi
for tool in ip tc; do
    command -v $tool >/dev/null || { echo "link-bench: $tool missing (apt-get install iproute2)" >&2; exit 2; }
done
PERF=$(command -v perf || true)
if [[ -n $PERF ]] && ! $PERF stat -e task-clock,raw_syscalls:sys_enter -- true >/dev/null 2>&1; then
    PERF=""
fi
[[ -n $PERF ]] || echo "link-bench: perf (linux-perf) missing or without tracepoints: no CPU or system-call figures" >&2
HP=$BUILD/tools/homa-perf
UC=$BUILD/bench/udp_ceiling
for f in "$HP" "$UC"; do
    [[ -x $f ]] || { echo "link-bench: $f not built (cmake --build $BUILD)" >&2; exit 2; }
done
SOCKPERF=$(command -v sockperf || true)

TAG=lb$$
NA=${TAG}a
NB=${TAG}b
OUT=$(mktemp -d /tmp/link-bench.XXXXXX)
PIDS=()
cleanup() {
    local p
    for p in ${PIDS[@]+"${PIDS[@]}"}; do kill "$p" 2>/dev/null || true; done
    ip netns del "$NA" 2>/dev/null || true
    ip netns del "$NB" 2>/dev/null || true
    if [[ $KEEP == 1 ]]; then echo "link-bench: logs kept in $OUT"; else rm -rf "$OUT"; fi
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

# net_up MTU: namespaces A (10.241.0.1) and B (10.241.0.2) on a veth pair.
net_up() {
    ip netns del "$NA" 2>/dev/null || true
    ip netns del "$NB" 2>/dev/null || true
    ip netns add "$NA"
    ip netns add "$NB"
    ip link add vA netns "$NA" type veth peer name vB netns "$NB"
    ip -n "$NA" addr add 10.241.0.1/24 dev vA
    ip -n "$NB" addr add 10.241.0.2/24 dev vB
    ip -n "$NA" link set vA mtu "$1" up
    ip -n "$NB" link set vB mtu "$1" up
    ip -n "$NA" link set lo up
    ip -n "$NB" link set lo up
    local ns dev
    for ns in "$NA:vA" "$NB:vB"; do
        dev=${ns#*:}
        ns=${ns%%:*}
        if [[ -n $DELAY ]]; then
            if ! ip netns exec "$ns" tc qdisc add dev "$dev" root netem delay "$DELAY" \
                ${RATE:+rate $RATE} 2>/dev/null; then
                echo "link-bench: this kernel has no netem: --delay $DELAY is not applied" >&2
                DELAY=""
            fi
        fi
        if [[ -z $DELAY && -n $RATE ]]; then
            ip netns exec "$ns" tc qdisc add dev "$dev" root tbf rate "$RATE" burst 256kb latency 10ms
        fi
    done
}

# CPU and system calls of pids over a window: `perf stat` attached to each.
# Sets STAT_PID (0 without perf).
stat_start() { # outfile pid
    STAT_PID=0
    if [[ -n $PERF ]]; then
        $PERF stat -x, -e task-clock,raw_syscalls:sys_enter -p "$2" -o "$1" >/dev/null 2>&1 &
        STAT_PID=$!
        PIDS+=("$STAT_PID")
    fi
}

# run_one NSCLIENT NSSERVER ADDR PROTO DRIVER TEST RUN: one run of one test.
run_one() {
    local nc=$1 ns=$2 addr=$3 proto=$4 drv=$5 test=$6 run=$7
    local kind size out reply=()
    kind=${test%%-*}
    case $test in
    rtt-100) size=100 out=1 ;;
    *-1M-*) size=1000000 out=${test##*-} ;;
    *-64K-*) size=65536 out=${test##*-} ;;
    esac
    [[ $kind == oneway ]] && reply=(--reply-size 0)
    local ttype=tput
    [[ $kind == rtt ]] && ttype=rtt
    local port=$((4200 + RANDOM % 500))
    local extra=()
    [[ $proto == homa ]] && extra=(--driver "$drv")
    local tag="$pname-$proto-$drv-$test-$run"
    ip netns exec "$ns" "$HP" server --proto "$proto" --port "$port" ${extra[@]+"${extra[@]}"} \
        ${reply[@]+"${reply[@]}"} >"$OUT/$tag.server" 2>&1 &
    local spid=$!
    PIDS+=("$spid")
    sleep 0.4
    local warm=0.5
    ip netns exec "$nc" "$HP" client --proto "$proto" --server "$addr:$port" --test "$ttype" \
        --size "$size" --outstanding "$out" --seconds "$SECS" --warmup "$warm" --drain 3 --json \
        ${extra[@]+"${extra[@]}"} ${reply[@]+"${reply[@]}"} >"$OUT/$tag.client" 2>&1 &
    local cpid=$!
    PIDS+=("$cpid")
    # The perf window: the client's measured window, less a margin each side.
    sleep "$(awk -v w=$warm 'BEGIN{print w + 0.3}')"
    local win
    win=$(awk -v s=$SECS 'BEGIN{print s - 0.6}')
    local p1 p2
    stat_start "$OUT/$tag.cstat" "$cpid"
    p1=$STAT_PID
    stat_start "$OUT/$tag.sstat" "$spid"
    p2=$STAT_PID
    sleep "$win"
    [[ $p1 != 0 ]] && kill -INT "$p1" 2>/dev/null
    [[ $p2 != 0 ]] && kill -INT "$p2" 2>/dev/null
    wait "$cpid" || true
    [[ $p1 != 0 ]] && wait "$p1" 2>/dev/null || true
    [[ $p2 != 0 ]] && wait "$p2" 2>/dev/null || true
    kill "$spid" 2>/dev/null || true
    wait "$spid" 2>/dev/null || true
    echo "$win" >"$OUT/$tag.win"
    RUN_PREFIX=$OUT/$tag
}

# sockperf ping-pong over TCP, 100-byte messages: its p50/p99/p999 (us).
run_sockperf() {
    local nc=$1 ns=$2 addr=$3 run=$4
    local port=$((11000 + RANDOM % 1000))
    ip netns exec "$ns" "$SOCKPERF" server --tcp -i "$addr" -p "$port" >/dev/null 2>&1 &
    local spid=$!
    PIDS+=("$spid")
    sleep 0.5
    ip netns exec "$nc" "$SOCKPERF" ping-pong --tcp -i "$addr" -p "$port" -m 100 -t "$SECS" \
        --full-rtt >"$OUT/sockperf-$run" 2>&1 || true
    kill "$spid" 2>/dev/null || true
    wait "$spid" 2>/dev/null || true
    RUN_PREFIX=$OUT/sockperf-$run
}

# ceiling NSCLIENT NSSERVER ADDR MTU RUN
run_ceiling() {
    local nc=$1 ns=$2 addr=$3 mtu=$4 run=$5
    local seg=$((mtu - 28))
    [[ $seg -gt 65507 ]] && seg=65507
    local tag="ceiling-$run"
    ip netns exec "$ns" "$UC" recv 5999 "$SECS" >"$OUT/$tag.recv" 2>&1 &
    local rpid=$!
    PIDS+=("$rpid")
    sleep 0.3
    ip netns exec "$nc" "$UC" send "$addr" 5999 "$((SECS + 1))" "$seg" >"$OUT/$tag.send" 2>&1 &
    local spid=$!
    PIDS+=("$spid")
    sleep 0.5
    local p1 p2 win
    win=$(awk -v s=$SECS 'BEGIN{print s - 0.6}')
    stat_start "$OUT/$tag.cstat" "$spid"
    p1=$STAT_PID
    stat_start "$OUT/$tag.sstat" "$rpid"
    p2=$STAT_PID
    sleep "$win"
    [[ $p1 != 0 ]] && kill -INT "$p1" 2>/dev/null
    [[ $p2 != 0 ]] && kill -INT "$p2" 2>/dev/null
    wait "$spid" "$rpid" || true
    [[ $p1 != 0 ]] && wait "$p1" 2>/dev/null || true
    [[ $p2 != 0 ]] && wait "$p2" 2>/dev/null || true
    echo "$win" >"$OUT/$tag.win"
    RUN_PREFIX=$OUT/$tag
}

LIST=$OUT/runs.txt # path mtu proto driver test run prefix
: >"$LIST"
paths=()
for m in $MTUS; do paths+=("veth:$m"); done
[[ $LOOPBACK == 1 ]] && paths+=("loopback:65536")
for p in "${paths[@]}"; do
    kind=${p%%:*}
    mtu=${p##*:}
    if [[ $kind == veth ]]; then
        net_up "$mtu"
        NC=$NA
        NS=$NB
        ADDR=10.241.0.2
        pname="veth$mtu"
    else
        ip netns del "$NA" 2>/dev/null || true
        ip netns add "$NA"
        ip -n "$NA" link set lo up
        NC=$NA
        NS=$NA
        ADDR=127.0.0.1
        pname="loopback"
    fi
    echo "== $pname (MTU $mtu${RATE:+, rate $RATE}${DELAY:+, delay $DELAY})"
    for r in $(seq "$RUNS"); do
        for t in $TESTS; do
            for d in $DRIVERS; do
                run_one "$NC" "$NS" "$ADDR" homa "$d" "$t" "$r"
                echo "$pname $mtu homa $d $t $r $RUN_PREFIX" >>"$LIST"
            done
            run_one "$NC" "$NS" "$ADDR" tcp - "$t" "$r"
            echo "$pname $mtu tcp - $t $r $RUN_PREFIX" >>"$LIST"
            if [[ $t == rtt-100 && -n $SOCKPERF ]]; then
                run_sockperf "$NC" "$NS" "$ADDR" "$pname-$r"
                echo "$pname $mtu sockperf - $t $r $RUN_PREFIX" >>"$LIST"
            fi
        done
        if [[ $CEILING == 1 && $kind == veth ]]; then
            run_ceiling "$NC" "$NS" "$ADDR" "$mtu" "$pname-$r"
            echo "$pname $mtu udp-ceiling - oneway $r $RUN_PREFIX" >>"$LIST"
        fi
        printf '   run %d of %d done\n' "$r" "$RUNS"
    done
done

/usr/bin/python3 "$ROOT/bench/link/link_report.py" "$LIST" "${JSON:-}" "$RATE" "$DELAY"
if [[ -n $PLOT ]]; then
    if [[ -z $JSON ]]; then
        JSON=$OUT/link.json
        /usr/bin/python3 "$ROOT/bench/link/link_report.py" "$LIST" "$JSON" "$RATE" "$DELAY" >/dev/null
    fi
    if ! /usr/bin/python3 "$ROOT/tools/plot/homa-plot" --kind link "$JSON" -o "$PLOT" 2>"$OUT/plot.err"; then
        echo "link-bench: no plot: $(tail -n 1 "$OUT/plot.err")" >&2
    fi
fi
