#!/usr/bin/env bash
# Cluster in a box: builds homa-perf, sets up an emulated 4-host cluster
# (network namespaces, a switch with 8 priority queues per port;
# scripts/homa-cluster), runs the W4 workload at 80 % load over Homa and
# then over TCP with the same messages, and prints both side by side.  JSON
# and a PNG chart land in the build directory.  The chart is optional: without
# python3-matplotlib it is skipped, saying so, and the demo still succeeds.
#
# What it needs (a C compiler, cmake, iproute2: scripts/setup.sh --demo) it
# installs first when missing, as root on Debian, saying what and why; set
# HOMA_SETUP=check to be told the command instead, HOMA_SETUP=off to skip
# the check.
#
# Link rate: 100 Mbit/s per CPU, at most 1 Gbit/s (what the machine can
# carry: every emulated packet costs CPU time; docs/cluster.md), or
# HOMA_DEMO_MBIT.
#
# Needs root (network namespaces); without root it says so and runs the
# virtual-network demo (scripts/demo.sh) instead.
#
# Environment: HOMA_DEMO_SECONDS (measured seconds per protocol, default 20),
# HOMA_DEMO_BUILD_DIR (default build-cluster-demo).  Extra arguments go to
# `homa-perf cluster`, e.g. `bash scripts/cluster-demo.sh --workload w5`.
set -euo pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
BUILD=${HOMA_DEMO_BUILD_DIR:-$ROOT/build-cluster-demo}
SECS=${HOMA_DEMO_SECONDS:-20}
CPUS=$(nproc 2>/dev/null || echo 2)
MBIT=${HOMA_DEMO_MBIT:-$((CPUS * 100 > 1000 ? 1000 : CPUS * 100))}

if [ "$(id -u)" -ne 0 ]; then
    cat >&2 <<'EOF'
cluster-demo: the emulated cluster needs root (it creates network namespaces,
a bridge and traffic-control queues), so it cannot run here.  Run it as root
(e.g. sudo bash scripts/cluster-demo.sh).  Meanwhile, here is the
virtual-network demo instead (scripts/demo.sh):

EOF
    HOMA_DEMO_CALLER=scripts/cluster-demo.sh exec bash "$ROOT/scripts/demo.sh"
fi

bash "$ROOT/scripts/setup.sh" --ensure --demo --for scripts/cluster-demo.sh || exit 1

echo "[build] $BUILD"
GEN=()
if command -v ninja >/dev/null 2>&1; then GEN=(-G Ninja); fi
cmake -S "$ROOT" -B "$BUILD" "${GEN[@]}" -DCMAKE_BUILD_TYPE=Release -DHOMA_BUILD_TESTS=OFF \
    >/dev/null
cmake --build "$BUILD" --target homa-perf -j "$(nproc 2>/dev/null || echo 2)" >/dev/null

NAME="hd$$"
# shellcheck disable=SC2317 # run by the EXIT trap
cleanup() {
    "$ROOT/scripts/homa-cluster" down --name "$NAME" >/dev/null 2>&1 || true
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

JSON=$BUILD/cluster-w4.json
PNG=$BUILD/cluster-w4.png
rm -f "$PNG"
"$ROOT/scripts/homa-cluster" up --name "$NAME" --hosts 4 --rate "${MBIT}mbit" --host-queues prio
status=0
HOMA_CLUSTER_SCRIPT="$ROOT/scripts/homa-cluster" "$BUILD/tools/homa-perf" cluster \
    --cluster "$NAME" --workload w4 --load 0.8 --hosts 4 --seconds "$SECS" \
    --json "$JSON" --plot "$PNG" "$@" || status=$?
if [ "$status" -eq 0 ]; then
    echo
    echo "cluster-demo: results: $JSON"
    if [ -s "$PNG" ]; then
        echo "cluster-demo: chart:   $PNG"
    else
        # homa-perf said why above; the comparison itself succeeded
        echo "cluster-demo: chart:   skipped (optional; it needs python3-matplotlib:" \
            "apt-get install python3-matplotlib, then run the demo again)"
    fi
fi
exit "$status"
