#!/bin/bash
# CPU per RPC with and without the full fault mix (20 % loss, 5 %
# duplication, 10 % reordering of depth 8), on loopback (docs/perf-log.md).
#
# For each rate, runs one `homa-perf server` and one `homa-perf client --test
# workload --verify` fault-free, then both with HOMA_FAULTS (the full mix
# and a seed), each process under /usr/bin/time, busy polling off
# (HOMA_BUSY_POLL_US=0) so that CPU time is work, not spinning.  Prints RPCs,
# failed, p50, the CPU seconds (user + system) of each process and the
# microseconds of CPU per RPC.
#
# usage: bench/loss/loss-cpu.sh [--perf BIN] [--workload w1] [--rates "0.04 0.08"]
#            [--seconds 3] [--faults SPEC]
# Exit status: 0 ok, 1 a run produced no result, 2 bad usage.
set -u
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
PERF=$ROOT/build/tools/homa-perf
WORKLOAD=w1
RATES="0.04 0.08 0.10"
SECS=3
FAULTS="drop=0.2,dir=tx,dup=0.05,reorder=0.1,reorder_depth=8,seed=3"
while [ $# -gt 0 ]; do
    case "$1" in
    --perf) PERF=$2; shift ;;
    --workload) WORKLOAD=$2; shift ;;
    --rates) RATES=$2; shift ;;
    --seconds) SECS=$2; shift ;;
    --faults) FAULTS=$2; shift ;;
    *) echo "usage: $0 [--perf BIN] [--workload W] [--rates \"G ...\"] [--seconds S] [--faults SPEC]" >&2; exit 2 ;;
    esac
    shift
done
[ -x "$PERF" ] || { echo "loss-cpu: no $PERF (build first)" >&2; exit 2; }
[ -x /usr/bin/time ] || { echo "loss-cpu: needs /usr/bin/time (Debian package time)" >&2; exit 2; }
TMP=$(mktemp -d)
SP=
cleanup() { [ -n "$SP" ] && pkill -INT -P "$SP" 2>/dev/null; rm -rf "$TMP"; }
trap cleanup EXIT
export HOMA_BUSY_POLL_US=0
rc=0
printf '%-8s %-6s %8s %7s %10s %8s %8s %8s\n' workload rate mode rpcs failed "p50 us" "srv s" "cli s" | sed 's/$/  us\/rpc/'
for g in $RATES; do
    for mode in clean faults; do
        f=""; [ $mode = faults ] && f=$FAULTS
        port=$((30000 + RANDOM % 10000))
        HOMA_FAULTS=$f /usr/bin/time -f "%U %S" -o "$TMP/srv" "$PERF" server --proto homa --port $port >/dev/null 2>&1 &
        SP=$!
        sleep 0.3
        HOMA_FAULTS=$f /usr/bin/time -f "%U %S" -o "$TMP/cli" "$PERF" client --proto homa \
            --server 127.0.0.1:$port --test workload --workload "$WORKLOAD" --gbps "$g" \
            --seconds "$SECS" --no-calibrate --verify --json 2>/dev/null | tail -1 >"$TMP/json"
        # GNU time ignores SIGINT while it waits: signal the server itself
        pkill -INT -P $SP 2>/dev/null; wait $SP 2>/dev/null; SP=
        python3 - "$WORKLOAD" "$g" "$mode" "$TMP" <<'PY' || rc=1
import json, sys
w, g, mode, d = sys.argv[1:]
try:
    j = json.load(open(d + "/json"))
    cpu = lambda f: sum(float(x) for x in open(d + "/" + f).read().splitlines()[-1].split())
    s, c = cpu("srv"), cpu("cli")
except Exception as e:
    print("%-8s %-6s %8s no result (%s)" % (w, g, mode, e)); sys.exit(1)
print("%-8s %-6s %8s %7d %10d %8.0f %8.2f %8.2f  %.1f" % (w, g, mode, j["rpcs"], j["errors"],
      j["latency_us"]["p50"], s, c, 1e6 * (s + c) / max(1, j["rpcs"])))
PY
    done
done
exit $rc
