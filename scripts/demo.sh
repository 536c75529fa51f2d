#!/usr/bin/env bash
# libhoma demo: builds homa-demo (needs only a C compiler and cmake) and runs
# the real Homa engine on a 16-host virtual network: per-size latency and
# slowdown with 8 vs 1 priority levels, recovery under 1 % loss, and a short
# message overtaking a 10 MB transfer.  Extra arguments go to homa-demo
# (see `homa-demo --help`), e.g. `bash scripts/demo.sh --workload w5 --load 0.8`.
# A missing compiler or cmake is installed first as root on Debian
# (scripts/setup.sh --demo); otherwise it prints the command to run.
set -euo pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
bash "$ROOT/scripts/setup.sh" --ensure --demo --for "${HOMA_DEMO_CALLER:-scripts/demo.sh}" || exit 1
BUILD=${HOMA_DEMO_BUILD_DIR:-$ROOT/build-demo}
GEN=()
if command -v ninja >/dev/null 2>&1; then GEN=(-G Ninja); fi
cmake -S "$ROOT" -B "$BUILD" "${GEN[@]}" -DCMAKE_BUILD_TYPE=Release -DHOMA_BUILD_TESTS=OFF \
    -DHOMA_CORE_ONLY=ON >/dev/null
cmake --build "$BUILD" --target homa-demo -j "$(nproc 2>/dev/null || echo 2)" >/dev/null
exec "$BUILD/sim/homa-demo" "$@"
