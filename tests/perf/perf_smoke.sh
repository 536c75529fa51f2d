#!/bin/sh
# Smoke test of tools/homa-perf (docs/homa-perf.md):
#   1. homa-perf selftest (histogram accuracy, verify patterns);
#   2. homa-perf compare --test rtt --seconds 1 --json: Homa and TCP on
#      loopback, both must complete RPCs with zero errors;
#   3. a 1-second TCP workload run (W4, --verify) against a TCP server started
#      here: zero errors, verified, per-bucket latency and slowdown present.
# The JSON checked is the last line of each run's output.
# Usage: perf_smoke.sh PATH/TO/homa-perf
set -eu

PERF=${1:?usage: perf_smoke.sh PATH/TO/homa-perf}
tmp=$(mktemp -d)
server_pid=
cleanup() {
    if [ -n "$server_pid" ]; then
        kill "$server_pid" 2>/dev/null || true
        wait "$server_pid" 2>/dev/null || true
    fi
    rm -rf "$tmp"
}
trap cleanup EXIT INT TERM

fail() {
    echo "perf_smoke: FAIL: $*" >&2
    exit 1
}

# check_json FILE KIND: KIND is compare or workload.
check_json() {
    tail -n 1 "$1" | python3 -c '
import json, sys
kind = sys.argv[1]
obj = json.loads(sys.stdin.read())

def check_result(r, name, need_verified=False, workload=False):
    for k in ("proto", "test", "rpcs", "errors", "verified", "latency_us", "gbps",
              "rpcs_per_sec"):
        assert k in r, "%s: missing %s" % (name, k)
    for k in ("p50", "p99", "p999"):
        assert k in r["latency_us"], "%s: missing latency_us.%s" % (name, k)
        assert r["latency_us"][k] > 0, "%s: latency_us.%s is not positive" % (name, k)
    assert r.get("error") is None, "%s: run failed: %s" % (name, r.get("error"))
    assert r["errors"] == 0, "%s: errors = %s" % (name, r["errors"])
    assert r["rpcs"] > 0, "%s: no RPCs" % name
    assert r["gbps"] > 0 and r["rpcs_per_sec"] > 0, "%s: zero rate" % name
    assert isinstance(r["verified"], bool)
    if need_verified:
        assert r["verified"] is True, "%s: not verified" % name
    if workload:
        assert r["buckets"], "%s: no buckets" % name
        for b in r["buckets"]:
            for k in ("min_bytes", "max_bytes", "rpcs", "p50_us", "p99_us",
                      "slowdown_p50", "slowdown_p99"):
                assert k in b, "%s: bucket missing %s" % (name, k)
        assert r["slowdown"]["p50"] is not None, "%s: no slowdown" % name
        assert sum(b["rpcs"] for b in r["buckets"]) == r["rpcs"], "%s: bucket sum" % name

if kind == "compare":
    for p in ("homa", "tcp"):
        assert p in obj, "missing %s" % p
        check_result(obj[p], p)
        assert obj[p]["proto"] == p
    for k in ("gbps", "rpcs_per_sec", "latency_us"):
        assert k in obj["ratio"], "ratio: missing %s" % k
    for k in ("p50", "p99", "p999"):
        assert obj["ratio"]["latency_us"][k] is not None, "ratio: no latency_us.%s" % k
    print("perf_smoke: compare ok: homa p50 %.1f us, tcp p50 %.1f us, ratio %.2f" % (
        obj["homa"]["latency_us"]["p50"], obj["tcp"]["latency_us"]["p50"],
        obj["ratio"]["latency_us"]["p50"]))
else:
    check_result(obj, "workload", need_verified=True, workload=True)
    print("perf_smoke: workload ok: %d rpcs, p99 %.1f us, slowdown p99 %.2f" % (
        obj["rpcs"], obj["latency_us"]["p99"], obj["slowdown"]["p99"]))
' "$2" || fail "$2 JSON check (output in $1):
$(cat "$1")"
}

"$PERF" selftest || fail "selftest"

"$PERF" compare --test rtt --seconds 1 --json >"$tmp/compare.out" 2>&1 ||
    fail "compare exited with status $?:
$(cat "$tmp/compare.out")"
check_json "$tmp/compare.out" compare

# The background job opens its output file itself, possibly after the first
# sed below runs: create it first so that sed never finds it missing.
: >"$tmp/server.out"
"$PERF" server --proto tcp --port 0 >"$tmp/server.out" 2>&1 &
server_pid=$!
port=
i=0
while [ $i -lt 100 ]; do
    port=$(sed -n 's/.* server on port \([0-9][0-9]*\).*/\1/p' "$tmp/server.out")
    [ -n "$port" ] && break
    kill -0 "$server_pid" 2>/dev/null || fail "server died: $(cat "$tmp/server.out")"
    sleep 0.1
    i=$((i + 1))
done
[ -n "$port" ] || fail "server did not report its port"

"$PERF" client --proto tcp --server "127.0.0.1:$port" --test workload --workload w4 \
    --gbps 0.5 --seconds 1 --verify --json >"$tmp/workload.out" 2>&1 ||
    fail "workload client exited with status $?:
$(cat "$tmp/workload.out")"
check_json "$tmp/workload.out" workload

echo "perf_smoke: PASS"
