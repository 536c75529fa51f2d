#!/usr/bin/env bash
# Cluster in a box: builds homa-perf, sets up an emulated 4-host cluster
# (network namespaces, a switch with 8 priority queues per port;
# scripts/homa-cluster), runs the W4 workload at 80 % load over Homa and
# then over TCP with the same messages, and prints both side by side.  JSON
# and a PNG chart land in the build directory.  Installs nothing.
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
    exec bash "$ROOT/scripts/demo.sh"
fi

missing=()
for tool in cmake cc ip tc; do
    command -v "$tool" >/dev/null 2>&1 || missing+=("$tool")
done
if [ ${#missing[@]} -gt 0 ]; then
    echo "cluster-demo: missing ${missing[*]}; on Debian: apt-get install -y" \
        "--no-install-recommends build-essential cmake ninja-build iproute2" >&2
    exit 1
fi

echo "[build] $BUILD"
GEN=()
if command -v ninja >/dev/null 2>&1; then GEN=(-G Ninja); fi
cmake -S "$ROOT" -B "$BUILD" "${GEN[@]}" -DCMAKE_BUILD_TYPE=Release -DHOMA_BUILD_TESTS=OFF \
    >/dev/null
cmake --build "$BUILD" --target homa-perf -j "$(nproc 2>/dev/null || echo 2)" >/dev/null

NAME="hd$$"
cleanup() {
    "$ROOT/scripts/homa-cluster" down --name "$NAME" >/dev/null 2>&1 || true
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

"$ROOT/scripts/homa-cluster" up --name "$NAME" --hosts 4 --rate "${MBIT}mbit" --host-queues prio
HOMA_CLUSTER_SCRIPT="$ROOT/scripts/homa-cluster" "$BUILD/tools/homa-perf" cluster \
    --cluster "$NAME" --workload w4 --load 0.8 --hosts 4 --seconds "$SECS" \
    --json "$BUILD/cluster-w4.json" --plot "$BUILD/cluster-w4.png" "$@"
