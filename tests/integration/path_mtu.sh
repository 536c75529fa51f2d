#!/usr/bin/env bash
# Runs test_rt_path_mtu across two network namespaces joined by a veth pair
# with MTU 1500 (see the C file).  Needs root; exits 77 (skipped) without.
set -euo pipefail
BIN=$1
if [[ $(id -u) -ne 0 ]] || ! command -v ip >/dev/null; then
    echo "path_mtu: needs root and ip(8): skipped"
    exit 77
fi
A=hx-pmtu-a-$$
B=hx-pmtu-b-$$
cleanup() {
    set +e # a server that already exited must not stop the teardown
    [[ -n ${SPID:-} ]] && kill "$SPID" 2>/dev/null
    ip netns del "$A" 2>/dev/null || true
    ip netns del "$B" 2>/dev/null || true
}
trap cleanup EXIT
ip netns add "$A"
ip netns add "$B"
ip link add pm0 netns "$A" type veth peer name pm1 netns "$B"
ip -n "$A" addr add 10.199.0.1/24 dev pm0
ip -n "$B" addr add 10.199.0.2/24 dev pm1
for ns in "$A" "$B"; do
    ip -n "$ns" link set lo up
done
ip -n "$A" link set pm0 mtu 1500 up
ip -n "$B" link set pm1 mtu 1500 up
OUT=$(mktemp)
ip netns exec "$A" "$BIN" server 4099 >"$OUT" &
SPID=$!
for _ in $(seq 100); do
    grep -q ready "$OUT" && break
    sleep 0.05
done
ip netns exec "$B" timeout 60 "$BIN" client 10.199.0.1:4099
wait "$SPID"
SPID=
rm -f "$OUT"
