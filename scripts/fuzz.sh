#!/usr/bin/env bash
# Builds the libFuzzer targets (clang, ASan+UBSan) in build-fuzz and runs every
# fuzz_* executable for SECONDS each, starting from a fresh corpus copied from
# fuzz/seeds/<name without fuzz_>/.  Exits non-zero if any fuzzer fails
# (crash, leak, timeout, invariant abort); reproducers land in
# build-fuzz/artifacts/<fuzzer>/.
#
# Usage: scripts/fuzz.sh [SECONDS=60] [extra libFuzzer flags...]
# Env:   HOMA_FUZZ_BUILD_DIR overrides the build directory.
set -euo pipefail

secs=${1:-60}
if [ $# -gt 0 ]; then shift; fi
case $secs in
'' | *[!0-9]*)
    echo "usage: $0 [SECONDS] [libFuzzer flags...]" >&2
    exit 2
    ;;
esac

root=$(cd "$(dirname "$0")/.." && pwd)
build=${HOMA_FUZZ_BUILD_DIR:-$root/build-fuzz}

# CMAKE_C_COMPILER=clang has the effect of CC=clang, also on an existing tree.
CC=clang cmake -S "$root" -B "$build" -G Ninja -DCMAKE_C_COMPILER=clang \
    -DHOMA_FUZZ=ON -DHOMA_SANITIZE=ON -DHOMA_BUILD_TESTS=OFF >/dev/null
cmake --build "$build" --target homa_fuzzers

fuzzers=()
for exe in "$build"/fuzz/fuzz_*; do
    if [ -f "$exe" ] && [ -x "$exe" ]; then fuzzers+=("$exe"); fi
done
if [ ${#fuzzers[@]} -eq 0 ]; then
    echo "fuzz.sh: no fuzz_* executables in $build/fuzz" >&2
    exit 1
fi

failed=()
for exe in "${fuzzers[@]}"; do
    name=$(basename "$exe")
    corpus=$build/corpus/$name
    artifacts=$build/artifacts/$name
    rm -rf "$corpus" "$artifacts"
    mkdir -p "$corpus" "$artifacts"
    seeds=$root/fuzz/seeds/${name#fuzz_}
    if [ -d "$seeds" ]; then
        cp -r "$seeds"/. "$corpus"/
    fi
    echo "== $name: ${secs}s, $(find "$corpus" -type f | wc -l) seeds"
    if "$exe" -max_total_time="$secs" -max_len=70000 -print_final_stats=1 \
        -artifact_prefix="$artifacts/" "$@" "$corpus" >"$build/$name.log" 2>&1; then
        echo "== $name: ok ($(grep -E '^(stat::number_of_executed_units|stat::average_exec_per_sec):' \
            "$build/$name.log" | tr '\n' ' '))"
    else
        echo "== $name: FAILED, log $build/$name.log, artifacts in $artifacts/" >&2
        tail -n 40 "$build/$name.log" >&2
        failed+=("$name")
    fi
done

if [ ${#failed[@]} -gt 0 ]; then
    echo "fuzz.sh: failures: ${failed[*]}" >&2
    exit 1
fi
echo "fuzz.sh: all ${#fuzzers[@]} fuzzer(s) passed"
