#!/usr/bin/env bash
# libhoma ABI check: compares libhoma.so with the baseline of the current
# release, abi/libhoma.so.0.abi, using libabigail (abidw, abidiff).
#
#   bash scripts/abi-check.sh                 build build/ (target homa) and check it
#   bash scripts/abi-check.sh --update        ... and rewrite the baseline from it
#   bash scripts/abi-check.sh --build DIR     use (and build) another build directory
#   bash scripts/abi-check.sh --lib PATH      check this libhoma.so, build nothing
#
# Verdicts (exit status):
#   0  no ABI change, or only added functions/variables (backward compatible:
#      bump the minor version, then --update the baseline)
#   1  an incompatible change: a removed or changed function or variable, a
#      changed public type (e.g. a struct that grew: applications allocate
#      homa_config and friends themselves), a SONAME change
#   2  usage or tool error (libabigail missing, library without debug info)
#   77 (with --skip-missing) libabigail or debug info missing: skipped
#
# Both sides go through the same abidw pipeline: only the types of the
# public headers (include/homa/) are kept, and the source-tree prefix is cut
# from file paths, so the result does not depend on where the tree is built.
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
BASELINE=$ROOT/abi/libhoma.so.0.abi
BUILD=$ROOT/build
LIB=""
UPDATE=0
SKIP_MISSING=0

usage() {
    sed -n '2,/^set -euo/p' "${BASH_SOURCE[0]}" | sed '$d; s/^# \{0,1\}//'
}

while [[ $# -gt 0 ]]; do
    case $1 in
    --update) UPDATE=1 ;;
    --build)
        BUILD=$(cd "${2:?--build needs a directory}" 2>/dev/null && pwd || echo "$2")
        shift
        ;;
    --lib)
        LIB=${2:?--lib needs a path}
        shift
        ;;
    --baseline)
        BASELINE=${2:?--baseline needs a path}
        shift
        ;;
    --skip-missing) SKIP_MISSING=1 ;;
    -h | --help)
        usage
        exit 0
        ;;
    *)
        echo "abi-check: unknown argument '$1' (see --help)" >&2
        exit 2
        ;;
    esac
    shift
done

missing() { # message: a prerequisite is missing
    if [[ $SKIP_MISSING == 1 ]]; then
        echo "abi-check: SKIPPED: $1"
        exit 77
    fi
    echo "abi-check: $1" >&2
    exit 2
}

for tool in abidw abidiff readelf; do
    command -v $tool >/dev/null 2>&1 ||
        missing "$tool not found (Debian: apt-get install abigail-tools binutils)"
done

if [[ -z $LIB ]]; then
    if [[ ! -f $BUILD/CMakeCache.txt ]]; then
        # Only the library is needed; debug info is what abidw reads.
        gen=()
        command -v ninja >/dev/null 2>&1 && gen=(-G Ninja)
        cmake -S "$ROOT" -B "$BUILD" ${gen[@]+"${gen[@]}"} -DCMAKE_BUILD_TYPE=RelWithDebInfo \
            -DHOMA_BUILD_TESTS=OFF -DHOMA_PYTHON=OFF >/dev/null
    fi
    cmake --build "$BUILD" --target homa >/dev/null
    LIB=$BUILD/src/libhoma.so
fi
if [[ ! -f $LIB ]]; then
    echo "abi-check: $LIB does not exist" >&2
    exit 2
fi
LIB=$(readlink -f "$LIB")
# (No grep -q: with pipefail, readelf's SIGPIPE would read as "no debug info".)
if ! readelf -S "$LIB" 2>/dev/null | grep '\.debug_info' >/dev/null; then
    missing "$LIB has no debug info (build with -DCMAKE_BUILD_TYPE=RelWithDebInfo or Debug)"
fi

TMP=$(mktemp -d "${TMPDIR:-/tmp}/homa-abi.XXXXXX")
trap 'rm -rf "$TMP"' EXIT

# The library's public ABI as abixml.  abidiff runs from $ROOT below, so the
# relative header paths left after the sed match --headers-dir include/homa.
abidw --no-corpus-path --no-comp-dir-path --headers-dir "$ROOT/include/homa" \
    --drop-private-types "$LIB" >"$TMP/raw.abi"
sed "s|='$ROOT/|='|g" "$TMP/raw.abi" >"$TMP/current.abi"
nsyms=$(grep -c "<elf-symbol .*is-defined='yes'" "$TMP/current.abi" || true)
soname=$(sed -n "s/.*<abi-corpus [^>]*soname='\([^']*\)'.*/\1/p" "$TMP/current.abi" | head -n 1)

if [[ $UPDATE == 1 ]]; then
    mkdir -p "$(dirname "$BASELINE")"
    cp "$TMP/current.abi" "$BASELINE"
    echo "abi-check: baseline ${BASELINE#"$ROOT"/} rewritten from $LIB ($soname, $nsyms symbols)"
    exit 0
fi
if [[ ! -f $BASELINE ]]; then
    echo "abi-check: no baseline $BASELINE; create it with: bash scripts/abi-check.sh --update" >&2
    exit 2
fi

cd "$ROOT"
diff_args=(--headers-dir1 include/homa --headers-dir2 include/homa "$BASELINE" "$TMP/current.abi")
echo "abi-check: $LIB ($soname, $nsyms exported symbols) against ${BASELINE#"$ROOT"/}"
set +e
abidiff "${diff_args[@]}" >"$TMP/report" 2>&1
rc=$?
# The same comparison without added symbols tells additions (compatible)
# from everything else.
abidiff --no-added-syms "${diff_args[@]}" >/dev/null 2>&1
rc_noadd=$?
set -e
sed 's/^/  | /' "$TMP/report"

# abidiff's status is a bit mask: 1 error, 2 usage error, 4 ABI change,
# 8 incompatible ABI change.
if ((rc & 3)); then
    echo "abi-check: ERROR: abidiff failed (status $rc)" >&2
    exit 2
fi
if ((rc == 0)); then
    echo "abi-check: OK: no ABI change"
    exit 0
fi
if ((rc_noadd == 0)); then
    echo "abi-check: OK: compatible additions only. Bump HOMA_VERSION_MINOR/project(VERSION)"
    echo "           and record them: bash scripts/abi-check.sh --update"
    exit 0
fi
echo "abi-check: FAIL: incompatible ABI change (abidiff status $rc). Restore the old"
echo "           interface, or (a deliberate break) bump the SONAME and the major version"
echo "           and run bash scripts/abi-check.sh --update (docs/api.md, ABI and versioning)"
exit 1
