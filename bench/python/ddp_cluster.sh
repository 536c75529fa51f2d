#!/usr/bin/env bash
# DDP step time on the cluster in a box: the Homa hook vs gloo, 4 ranks (one
# per emulated host), without and then with a competing W4 RPC load.
#
#   sudo bash bench/python/ddp_cluster.sh            (needs root and a build in build/)
#
# Environment: SCALED (1, default: Homa windows and timer tick scaled to the
# link as in `homa-perf cluster`; 0: libhoma's defaults), RATE (link rate, tc syntax; default 200mbit, what 2 cores
# carry for 4 hosts, see docs/cluster.md), LOAD (background load as a
# fraction of the link rate; default 0.5), STEPS (timed steps per
# configuration; default 10), MODEL (mlp or cnn; default mlp), RPC_TIMEOUT_MS
# (libhoma RPC timeout of the ranks; default 5000: the emulation, the
# training and the background share 2 cores), OUT (result directory;
# default a temporary one, printed), PHASES (default "idle w4": which runs),
# PACE (1: libhoma's pacer at the link rate in the ranks and the background;
# default 0), DDP_WINDOWS (bulk, default: the ranks' engines keep 64-packet
# grants and 1 MB in flight; rtt: the background's round-trip windows),
# DDP_HOMA_CONFIG / BG_HOMA_CONFIG (replace the engine settings
# of the ranks / of the background, key=value,... as --homa-config), PROBE
# (1: also measure 100 B round trips, Homa and TCP, under the background),
# MODE (embedded, default: every process has its own engine; homad: one
# homad per host serves that host's ranks and background processes, with
# the engine settings of the scaled round-trip windows, docs/homad.md),
# HOMAD_FLAGS (MODE=homad: more homad flags, e.g. "--max-incoming 1000000"),
# DDP_CLASS (the scheduling class, 0-3, of the ranks' Homa socket: through
# homad their gradients are sent and granted before the background's
# messages; default: unset, class 0 like everything else).
#
# Background: every host runs a homa-perf echo server and a W4 workload
# client to the next host (a ring), each offering LOAD/2 of the link rate in
# each direction, so every link carries LOAD x rate of payload: its host's
# requests plus its answers to the previous host.
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
BUILD=${BUILD:-$ROOT/build}
RATE=${RATE:-200mbit}
LOAD=${LOAD:-0.5}
STEPS=${STEPS:-10}
PHASES=${PHASES:-idle w4}
PACE=${PACE:-0}
MODE=${MODE:-embedded}
[[ $MODE == embedded || $MODE == homad ]] || { echo "ddp_cluster.sh: MODE is embedded or homad" >&2; exit 2; }
MODEL=${MODEL:-mlp}
RPC_TIMEOUT_MS=${RPC_TIMEOUT_MS:-5000}
OUT=${OUT:-$(mktemp -d /tmp/ddp-cluster.XXXXXX)}
mkdir -p "$OUT"
NAME=ddp$$
SUBNET=10.79.$(($$ % 200))
HC="$ROOT/scripts/homa-cluster"
PERF="$BUILD/tools/homa-perf"

[[ $(id -u) -eq 0 ]] || { echo "ddp_cluster.sh: needs root (network namespaces)" >&2; exit 2; }
[[ -x $PERF && -d $BUILD/python/homa ]] || { echo "ddp_cluster.sh: build first (cmake --build $BUILD)" >&2; exit 2; }

BG_PIDS=()
HOMAD_PIDS=()
cleanup() {
    local p
    for p in ${BG_PIDS[@]+"${BG_PIDS[@]}"}; do kill "$p" 2>/dev/null || true; done
    for p in ${HOMAD_PIDS[@]+"${HOMAD_PIDS[@]}"}; do kill "$p" 2>/dev/null || true; done
    wait 2>/dev/null || true
    rm -f /tmp/"$NAME"-h*.sock
    "$HC" down --name "$NAME" >/dev/null 2>&1 || true
}
trap cleanup EXIT
trap 'exit 130' INT TERM

"$HC" up --name "$NAME" --hosts 4 --rate "$RATE" --host-queues prio --subnet "$SUBNET" >/dev/null
# link rate in Gbit/s for the background load
gbit=$(python3 -c "
import re,sys; m=re.fullmatch(r'([0-9.]+)(k|m|g)?bit','$RATE'); v=float(m.group(1))
print(v*{'k':1e-6,'m':1e-3,'g':1,None:1e-9}[m.group(2)])")
bg_gbps=$(python3 -c "print($gbit * $LOAD / 2)")
# Homa settings scaled to the link as in `homa-perf cluster` (docs/cluster.md):
# windows of one 50 us round trip (at least 2 packets), max_incoming 8 of
# them, a 5 ms timer tick.  libhoma's defaults are sized for fast links.
win=$(python3 -c "import math; print(max(2, math.ceil($gbit * 1e9 * 50e-6 / 8 / 1416)) * 1416)")
SCALED=${SCALED:-1}
if [[ $SCALED == 1 ]]; then
    CFG_COMMON="unsched_bytes=$win,grant_window=$win,max_incoming=$((8 * win))"
    PERF_CFG=(--homa-config "$CFG_COMMON,tick_us=5000")
    PY_CFG=(--homa-config "$CFG_COMMON,tick_ns=5000000")
    if [[ ${DDP_WINDOWS:-bulk} == bulk ]]; then
        # The ranks move megabytes per step through ports the background
        # also fills.  Their own engine knows nothing of the background's
        # messages (another process, another engine), so their in-flight
        # budget must cover the queue those messages build, not an idle
        # round trip: 64-packet grants and 1 MB in flight (measured in
        # docs/python.md: with the round-trip windows above the hook took
        # 1.5-1.6x gloo's step time under the background, with these 0.8x).
        PY_CFG=(--homa-config "unsched_bytes=$win,grant_window=$((64 * 1416)),max_incoming=1000000,tick_ns=5000000")
    fi
else
    PERF_CFG=()
    PY_CFG=()
fi
[[ -n ${DDP_HOMA_CONFIG:-} ]] && PY_CFG=(--homa-config "$DDP_HOMA_CONFIG")
[[ -n ${DDP_CLASS:-} ]] && PY_CFG+=(--sched-class "$DDP_CLASS")
[[ -n ${BG_HOMA_CONFIG:-} ]] && PERF_CFG=(--homa-config "$BG_HOMA_CONFIG")
LINK_BPS=0
if [[ $PACE == 1 ]]; then
    LINK_BPS=$(python3 -c "print(int($gbit * 1e9))")
    bg_pace="link_mbps=$(python3 -c "print(int($gbit * 1e3))")"
    if [[ ${#PERF_CFG[@]} -gt 0 ]]; then PERF_CFG[1]+=",$bg_pace"; else PERF_CFG=(--homa-config "$bg_pace"); fi
fi

# MODE=homad: one homad per host; DENV[h] is what a process on host h needs
# in its environment to use it.  The host's engine sees the ranks' and the
# background's messages alike, so the round-trip windows are its settings
# (no enlarged windows for the ranks: that was a workaround for engines
# that do not see each other).
DENV=("" "" "" "")
if [[ $MODE == homad ]]; then
    HOMAD="$BUILD/daemon/homad"
    [[ -x $HOMAD ]] || { echo "ddp_cluster.sh: no $HOMAD (build first)" >&2; exit 2; }
    hflags=(--mtu 1500 --timeout-ticks "$RPC_TIMEOUT_MS" --max-rpcs 4096)
    if [[ $SCALED == 1 ]]; then
        hflags=(--mtu 1500 --unsched-bytes "$win" --grant-window "$win" --max-incoming $((8 * win))
            --tick-us 5000 --timeout-ticks $((RPC_TIMEOUT_MS / 5)) --max-rpcs 4096)
    fi
    if [[ $PACE == 1 ]]; then hflags+=(--link-bps "$LINK_BPS"); fi
    # HOMAD_FLAGS: more homad flags (they win over the ones above)
    read -r -a extra <<<"${HOMAD_FLAGS:-}"
    hflags+=(${extra[@]+"${extra[@]}"})
    for h in 0 1 2 3; do
        sock=/tmp/$NAME-h$h.sock
        "$HC" exec --name "$NAME" $h "$HOMAD" --socket "$sock" "${hflags[@]}" >"$OUT/homad$h.log" 2>&1 &
        HOMAD_PIDS+=($!)
        DENV[$h]="HOMA_DAEMON=$sock"
    done
    for h in 0 1 2 3; do
        for _ in $(seq 100); do [[ -S /tmp/$NAME-h$h.sock ]] && break; sleep 0.05; done
        [[ -S /tmp/$NAME-h$h.sock ]] || { echo "ddp_cluster.sh: homad on host $h did not start"; cat "$OUT/homad$h.log"; exit 1; }
    done
fi

run_ddp() { # tag
    local tag=$1 port=$((29500 + RANDOM % 1000)) r pids=()
    for r in 0 1 2 3; do
        "$HC" exec --name "$NAME" $r env ${DENV[$r]} PYTHONPATH="$BUILD/python" HOMA_MTU=1500 \
            GLOO_SOCKET_IFNAME=eth0 RANK=$r WORLD_SIZE=4 MASTER_ADDR="$SUBNET.1" \
            MASTER_PORT=$port OMP_NUM_THREADS=1 /usr/bin/python3 \
            "$ROOT/bench/python/ddp_bench.py" --worker --model "$MODEL" --steps "$STEPS" \
            --warmup 2 --rpc-timeout-ms "$RPC_TIMEOUT_MS" --link-bps "$LINK_BPS" ${PY_CFG[@]+"${PY_CFG[@]}"} --host "$SUBNET.$((r + 1))" --tag "$tag" --result "$OUT/$tag.json" \
            >"$OUT/$tag-rank$r.log" 2>&1 &
        pids+=($!)
    done
    for r in 0 1 2 3; do
        wait "${pids[$r]}" || { echo "rank $r failed:"; tail -20 "$OUT/$tag-rank$r.log"; exit 1; }
    done
}

echo "ddp_cluster: 4 hosts at $RATE, $MODEL, $STEPS steps, $MODE; results in $OUT"
if [[ " $PHASES " == *" idle "* ]]; then
    echo "-- no background traffic"
    run_ddp idle
fi
if [[ " $PHASES " == *" w4 "* ]]; then
echo "-- background: W4 over Homa, $LOAD of every link ($bg_gbps Gbit/s each way per host pair)"
for h in 0 1 2 3; do
    "$HC" exec --name "$NAME" $h env ${DENV[$h]} HOMA_MTU=1500 "$PERF" server --proto homa --port 4000 ${PERF_CFG[@]+"${PERF_CFG[@]}"} \
        >"$OUT/bg-server$h.log" 2>&1 &
    BG_PIDS+=($!)
done
sleep 1
for h in 0 1 2 3; do
    "$HC" exec --name "$NAME" $h env ${DENV[$h]} HOMA_MTU=1500 "$PERF" client --proto homa ${PERF_CFG[@]+"${PERF_CFG[@]}"} \
        --server "$SUBNET.$(((h + 1) % 4 + 1)):4000" --test workload --workload w4 \
        --gbps "$bg_gbps" --seconds 100000 >"$OUT/bg-client$h.log" 2>&1 &
    BG_PIDS+=($!)
done
sleep 2
if [[ ${PROBE:-0} == 1 ]]; then
    # Round trips across the loaded network (host 0 -> host 2, not a ring
    # neighbour): what a grant or an ack takes while the background runs.
    for proto in homa tcp; do
        "$HC" exec --name "$NAME" 2 env HOMA_MTU=1500 "$PERF" server --proto $proto --port 4100 \
            ${PERF_CFG[@]+"${PERF_CFG[@]}"} >"$OUT/probe-server-$proto.log" 2>&1 &
        probe_srv=$!
        sleep 0.5
        echo "-- probe: $proto 100 B round trips host 0 -> host 2 under the background"
        "$HC" exec --name "$NAME" 0 env HOMA_MTU=1500 "$PERF" client --proto $proto \
            ${PERF_CFG[@]+"${PERF_CFG[@]}"} --server "$SUBNET.3:4100" --test rtt --size 100 \
            --seconds 3 2>&1 | tee "$OUT/probe-$proto.log" | grep -E "latency|errors" || true
        kill "$probe_srv" 2>/dev/null || true
        wait "$probe_srv" 2>/dev/null || true
    done
fi
run_ddp w4
fi
python3 - "$OUT" $PHASES <<'EOF'
import json, sys
out = sys.argv[1]
print(f"{'background':>12} | {'backend':>7} | {'median ms/step':>14} | {'p99 ms/step':>11} | "
      f"{'in allreduce':>12} | rank 0 Homa counters")
for tag in sys.argv[2:]:
    res = json.load(open(f"{out}/{tag}.json"))
    for be, r in res.items():
        extra = ""
        if "counters" in r:
            c = r["counters"]
            extra = (f"{r['comm_median_ms']:9.1f} ms | data out {c['data_out']}, retransmitted "
                     f"{c['retransmit_pkts']}, RESENDs out {c['resend_out']}, timer stalls "
                     f"{c['timer_stalls']}, pacer stalls {c['pacer_stalls']}")
        print(f"{tag:>12} | {be:>7} | {r['median_ms']:14.1f} | {r['p99_ms']:11.1f} | {extra}")
EOF
