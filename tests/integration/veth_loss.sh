#!/bin/bash
# Homa over a real link: two network namespaces joined by a veth pair at
# MTU 1500, as a NIC would carry it (MTU-sized frames, GSO/GRO), for the
# UDP driver and then the raw IP driver (ctest veth_loss).
#
#   veth_loss.sh HOMA_PERF
#
# 1. No loss: 1 MB echoes, every byte verified; the sender's GSO sends
#    carry whole batches (at least 30 segments of 1,452 bytes on average,
#    of the 44 one datagram holds), and the receiver reads GRO buffers.
# 2. 5 % loss injected in both processes' drivers (HOMA_FAULTS, both
#    directions): 1 MB and 64 KB echoes, every RPC completes, every byte
#    verified (homa-perf --verify counts a wrong byte as an error).
# Needs CAP_NET_ADMIN (namespaces, veth): without it, exits 77, which
# ctest reports as skipped, with the reason printed.
set -u
PERF=${1:?usage: veth_loss.sh HOMA_PERF}
skip() { echo "SKIP: $*"; exit 77; }
[ "$(id -u)" -eq 0 ] || skip "needs root (CAP_NET_ADMIN: network namespaces and a veth pair)"
command -v ip >/dev/null || skip "needs ip (iproute2)"

TAG=$$
NA=hx-veth-$TAG-a
NB=hx-veth-$TAG-b
TMP=$(mktemp -d /tmp/hx-veth.XXXXXX)
PIDS=()
cleanup() {
    for p in "${PIDS[@]}"; do kill "$p" 2>/dev/null; done
    wait 2>/dev/null
    ip netns del "$NA" 2>/dev/null
    ip netns del "$NB" 2>/dev/null
    rm -rf "$TMP"
}
trap cleanup EXIT
fail() {
    echo "FAIL: $*"
    if [ -s "$TMP/client" ]; then
        echo "--- the client's output:"
        grep -v -E '^  (engine|driver)\.' "$TMP/client" | tail -20
        grep -E '^  (engine|driver)\.(timeouts|rpc_timeouts|resend|peer|aborted|failed)' "$TMP/client"
        echo "--- the server's:"
        tail -5 "$TMP/server"
    fi
    exit 1
}

ip netns add "$NA" 2>/dev/null || skip "cannot create network namespaces"
ip netns add "$NB" || fail "ip netns add"
ip link add vA netns "$NA" type veth peer name vB netns "$NB" || skip "cannot create a veth pair"
ip -n "$NA" addr add 10.242.0.1/24 dev vA
ip -n "$NB" addr add 10.242.0.2/24 dev vB
ip -n "$NA" link set vA mtu 1500 up
ip -n "$NB" link set vB mtu 1500 up
ip -n "$NA" link set lo up
ip -n "$NB" link set lo up

# echo DRIVER FAULTS SIZE SECONDS: one run; the client's output in $TMP/client
echo_run() {
    local drv=$1 faults=$2 size=$3 secs=$4
    local port=$((4600 + RANDOM % 300))
    HOMA_FAULTS=$faults ip netns exec "$NB" "$PERF" server --proto homa --port "$port" \
        --driver "$drv" >"$TMP/server" 2>&1 &
    local spid=$!
    PIDS+=("$spid")
    sleep 0.5
    HOMA_FAULTS=$faults ip netns exec "$NA" "$PERF" client --proto homa \
        --server "10.242.0.2:$port" --driver "$drv" --test tput --size "$size" \
        --outstanding 4 --seconds "$secs" --drain 20 --verify --counters >"$TMP/client" 2>&1
    local rc=$?
    kill "$spid" 2>/dev/null
    wait "$spid" 2>/dev/null
    return $rc
}

# counter NAME: the client's total of a driver or engine counter
counter() { awk -v n="$1" '$1 == n {print $2}' "$TMP/client"; }

for drv in udp raw; do
    echo "== driver $drv"
    echo_run "$drv" "" 1000000 2 || fail "$drv, no loss: $(grep -E 'errors|error' "$TMP/client" | head -3)"
    grep -E '^  (rpcs|errors|goodput)' "$TMP/client"
    grep -q 'errors      0 ' "$TMP/client" || fail "$drv, no loss: RPC errors"
    grep -q 'verified: yes' "$TMP/client" || fail "$drv, no loss: payloads not verified"
    if [ "$drv" = udp ]; then
        sends=$(counter driver.gso_sends)
        segs=$(counter driver.gso_segments)
        [ -n "$sends" ] && [ "$sends" -gt 0 ] || fail "udp: no GSO sends over the veth"
        per=$((segs / sends))
        echo "   GSO: $segs segments in $sends sends ($per per send); GRO buffers: $(counter driver.gro_buffers)"
        [ "$per" -ge 30 ] || fail "udp: $per segments per GSO send, expected whole batches (>= 30)"
        [ "$(counter driver.gro_buffers)" -gt 0 ] || fail "udp: no GRO buffers received"
    fi
    for size in 1000000 65536; do
        echo_run "$drv" "drop=0.05,seed=$TAG" "$size" 2 ||
            fail "$drv, 5 % loss, $size B: $(grep -E 'errors|error' "$TMP/client" | head -3)"
        grep -E '^  (rpcs|errors)' "$TMP/client"
        grep -q 'errors      0 ' "$TMP/client" || fail "$drv, 5 % loss, $size B: RPC errors"
        grep -q 'verified: yes' "$TMP/client" || fail "$drv, 5 % loss: payloads not verified"
        drops=$(counter driver.fault_drops)
        [ -n "$drops" ] && [ "$drops" -gt 0 ] || fail "$drv, 5 % loss: no packet was dropped"
        echo "   $size B with 5 % loss: $drops packets dropped at the client, every byte verified"
    done
done
echo "PASS"
