#!/bin/bash
# The raw IP driver between two network namespaces joined by a veth pair
# (ctest raw_netns).  Needs root and iproute2; exits 77 (skipped) without.
#
#   raw_netns.sh RAW_PEER
#
# 1. No Homa in the other namespace: its kernel answers ICMP "protocol
#    unreachable" (IPv4) / "unknown next header" (IPv6) and the RPC fails
#    at once with HOMA_ERR_UNREACHABLE (the timeout is 3 s).
# 2. Echo RPCs of 0 B .. 1 MB over IPv4 and IPv6, verified.
# 3. Two server processes on different ports in one namespace: each serves
#    its own client and sees none of the other's packets.
# 4. The priority in the TOS / traffic class byte, seen by tcpdump on the
#    veth: control packets 0xe0, DATA at several levels, all prio << 5.
# 5. A port nobody has in a namespace with Homa peers: nothing answers
#    (libhoma sends no ICMP), so that case is not fail-fast; not tested.
set -u
PEER=${1:?usage: raw_netns.sh RAW_PEER}
skip() { echo "SKIP: $*"; exit 77; }
[ "$(id -u)" -eq 0 ] || skip "needs root (network namespaces, CAP_NET_RAW)"
command -v ip >/dev/null || skip "needs ip (iproute2)"

TAG=$$
NS1=hx-raw-$TAG-a
NS2=hx-raw-$TAG-b
VA=hxra$TAG
VB=hxrb$TAG
TMP=$(mktemp -d /tmp/hx-raw.XXXXXX)
PIDS=()
cleanup() {
    for p in "${PIDS[@]}"; do kill "$p" 2>/dev/null; done
    wait 2>/dev/null
    ip netns del "$NS1" 2>/dev/null
    ip netns del "$NS2" 2>/dev/null
    rm -rf "$TMP"
}
trap cleanup EXIT
fail() { echo "FAIL: $*"; exit 1; }

ip netns add "$NS1" 2>/dev/null || skip "cannot create network namespaces"
ip netns add "$NS2" || fail "netns add"
ip link add "$VA" type veth peer name "$VB" || skip "cannot create a veth pair"
ip link set "$VA" netns "$NS1" && ip link set "$VB" netns "$NS2" || fail "veth into namespaces"
ip -n "$NS1" addr add 10.77.0.1/24 dev "$VA"
ip -n "$NS2" addr add 10.77.0.2/24 dev "$VB"
ip -n "$NS1" addr add fd77::1/64 dev "$VA" nodad
ip -n "$NS2" addr add fd77::2/64 dev "$VB" nodad
for ns in "$NS1" "$NS2"; do
    ip -n "$ns" link set lo up
done
ip -n "$NS1" link set "$VA" up
ip -n "$NS2" link set "$VB" up

# The veth's MTU, not loopback's: one Homa packet per Ethernet frame.
export HOMA_DRIVER=raw HOMA_MTU=${RAW_NETNS_MTU:-1500} # RAW_NETNS_MTU=65536: IP fragmentation
in1() { ip netns exec "$NS1" "$@"; }
in2() { ip netns exec "$NS2" "$@"; }

# Neighbour discovery and IPv6 address setup take a moment.
for i in $(seq 50); do
    in1 ping -c1 -W1 10.77.0.2 >/dev/null 2>&1 && in1 ping -6 -c1 -W1 fd77::2 >/dev/null 2>&1 && break
    sleep 0.1
done

echo "== 1. no Homa in $NS2: fail fast"
for host in 10.77.0.2 fd77::2; do
    out=$(in1 "$PEER" unreach "$host" 4000) || fail "unreach $host: $out"
    echo "$host: $out"
done

start_server() { # port seconds -> pid in SPID
    rm -f "$TMP/ready.$1"
    # Not through in2: a backgrounded function is a subshell, and the
    # signal must reach the server itself.
    ip netns exec "$NS2" "$PEER" serve "$1" "$2" "$TMP/ready.$1" >"$TMP/serve.$1" 2>&1 &
    SPID=$!
    PIDS+=("$SPID")
    for i in $(seq 100); do
        [ -e "$TMP/ready.$1" ] && return 0
        sleep 0.05
    done
    fail "server on port $1 did not start: $(cat "$TMP/serve.$1")"
}

echo "== 2. echo 0 B .. 1 MB, IPv4 and IPv6 (and 4. TOS on the wire)"
CAP=""
if command -v tcpdump >/dev/null; then
    ip netns exec "$NS2" tcpdump -i "$VB" -nn -U -w "$TMP/cap.pcap" 'ip proto 146 or ip6 proto 146' \
        >/dev/null 2>&1 &
    CAP=$!
    PIDS+=("$CAP")
    sleep 0.5
fi
start_server 4000 60
S1=$SPID
for host in 10.77.0.2 fd77::2; do
    out=$(in1 "$PEER" call "$host" 4000) || fail "call $host: $out"
    echo "$host: $out"
done

echo "== 3. two server processes, ports 4000 and 4001"
start_server 4001 60
S2=$SPID
out=$(in1 "$PEER" call 10.77.0.2 4001) || fail "call 4001: $out"
echo "4001: $out"
kill -TERM "$S1" "$S2"
wait "$S1" "$S2"
cat "$TMP/serve.4000" "$TMP/serve.4001"
read -r _ n1 _ in1c _ g1 _ np1 <"$TMP/serve.4000"
read -r _ n2 _ in2c _ g2 _ np2 <"$TMP/serve.4001"
[ "$n1" -eq 18 ] || fail "server 4000 served $n1 RPCs, expected 18"
[ "$n2" -eq 9 ] || fail "server 4001 served $n2 RPCs, expected 9"
[ "$g1" -eq 0 ] && [ "$g2" -eq 0 ] && [ "$np1" -eq 0 ] && [ "$np2" -eq 0 ] ||
    fail "a server saw packets that were not for its port"
# Each saw only its own traffic: 4001 got about half of what 4000 got.
[ "$in2c" -lt "$in1c" ] || fail "server 4001 saw $in2c packets, 4000 saw $in1c"

if [ -n "$CAP" ]; then
    sleep 0.3
    kill -INT "$CAP"
    wait "$CAP" 2>/dev/null
    tcpdump -nn -v -r "$TMP/cap.pcap" 2>/dev/null >"$TMP/cap.txt"
    tos=$(grep -o 'tos 0x[0-9a-f]*' "$TMP/cap.txt" | sort | uniq -c | tr '\n' ' ')
    cls=$(grep -o 'class 0x[0-9a-f]*' "$TMP/cap.txt" | sort | uniq -c | tr '\n' ' ')
    echo "captured: IPv4 $tos; IPv6 $cls"
    grep -q 'tos 0xe0' "$TMP/cap.txt" || fail "no IPv4 packet at priority 7 (TOS 0xe0)"
    grep -q 'class 0xe0' "$TMP/cap.txt" || fail "no IPv6 packet at priority 7 (class 0xe0)"
    [ "$(grep -o 'tos 0x[0-9a-f]*' "$TMP/cap.txt" | sort -u | wc -l)" -ge 2 ] ||
        fail "IPv4 DATA did not use several priority levels"
    for v in $(grep -o 'tos 0x[0-9a-f]*\|class 0x[0-9a-f]*' "$TMP/cap.txt" | awk '{print $2}' | sort -u); do
        [ $((v % 32)) -eq 0 ] || fail "TOS $v is not of the form prio << 5"
    done
else
    echo "(tcpdump missing: TOS on the wire not checked; test_raw_driver checks it on loopback)"
fi
echo "PASS"
