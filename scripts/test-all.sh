#!/usr/bin/env bash
# libhoma: the project's test command (what CI runs through .ci/run).
#
#   bash scripts/test-all.sh
#
# Stages (each one's failure fails the script):
#   setup       the Debian packages of scripts/setup.sh --test: when one is
#               missing, as root on Debian, they are installed first (saying
#               what and why); otherwise the command to run is printed and
#               the script stops.  HOMA_SETUP=check never installs,
#               HOMA_SETUP=off skips the check.
#   a. build    gcc, -DHOMA_WERROR=ON, into build/; ctest; cmake --install into
#               a temporary prefix and build a small program with pkg-config;
#               scripts/abi-check.sh (libhoma.so against abi/libhoma.so.0.abi)
#   b. asan     ASan+UBSan build (-DHOMA_SANITIZE=ON) into build-asan/; ctest
#   c. fuzz     bash scripts/fuzz.sh 60   (only if scripts/fuzz.sh exists): every
#               fuzz/fuzz_* target, fuzz_homad (homad's shared-memory checks) included
#   d. tsan     ThreadSanitizer build (-DHOMA_TSAN=ON) into build-tsan/;
#               ctest -L runtime (skipped while no test carries that label)
# Between a and b: stage deb, Debian packages: bash scripts/deb-check.sh
#               (build, lintian, dpkg -i, use as a new user, dpkg -P);
#               skipped without dpkg-buildpackage
#   fresh       bash scripts/fresh-check.sh --demo-only: the README's demo
#               command in a minimal Debian 12 root (debootstrap + chroot, a
#               clean clone of HEAD; about 7 minutes); CI's own fresh machine
#               checks the test command.  Only with HOMA_TEST_FRESH=1 (.ci/run
#               sets it; HOMA_TEST_FRESH=quick: both commands, fresh-check.sh
#               --quick, about 18 minutes) and as root
#
# Environment:
#   HOMA_TEST_QUICK=1   run stage a only (quick developer check)
#   HOMA_FUZZ_SECONDS   seconds per fuzzer in stage c (default 60)
#   HOMA_TEST_JOBS      parallel ctest jobs (default 2)
#   HOMA_TEST_FRESH     1 or quick: run stage fresh (root, the Debian archive)
#   HOMA_SETUP          auto (default), check or off: stage setup (above)
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$ROOT"

QUICK=${HOMA_TEST_QUICK:-0}
FRESH=${HOMA_TEST_FRESH:-0}
FUZZ_SECONDS=${HOMA_FUZZ_SECONDS:-60}
CTEST_JOBS=${HOMA_TEST_JOBS:-2}
BUILD_JOBS=$(nproc 2>/dev/null || echo 2)

STAGE_NAMES=()
STAGE_RESULTS=()
STAGE_SECONDS=()
CURRENT_STAGE=""
CURRENT_START=0
SCRIPT_START=$(date +%s)
TMP_DIRS=()

now() { date +%s; }

banner() {
    printf '\n==============================================================\n'
    printf '== %s\n' "$*"
    printf '==============================================================\n'
}

note() { printf -- '-- %s\n' "$*"; }

stage_begin() {
    CURRENT_STAGE=$1
    CURRENT_START=$(now)
    banner "stage $1"
}

stage_end() { # result
    STAGE_NAMES+=("$CURRENT_STAGE")
    STAGE_RESULTS+=("$1")
    STAGE_SECONDS+=($(($(now) - CURRENT_START)))
    CURRENT_STAGE=""
}

on_exit() {
    local rc=$?
    if [[ -n $CURRENT_STAGE ]]; then
        stage_end "FAILED (exit $rc)"
    fi
    local d
    for d in ${TMP_DIRS[@]+"${TMP_DIRS[@]}"}; do
        rm -rf "$d"
    done
    banner "summary"
    local i
    for i in "${!STAGE_NAMES[@]}"; do
        printf '  %-8s %6ss  %s\n' "${STAGE_NAMES[$i]}" "${STAGE_SECONDS[$i]}" "${STAGE_RESULTS[$i]}"
    done
    printf '  %-8s %6ss\n' "total" $(($(now) - SCRIPT_START))
    if [[ $rc -eq 0 ]]; then
        printf '\nALL STAGES PASSED\n'
    else
        printf '\nTEST RUN FAILED (exit %d)\n' "$rc"
    fi
    exit "$rc"
}
trap on_exit EXIT

# configure DIR [cmake args...]: gcc, Ninja if available (an existing build
# directory keeps its generator).  Every HOMA_* option is set explicitly so a
# reused build directory cannot keep a stale setting.
configure() {
    local dir=$1
    shift
    local gen=()
    if [[ ! -f $dir/CMakeCache.txt ]] && command -v ninja >/dev/null 2>&1; then
        gen=(-G Ninja)
    fi
    cmake -S "$ROOT" -B "$dir" ${gen[@]+"${gen[@]}"} -DCMAKE_C_COMPILER=gcc \
        -DHOMA_BUILD_TESTS=ON -DHOMA_FUZZ=OFF "$@"
}

build() {
    cmake --build "$1" --parallel "$BUILD_JOBS"
}

# run_ctest DIR [ctest args...]: runs ctest (through the command prefix in
# CTEST_WRAP, e.g. env settings) and keeps a log.
CTEST_WRAP=()
run_ctest() {
    local dir=$1
    shift
    if [[ ${#CTEST_WRAP[@]} -gt 0 ]]; then
        note "running: ${CTEST_WRAP[*]} ctest ..."
    fi
    ${CTEST_WRAP[@]+"${CTEST_WRAP[@]}"} ctest --test-dir "$dir" --output-on-failure \
        -j"$CTEST_JOBS" "$@" 2>&1 | tee "$dir/ctest.log"
}

ctest_summary() {
    grep -E 'tests passed|tests failed' "$1/ctest.log" | tail -n 1 || true
}

# Sanitizer runtimes (TSan in particular) can fail on kernels with high mmap
# randomisation; run the tests without ASLR when the system allows it.
NOASLR=()
if command -v setarch >/dev/null 2>&1 && setarch "$(uname -m)" -R true >/dev/null 2>&1; then
    NOASLR=(setarch "$(uname -m)" -R)
fi

install_check() {
    local prefix
    prefix=$(mktemp -d "${TMPDIR:-/tmp}/homa-install.XXXXXX")
    TMP_DIRS+=("$prefix")
    note "cmake --install build --prefix $prefix"
    cmake --install build --prefix "$prefix"

    local pcdir
    pcdir=$(dirname "$(find "$prefix" -name homa.pc -print -quit)")
    if [[ ! -f $pcdir/homa.pc ]]; then
        echo "install check: homa.pc was not installed" >&2
        return 1
    fi
    local prog=$prefix/install-check.c
    {
        echo '/* Generated by scripts/test-all.sh: uses the installed libhoma. */'
        local h
        for h in "$prefix"/include/homa/*.h; do
            echo "#include <homa/$(basename "$h")>"
        done
        cat <<'EOF'
#include <stdio.h>
#include <string.h>

int main(void)
{
    homa_config cfg;
    homa_config_default(&cfg);
    if (homa_config_validate(&cfg, NULL) != 0) return 1;
    homa_workload *w = NULL;
    if (homa_workload_load_file("/nonexistent/none.cdf", &w) != HOMA_ERR_NOT_FOUND) return 1;
    const char *msg = homa_strerror(HOMA_ERR_INVAL);
    if (!msg || !strlen(msg)) return 1;
    if (homa_version() != HOMA_VERSION_NUMBER) return 1;
    printf("installed libhoma %s works: %s\n", homa_version_string(), msg);
    return 0;
}
EOF
    } >"$prog"
    local flags
    flags=$(PKG_CONFIG_PATH=$pcdir pkg-config --cflags --libs homa)
    note "pkg-config --cflags --libs homa: $flags"
    # shellcheck disable=SC2086 # flags are a word list
    gcc -std=c11 -Wall -Wextra -Werror "$prog" -o "$prefix/install-check" $flags
    local libdir
    libdir=$(PKG_CONFIG_PATH=$pcdir pkg-config --variable=libdir homa)
    LD_LIBRARY_PATH=$libdir${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH} "$prefix/install-check"
}

stage_setup() {
    stage_begin setup
    if [[ ${HOMA_SETUP:-auto} == off ]]; then
        note "HOMA_SETUP=off: packages not checked"
        stage_end "skipped (HOMA_SETUP=off)"
        return 0
    fi
    bash scripts/setup.sh --ensure --test --for scripts/test-all.sh
    stage_end "ok: the packages of scripts/setup.sh --test are installed"
}

stage_build() {
    stage_begin build
    configure build -DHOMA_WERROR=ON -DHOMA_SANITIZE=OFF -DHOMA_TSAN=OFF
    build build
    run_ctest build --no-tests=error
    banner "stage build: install check"
    install_check
    banner "stage build: ABI check"
    bash scripts/abi-check.sh --build build
    stage_end "ok: $(ctest_summary build); install check passed; ABI check passed"
}

stage_deb() {
    stage_begin deb
    if ! command -v dpkg-buildpackage >/dev/null 2>&1; then
        note "dpkg-buildpackage not found (not Debian?): skipped"
        stage_end "skipped (no dpkg-buildpackage)"
        return 0
    fi
    bash scripts/deb-check.sh
    stage_end "ok: packages built, lintian clean, installed, checked, removed"
}

stage_asan() {
    stage_begin asan
    configure build-asan -DHOMA_WERROR=OFF -DHOMA_SANITIZE=ON -DHOMA_TSAN=OFF
    build build-asan
    CTEST_WRAP=(env ASAN_OPTIONS=detect_leaks=1 UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1
        ${NOASLR[@]+"${NOASLR[@]}"})
    run_ctest build-asan --no-tests=error
    CTEST_WRAP=()
    stage_end "ok: $(ctest_summary build-asan)"
}

stage_fuzz() {
    stage_begin fuzz
    if [[ ! -f scripts/fuzz.sh ]]; then
        note "scripts/fuzz.sh does not exist yet: skipped"
        stage_end "skipped (no scripts/fuzz.sh)"
        return 0
    fi
    bash scripts/fuzz.sh "$FUZZ_SECONDS"
    stage_end "ok: ${FUZZ_SECONDS}s per fuzzer"
}

stage_tsan() {
    stage_begin tsan
    configure build-tsan -DHOMA_WERROR=OFF -DHOMA_SANITIZE=OFF -DHOMA_TSAN=ON
    local listing
    listing=$(ctest --test-dir build-tsan -N -L runtime)
    if grep -q 'Total Tests: 0' <<<"$listing"; then
        note "no ctest test carries the label 'runtime' yet: skipped"
        stage_end "skipped (no 'runtime' tests)"
        return 0
    fi
    build build-tsan
    CTEST_WRAP=(env TSAN_OPTIONS=halt_on_error=1:second_deadlock_stack=1 ${NOASLR[@]+"${NOASLR[@]}"})
    run_ctest build-tsan --no-tests=error -L runtime
    CTEST_WRAP=()
    stage_end "ok: $(ctest_summary build-tsan)"
}

stage_fresh() {
    stage_begin fresh
    local opt
    case $FRESH in
    1) opt=--demo-only ;;
    quick) opt=--quick ;;
    *)
        note "HOMA_TEST_FRESH is not 1 or quick: skipped (.ci/run sets it)"
        stage_end "skipped (HOMA_TEST_FRESH unset)"
        return 0
        ;;
    esac
    if [[ $(id -u) -ne 0 ]]; then
        note "not root (debootstrap and chroot need it): skipped"
        stage_end "skipped (not root)"
        return 0
    fi
    bash scripts/fresh-check.sh "$opt"
    stage_end "ok: the README's commands pass in a fresh Debian 12 root ($opt)"
}

banner "libhoma test-all ($(date -u '+%Y-%m-%d %H:%M:%S UTC'), $(uname -srm))"
stage_setup
stage_build
if [[ $QUICK == 1 ]]; then
    note "HOMA_TEST_QUICK=1: deb, sanitizer, fuzz, tsan and fresh stages skipped"
    for s in deb asan fuzz tsan fresh; do
        STAGE_NAMES+=("$s")
        STAGE_RESULTS+=("skipped (HOMA_TEST_QUICK=1)")
        STAGE_SECONDS+=(0)
    done
    exit 0
fi
stage_deb
stage_asan
stage_fuzz
stage_tsan
stage_fresh
