#!/usr/bin/env bash
# libhoma: builds the Debian packages (debian/) from a copy of this tree,
# checks them with lintian, installs them and uses them as a new user would,
# then removes them again.  Stage 'deb' of scripts/test-all.sh.
#
#   bash scripts/deb-check.sh                  build, lintian, install check
#   bash scripts/deb-check.sh --update-symbols build, then rewrite
#                                              debian/libhoma0.symbols from
#                                              the library just built (and
#                                              stop: run it again to check)
#   bash scripts/deb-check.sh --no-install     build and lintian only
#
# Needs dpkg-dev, debhelper, dh-python, lintian and the Build-Depends of
# debian/control; installing needs root (without it the install check is
# skipped, saying so).  The packages are built with DEB_BUILD_OPTIONS=nocheck
# (the tests run from the tree in the other stages).
# Environment: HOMA_DEB_JOBS  build jobs (default: nproc, at most 2).
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
UPDATE_SYMBOLS=0
INSTALL=1
for arg in "$@"; do
    case $arg in
    --update-symbols) UPDATE_SYMBOLS=1 ;;
    --no-install) INSTALL=0 ;;
    -h | --help)
        sed -n '2,16p' "${BASH_SOURCE[0]}" | sed 's/^# \{0,1\}//'
        exit 0
        ;;
    *)
        echo "deb-check: unknown argument '$arg' (see --help)" >&2
        exit 2
        ;;
    esac
done

START=$(date +%s)
note() { printf -- '-- deb-check [%3d s]: %s\n' $(($(date +%s) - START)) "$*"; }
fail() {
    printf 'deb-check: FAILED: %s\n' "$*" >&2
    exit 1
}

for tool in dpkg-buildpackage dh lintian dpkg-gensymbols; do
    command -v "$tool" >/dev/null 2>&1 || fail "$tool not found (apt-get install dpkg-dev debhelper dh-python lintian)"
done

if [[ -n ${HOMA_DEB_JOBS:-} ]]; then
    JOBS=$HOMA_DEB_JOBS
else
    JOBS=$(nproc 2>/dev/null || echo 2)
    if ((JOBS > 2)); then JOBS=2; fi
fi
PACKAGES=(libhoma0 libhoma-dev homa-tools python3-homa libnccl-net-homa)
WORK=$(mktemp -d "${TMPDIR:-/tmp}/homa-deb.XXXXXX")
INSTALLED=0

SERVER=
cleanup() {
    local rc=$?
    if [[ -n $SERVER ]]; then kill "$SERVER" 2>/dev/null || true; fi
    if [[ $INSTALLED == 1 ]]; then
        note "removing the packages again: dpkg -P ${PACKAGES[*]}"
        dpkg -P "${PACKAGES[@]}" >/dev/null || rc=1
    fi
    rm -rf "$WORK"
    exit "$rc"
}
trap cleanup EXIT

# The tree as git sees it (tracked files plus untracked, not ignored ones, so
# uncommitted work is checked too), without build directories or .git.
# dpkg-buildpackage writes its results next to the source directory.
# The version being packaged: debian/changelog's (e.g. 0.2.0-1), upstream part.
DEBVER=$(dpkg-parsechangelog -l "$ROOT/debian/changelog" -S Version)
UPVER=${DEBVER%-*}
SRC=$WORK/libhoma-$UPVER
mkdir -p "$SRC"
(cd "$ROOT" && git ls-files -z --cached --others --exclude-standard |
    tar --null -T - --ignore-failed-read -cf - 2>/dev/null) | tar -x -C "$SRC"
[[ -f $SRC/debian/control ]] || fail "no debian/control in the copy of $ROOT"

note "dpkg-buildpackage -us -uc -b in $SRC (DEB_BUILD_OPTIONS=nocheck noautodbgsym parallel=$JOBS)"
GENSYMBOLS_LEVEL=()
if [[ $UPDATE_SYMBOLS == 1 ]]; then
    # Lost or changed symbols must not stop the build that regenerates them.
    GENSYMBOLS_LEVEL=(DPKG_GENSYMBOLS_CHECK_LEVEL=0)
fi
if ! (cd "$SRC" && env ${GENSYMBOLS_LEVEL[@]+"${GENSYMBOLS_LEVEL[@]}"} \
    DEB_BUILD_OPTIONS="nocheck noautodbgsym parallel=$JOBS" dpkg-buildpackage -us -uc -b) >"$WORK/build.log" 2>&1; then
    tail -n 60 "$WORK/build.log"
    fail "dpkg-buildpackage failed (last lines above)"
fi
# dpkg-gensymbols reports symbol changes as a diff in the log; show it.
grep -A40 'dpkg-gensymbols: warning' "$WORK/build.log" | head -n 60 || true
note "built in $(($(date +%s) - START)) s:"
for deb in "$WORK"/*.deb; do echo "   ${deb##*/}"; done

if [[ $UPDATE_SYMBOLS == 1 ]]; then
    # From scratch (-I/dev/null: no old file to merge with, so no #MISSING
    # lines), every symbol at this upstream version; then the symbols the
    # old file had keep the release they came in.
    old_syms=$(grep '@Base' "$ROOT/debian/libhoma0.symbols" || true)
    (cd "$SRC" && dpkg-gensymbols -plibhoma0 -Pdebian/libhoma0 -v"$UPVER" -I/dev/null \
        -O"$ROOT/debian/libhoma0.symbols" -q -c0)
    while read -r sym ver; do
        if [[ -n $sym ]]; then
            sed -i "s/^ ${sym//./\\.} .*/ $sym $ver/" "$ROOT/debian/libhoma0.symbols"
        fi
    done <<<"$old_syms"
    sed -i '1a * Build-Depends-Package: libhoma-dev' "$ROOT/debian/libhoma0.symbols"
    note "wrote debian/libhoma0.symbols ($(grep -c '@Base' "$ROOT/debian/libhoma0.symbols") symbols);"
    note "these packages were built with the old file: run scripts/deb-check.sh again to check"
    exit 0
fi

# Lintian: errors and warnings fail, except "no-manual-page" for a program
# whose page does not exist in docs/man yet (listed, not counted).
note "lintian --fail-on none libhoma_*.changes (errors and warnings counted here)"
lintian --fail-on none "$WORK"/libhoma_*.changes >"$WORK/lintian.log" 2>&1 ||
    fail "lintian could not run: $(cat "$WORK/lintian.log")"
bad=0
while IFS= read -r line; do
    case $line in
    *'running with root privileges'*) continue ;;
    [EW]:*' no-manual-page '*)
        prog=${line##*/}
        prog=${prog%]}
        if ! compgen -G "$ROOT/docs/man/$prog.[0-9].scd" >/dev/null; then
            echo "   $line (tolerated: no docs/man/$prog.N.scd yet)"
            continue
        fi
        ;;
    esac
    echo "   $line"
    case $line in [EW]:*) bad=$((bad + 1)) ;; esac
done <"$WORK/lintian.log"
((bad == 0)) || fail "lintian: $bad errors or warnings"
note "lintian: no errors or warnings"

if [[ $INSTALL == 0 ]]; then
    note "--no-install: done in $(($(date +%s) - START)) s"
    exit 0
fi
if [[ $(id -u) -ne 0 ]]; then
    note "not root: install check skipped; done in $(($(date +%s) - START)) s"
    exit 0
fi

for p in "${PACKAGES[@]}"; do
    if dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'installed'; then
        fail "$p is already installed; remove it first (dpkg -P $p) so the check starts clean"
    fi
done
DEBS=()
for p in "${PACKAGES[@]}"; do
    DEBS+=("$WORK/${p}_${DEBVER}_$(dpkg --print-architecture).deb")
done
note "dpkg -i ${PACKAGES[*]}"
INSTALLED=1
dpkg -i "${DEBS[@]}" >"$WORK/dpkg.log" 2>&1 || {
    cat "$WORK/dpkg.log"
    fail "dpkg -i failed"
}

# As a new user: an empty home outside the tree, a plain environment.
USERDIR=$WORK/user
mkdir -p "$USERDIR"
cd "$USERDIR"
as_user() { env -i HOME="$USERDIR" PATH=/usr/bin:/bin LANG=C.UTF-8 "$@"; }

note "homa-perf, homa-sim, homa-coll-bench, homa-cluster --help from /usr/bin"
for t in homa-perf homa-sim homa-coll-bench homa-cluster; do
    [[ $(as_user sh -c "command -v $t") == /usr/bin/$t ]] || fail "$t is not /usr/bin/$t"
    as_user "$t" --help >/dev/null || fail "$t --help failed"
done
if [[ -e /usr/bin/homa-plot ]]; then
    as_user homa-plot --help >/dev/null || fail "homa-plot --help failed"
fi

note "workloads from /usr/share/libhoma (no source tree): homa-sim fluid, homa-perf client"
out=$(as_user homa-sim fluid --workload w4 --hosts 2 --measure-ms 10 --warmup-ms 0 --quiet) ||
    fail "homa-sim fluid --workload w4 failed"
grep -q 'srpt: offered' <<<"$out" || fail "homa-sim fluid printed no result: $out"
out=$(as_user homa-perf client --proto homa --server 127.0.0.1:9 --test workload \
    --workload w9 --seconds 0.1 2>&1 || true)
grep -q '/usr/share/libhoma/workloads/w9.cdf' <<<"$out" ||
    fail "homa-perf does not look in /usr/share/libhoma: $out"
PORT=$((40000 + RANDOM % 20000))
# Not through as_user: a function sent to the background is a subshell, and
# killing that left the server itself running after the check.
env -i HOME="$USERDIR" PATH=/usr/bin:/bin LANG=C.UTF-8 \
    homa-perf server --proto homa --port "$PORT" >"$WORK/server.log" 2>&1 &
SERVER=$!
sleep 0.3
out=$(as_user timeout 30 homa-perf client --proto homa --server "127.0.0.1:$PORT" --test workload \
    --workload w4 --seconds 0.3 2>&1) || {
    kill "$SERVER" 2>/dev/null || true
    fail "homa-perf client over loopback failed: $out"
}
kill "$SERVER" 2>/dev/null || true
wait "$SERVER" 2>/dev/null || true
SERVER=
grep -E '^  (rpcs|errors) ' <<<"$out" | sed 's/^/   /'

if compgen -G "$ROOT/docs/man/libhoma.3.scd" >/dev/null; then
    note "man -w libhoma"
    # Listing first, then grep: with pipefail, grep -q quitting early
    # kills dpkg-deb with SIGPIPE and reads as a missing page.
    listing=$(dpkg-deb -c "$WORK"/libhoma-dev_"$DEBVER"_*.deb)
    grep -q 'usr/share/man/man3/libhoma.3' <<<"$listing" ||
        fail "libhoma-dev has no libhoma(3) page"
    if compgen -G "/usr/share/man/man3/libhoma.3*" >/dev/null; then
        page=$(as_user man -w libhoma) || fail "man -w libhoma found no page"
        echo "   $page"
    else
        # Minimal images tell dpkg not to unpack man pages (path-exclude).
        note "libhoma.3 is in libhoma-dev but dpkg did not unpack it (path-exclude?): man -w skipped"
    fi
fi

note "the NCCL plugin exports only its ncclNetPlugin tables"
plugin=$(dpkg -L libnccl-net-homa | grep '/libnccl-net-homa\.so$') || fail "libnccl-net-homa has no plugin"
syms=$(nm -D --defined-only "$plugin" | awk '{print $3}' | sort | tr '\n' ' ')
echo "   $plugin: $syms"
[[ $syms == "ncclNetPlugin_v10 ncclNetPlugin_v11 ncclNetPlugin_v8 ncclNetPlugin_v9 " ]] ||
    fail "the plugin exports more than its tables: $syms"

note "a C program built with pkg-config against the installed headers"
cat >prog.c <<'EOF'
#include <homa/homa.h>
#include <homa/workload.h>
#include <stdio.h>
#include <string.h>
#if defined(__has_include)
#if __has_include(<homa/version.h>)
#include <homa/version.h>
#define HAVE_HOMA_VERSION 1
#endif
#endif

int main(void)
{
    homa_config cfg;
    homa_config_default(&cfg);
    if (homa_config_validate(&cfg, NULL) != 0) return 1;
    homa_workload *w = NULL;
    if (homa_workload_load("w4", NULL, "/usr/share/libhoma", &w) != 0) return 2;
    printf("libhoma from the packages: %s, mean %u B\n", homa_workload_name(w),
           (unsigned)homa_workload_mean(w, 0));
    homa_workload_free(w);
#ifdef HAVE_HOMA_VERSION
    /* the library loaded is the one the headers describe */
    if (homa_version() != HOMA_VERSION_NUMBER) return 4;
    printf("homa_version_string(): %s\n", homa_version_string());
#endif
    return strlen(homa_strerror(HOMA_ERR_INVAL)) ? 0 : 3;
}
EOF
flags=$(as_user pkg-config --cflags --libs homa) || fail "pkg-config does not know homa"
echo "   pkg-config --cflags --libs homa: $flags"
# shellcheck disable=SC2086 # flags are a word list
as_user gcc -std=c11 -Wall -Wextra -Werror prog.c -o prog $flags || fail "gcc with pkg-config failed"
as_user ./prog || fail "the pkg-config program failed"
lib=$(as_user ldd ./prog | sed -n 's/^[[:space:]]*libhoma\.so\.0 => \([^ ]*\).*/\1/p')
[[ -n $lib && $(realpath "$lib") == /usr/lib/*/libhoma.so.0.* ]] ||
    fail "prog does not use the installed libhoma.so.0 (ldd: ${lib:-none})"
echo "   runs with $lib -> $(realpath "$lib")"
libdir=$(as_user pkg-config --variable=libdir homa)
as_user gcc -std=c11 prog.c -o prog-static "$libdir/libhoma.a" -pthread -lm || fail "static link failed"
as_user ./prog-static >/dev/null || fail "the statically linked program failed"
echo "   static libhoma.a: ok"

note "/usr/bin/python3: import homa, an RPC over loopback, import homa.torch"
as_user /usr/bin/python3 - <<'EOF' || fail "python3-homa does not work"
import homa
assert homa.__file__.startswith("/usr/lib/python3/dist-packages/homa/"), homa.__file__
with homa.Socket(bind="127.0.0.1") as srv, homa.Socket() as cli:
    rpc = cli.send(srv.endpoint, b"ping")
    with srv.recv() as req:
        srv.reply(req, bytes(req).upper())
    assert bytes(cli.recv(id=rpc)) == b"PING"
print("   homa from", homa.__file__, ": RPC ping -> PING")
try:
    import torch  # noqa: F401
except ImportError:
    print("   python3-torch not installed: homa.torch not checked")
else:
    import homa.torch
    print("   homa.torch imported")
EOF

cd "$WORK"
note "dpkg -P ${PACKAGES[*]}"
dpkg -P "${PACKAGES[@]}" >/dev/null || fail "dpkg -P failed"
INSTALLED=0
for p in "${PACKAGES[@]}"; do
    if dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'installed'; then
        fail "$p is still installed"
    fi
done
for f in /usr/bin/homa-perf /usr/share/libhoma /usr/include/homa /usr/lib/python3/dist-packages/homa; do
    [[ ! -e $f ]] || fail "$f is left after dpkg -P"
done
note "packages removed; all checks passed in $(($(date +%s) - START)) s"
