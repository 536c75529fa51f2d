#!/usr/bin/env bash
# fresh-check: do the README's two commands work on a fresh Debian 12 machine?
#
#   sudo bash scripts/fresh-check.sh [--quick] [options]
#
# Makes a minimal Debian 12 (bookworm) root with debootstrap (variant
# minbase, plus git: "the base system and git"), from the Debian mirror this
# machine's apt uses, makes a clean `git clone` of this checkout's HEAD in it
# (through a git bundle: committed work only), and runs there, as root in a
# chroot, exactly the commands of the README's "Two commands" block, in
# order (the demo, then the tests).  Each command, its exit status and its
# duration are printed, then a PASS or FAIL line; the exit status is 0 only
# if every command exited 0.
#
# The root is made in a temporary directory; a tarball of the debootstrap
# result is cached (CACHE/bookworm-*.tar.gz) so that a second run skips
# debootstrap, and so are the downloaded .deb files (CACHE/debs; apt still
# checks them against the archive's index), unless --no-deb-cache.
#
# The chroot runs in its own mount and PID namespaces (unshare): /proc,
# /sys, /dev (a private /dev/shm) and a tmpfs /run (where `ip netns` keeps its
# namespaces) are mounted there only, and when the run ends, fails or is
# interrupted (Ctrl-C), every process in it is killed and every mount, and
# so every network namespace (with its veth links and qdiscs) that the demo
# or the tests made, goes with the namespace.  Then the directory is removed
# (never while something is still mounted in it).  The network namespaces
# share this machine's kernel, as the demo's do when it runs here.
#
# Options:
#   --quick         run the test command with HOMA_TEST_QUICK=1 (its build
#                   stage: gcc -Werror build, ctest, install and ABI checks)
#                   instead of the full suite (about 25 minutes)
#   --demo-only     run only the demo command (scripts/cluster-demo.sh): what
#                   CI adds (stage fresh of scripts/test-all.sh), as CI itself
#                   runs the test command on a fresh machine
#   --refresh       make the cached root again (debootstrap)
#   --no-deb-cache  download every package again
#   --keep          keep the root (unmounted) and say where it is
#   --mirror URL    the Debian mirror (default: that of /etc/apt/sources.list*)
#   --variant V     debootstrap variant: minbase (default) or standard ("")
#
# Environment: HOMA_FRESH_CACHE (default /var/cache/homa-fresh), TMPDIR
# (where the root is made, default /var/tmp; the full run needs about 6 GB);
# HOMA_DEMO_SECONDS, HOMA_TEST_JOBS and HOMA_FUZZ_SECONDS are passed into the
# chroot when set.  Needs root, debootstrap (installed with apt-get when
# missing), unshare and chroot (util-linux, coreutils) and access to the
# Debian archive.  Logs: CACHE/logs/<time>/.

# shellcheck disable=SC2317 # cleanup() and summary() run from the EXIT trap
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
PROG=fresh-check
SUITE=bookworm

QUICK=0
DEMO_ONLY=0
REFRESH=0
DEB_CACHE=1
KEEP=0
MIRROR=${HOMA_FRESH_MIRROR:-}
VARIANT=minbase
CACHE=${HOMA_FRESH_CACHE:-/var/cache/homa-fresh}

usage() {
    sed -n '2,/^$/p' "${BASH_SOURCE[0]}" | sed -e '/^$/d' -e 's/^# \{0,1\}//'
}

die() {
    echo "$PROG: $*" >&2
    exit 1
}

while [[ $# -gt 0 ]]; do
    case $1 in
    --quick) QUICK=1 ;;
    --demo-only) DEMO_ONLY=1 ;;
    --refresh) REFRESH=1 ;;
    --no-deb-cache) DEB_CACHE=0 ;;
    --keep) KEEP=1 ;;
    --mirror)
        [[ $# -ge 2 ]] || die "--mirror needs a URL"
        MIRROR=$2
        shift
        ;;
    --variant)
        [[ $# -ge 2 ]] || die "--variant needs a value"
        VARIANT=$2
        shift
        ;;
    -h | --help)
        usage
        exit 0
        ;;
    *)
        echo "$PROG: unknown argument '$1'" >&2
        usage >&2
        exit 2
        ;;
    esac
    shift
done

[[ $(id -u) -eq 0 ]] || die "needs root (debootstrap, mounts, chroot): sudo bash scripts/fresh-check.sh"
for c in unshare chroot mount umount flock tar gzip git; do
    command -v "$c" >/dev/null 2>&1 || die "'$c' not found"
done

# ---- phases: name, seconds, result ------------------------------------------
PH_NAMES=()
PH_SECS=()
PH_RESULTS=()
PH_START=0
START=$SECONDS
phase_begin() {
    PH_START=$SECONDS
    printf '\n=== %s: %s\n' "$PROG" "$1"
}
phase_end() { # name result
    PH_NAMES+=("$1")
    PH_SECS+=($((SECONDS - PH_START)))
    PH_RESULTS+=("$2")
}

# ---- the host's Debian sources ----------------------------------------------
# "URI SUITE COMPONENTS..." for every enabled deb entry of a bookworm suite in
# /etc/apt/sources.list, sources.list.d/*.list and sources.list.d/*.sources.
host_sources() {
    local f
    for f in /etc/apt/sources.list /etc/apt/sources.list.d/*.list; do
        [[ -r $f ]] || continue
        awk -v suite="$SUITE" '
            $1 == "deb" {
                i = 2
                if ($i ~ /^\[/) { while (i <= NF && $i !~ /\]$/) i++; i++ }
                s = $(i + 1); c = ""
                for (j = i + 2; j <= NF && $j !~ /^#/; j++) c = c " " $j
                if (s ~ ("^" suite "(-[a-z]+)?$")) print $i, s c
            }' "$f"
    done
    for f in /etc/apt/sources.list.d/*.sources; do
        [[ -r $f ]] || continue
        awk -v suite="$SUITE" '
            function flush(   n, m, a, b, U, S) {
                if (types ~ /(^| )deb( |$)/ && tolower(enabled) != "no") {
                    n = split(uris, U, " "); m = split(suites, S, " ")
                    for (a = 1; a <= n; a++)
                        for (b = 1; b <= m; b++)
                            if (S[b] ~ ("^" suite "(-[a-z]+)?$")) print U[a], S[b], comps
                }
                types = uris = suites = comps = enabled = ""
            }
            function value(   v) { v = $0; sub(/^[^:]*:[ \t]*/, "", v); return v }
            /^[ \t]*$/ { flush(); next }
            /^#/ { next }
            tolower($1) == "types:" { types = value() }
            tolower($1) == "uris:" { uris = value() }
            tolower($1) == "suites:" { suites = value() }
            tolower($1) == "components:" { comps = value() }
            tolower($1) == "enabled:" { enabled = value() }
            END { flush() }' "$f"
    done
}

SOURCES=$(host_sources | awk '!seen[$0]++')
if [[ -z $MIRROR ]]; then
    MIRROR=$(awk -v suite="$SUITE" '$2 == suite { print $1; exit }' <<<"$SOURCES")
fi
if [[ -z $MIRROR ]]; then
    MIRROR=http://deb.debian.org/debian
fi
if ! grep -q . <<<"$SOURCES"; then
    SOURCES="$MIRROR $SUITE main
$MIRROR $SUITE-updates main
http://deb.debian.org/debian-security $SUITE-security main"
fi

# ---- the README's commands ---------------------------------------------------
# The lines of the first code block under "## Two commands" (comments
# dropped), from HEAD: what the clone will have.
readme_commands() {
    git -C "$ROOT" show HEAD:README.md | awk '
        /^## Two commands/ { sec = 1; next }
        sec && /^## / { exit }
        sec && /^```/ { if (blk) exit; blk = 1; next }
        sec && blk { print }' |
        sed -E -e 's/[[:space:]]+#.*$//' -e 's/^[[:space:]]+//' | grep -v '^$' || true
}
mapfile -t COMMANDS < <(readme_commands)
[[ ${#COMMANDS[@]} -gt 0 ]] || die "no commands found in the README's \"Two commands\" block"
if [[ $DEMO_ONLY == 1 ]]; then
    mapfile -t COMMANDS < <(printf '%s\n' "${COMMANDS[@]}" | grep 'scripts/cluster-demo\.sh' || true)
    [[ ${#COMMANDS[@]} -gt 0 ]] || die "--demo-only: no scripts/cluster-demo.sh command in the README"
fi
if [[ $QUICK == 1 ]]; then
    for i in "${!COMMANDS[@]}"; do
        if [[ ${COMMANDS[$i]} == *scripts/test-all.sh* ]]; then
            COMMANDS[i]="HOMA_TEST_QUICK=1 ${COMMANDS[$i]}"
        fi
    done
fi

REV=$(git -C "$ROOT" rev-parse HEAD)
echo "$PROG: the README's commands on a fresh Debian 12 ($SUITE, $VARIANT + git), commit" \
    "${REV:0:12}$([[ $QUICK == 1 ]] && echo ", --quick")$([[ $DEMO_ONLY == 1 ]] && echo ", --demo-only")"
echo "$PROG: mirror $MIRROR; apt sources in the root:"
awk '{ print "    deb", $0 }' <<<"$SOURCES"
echo "$PROG: commands:"
printf '    %s\n' "${COMMANDS[@]}"
if [[ -n $(git -C "$ROOT" status --porcelain --untracked-files=no) ]]; then
    echo "$PROG: note: the checkout has uncommitted changes; the clone has HEAD only"
fi

# ---- work directory and cleanup ----------------------------------------------
mkdir -p "$CACHE" "$CACHE/logs"
LOGS=$CACHE/logs/$(date +%Y%m%d-%H%M%S)-$$
mkdir -p "$LOGS"
WORK=$(mktemp -d "${TMPDIR:-/var/tmp}/homa-fresh.XXXXXX")
R=$WORK/root
NS_PID=""
RUN_START=""
CLEANED=0

# Mount points at or under $WORK, deepest first.
mounts_under_work() {
    awk -v w="$WORK" '{ p = $5; gsub(/\\040/, " ", p); if (p == w || index(p, w "/") == 1) print p }' \
        /proc/self/mountinfo | awk '{ print length($0), $0 }' | sort -rn | cut -d' ' -f2-
}

# Processes whose root is the chroot (started by this run).
chroot_pids() {
    local p r
    for p in /proc/[0-9]*; do
        r=$(readlink "$p/root" 2>/dev/null) || continue
        if [[ $r == "$R" || $r == "$R"/* ]]; then echo "${p#/proc/}"; fi
    done
}

cleanup() {
    local rc=$? m pids
    [[ $CLEANED == 0 ]] || return 0
    CLEANED=1
    trap - INT TERM
    if [[ -n $RUN_START ]]; then
        PH_NAMES+=("the commands in the root")
        PH_SECS+=($((SECONDS - RUN_START)))
        PH_RESULTS+=("INTERRUPTED (exit status $rc; see $LOGS)")
    fi
    local t0=$SECONDS
    if [[ -n $NS_PID ]] && kill -0 "$NS_PID" 2>/dev/null; then
        # unshare --fork ignores SIGINT and SIGTERM; SIGKILL ends it, and
        # --kill-child then kills its child, PID 1 of the namespace, and with
        # it the kernel kills every process in the namespace
        echo "$PROG: ending the run in the root" >&2
        kill -KILL "$NS_PID" 2>/dev/null || true
        wait "$NS_PID" 2>/dev/null || true
    fi
    local i
    for i in 1 2 3 4 5 6 7 8 9 10; do
        pids=$(chroot_pids)
        [[ -n $pids ]] || break
        [[ $i -gt 1 ]] || echo "$PROG: ending processes left in the root: $(tr '\n' ' ' <<<"$pids")" >&2
        # shellcheck disable=SC2086 # one word per PID
        kill -KILL $pids 2>/dev/null || true
        sleep 1
    done
    for m in $(mounts_under_work); do
        umount "$m" 2>/dev/null || umount -l "$m" 2>/dev/null || true
    done
    if [[ -d $R/root/fresh ]]; then
        cp "$R/root/fresh/"*.log "$R/root/fresh/results" "$R/root/fresh/commands" "$LOGS/" \
            2>/dev/null || true
    fi
    if [[ -n $(mounts_under_work) ]]; then
        echo "$PROG: NOT removing $WORK: still mounted there: $(mounts_under_work | tr '\n' ' ')" >&2
        rc=1
    elif [[ $KEEP == 1 ]]; then
        echo "$PROG: --keep: the root is in $R (nothing mounted; rm -rf $WORK when done)"
    else
        rm -rf --one-file-system "$WORK"
    fi
    PH_NAMES+=("cleanup")
    PH_SECS+=($((SECONDS - t0)))
    PH_RESULTS+=("$([[ -e $WORK && $KEEP == 0 ]] && echo "FAILED: $WORK left" || echo ok)")
    summary "$rc"
}

summary() { # rc
    local rc=$1 i
    printf '\n=== %s: summary (logs: %s)\n' "$PROG" "$LOGS"
    for i in "${!PH_NAMES[@]}"; do
        printf '  %5ss  %-52s %s\n' "${PH_SECS[$i]}" "${PH_NAMES[$i]}" "${PH_RESULTS[$i]}"
    done
    printf '  %5ss  %s\n' $((SECONDS - START)) "total"
    if [[ $rc -eq 0 ]]; then
        local what="full tests"
        [[ $QUICK == 0 ]] || what="tests: HOMA_TEST_QUICK=1"
        [[ $DEMO_ONLY == 0 ]] || what="the demo only"
        echo "PASS: the README's commands work on a fresh Debian 12 root ($what)"
    else
        echo "FAIL: the README's commands on a fresh Debian 12 root (exit status $rc)"
    fi
    exit "$rc"
}
trap cleanup EXIT
trap 'echo "$PROG: interrupted" >&2; exit 130' INT
trap 'exit 143' TERM

# ---- 1. debootstrap ---------------------------------------------------------
phase_begin "debootstrap"
if ! command -v debootstrap >/dev/null 2>&1; then
    echo "$PROG: installing debootstrap"
    DEBIAN_FRONTEND=noninteractive apt-get -q -o DPkg::Lock::Timeout=300 install -y \
        --no-install-recommends debootstrap </dev/null ||
        {
            apt-get -q update </dev/null &&
                DEBIAN_FRONTEND=noninteractive apt-get -q -o DPkg::Lock::Timeout=300 install -y \
                    --no-install-recommends debootstrap </dev/null
        }
fi
key=$(printf '%s %s %s git' "$SUITE" "$VARIANT" "$MIRROR" | md5sum | cut -c1-8)
TARBALL=$CACHE/$SUITE-${VARIANT:-standard}-git-$key.tar.gz
mkdir -p "$R"
if [[ -s $TARBALL && $REFRESH == 0 ]]; then
    echo "$PROG: the cached root: $TARBALL ($(du -h "$TARBALL" | cut -f1), made $(date -r "$TARBALL" '+%Y-%m-%d %H:%M'))"
    tar -xzf "$TARBALL" -C "$R" --numeric-owner --xattrs --xattrs-include='*'
    phase_end "root from the cache" "ok"
else
    echo "$PROG: debootstrap --variant=$VARIANT --include=git $SUITE $R $MIRROR"
    variant=()
    [[ -z $VARIANT || $VARIANT == standard ]] || variant=(--variant="$VARIANT")
    if ! debootstrap ${variant[@]+"${variant[@]}"} --include=git "$SUITE" "$R" "$MIRROR" \
        >"$LOGS/debootstrap.log" 2>&1; then
        tail -n 30 "$LOGS/debootstrap.log" >&2
        phase_end "debootstrap" "FAILED (see $LOGS/debootstrap.log)"
        exit 1
    fi
    rm -f "$R"/var/cache/apt/archives/*.deb
    echo "$PROG: caching the root: $TARBALL"
    tar -czf "$TARBALL.tmp.$$" -C "$R" --numeric-owner --xattrs --xattrs-include='*' . &&
        mv "$TARBALL.tmp.$$" "$TARBALL"
    phase_end "debootstrap ($VARIANT + git) and cache" "ok"
fi

# ---- 2. the root's apt configuration, the repository bundle -------------------
phase_begin "prepare"
cp /etc/resolv.conf "$R/etc/resolv.conf" 2>/dev/null || true
rm -f "$R/etc/apt/sources.list.d/"*.list "$R/etc/apt/sources.list.d/"*.sources
awk '{ print "deb", $0 }' <<<"$SOURCES" >"$R/etc/apt/sources.list"
# How this machine reaches the archive (proxy, an old Release's dates): the
# host's Acquire:: settings, nothing else.
grep -h '^[[:space:]]*Acquire::' /etc/apt/apt.conf /etc/apt/apt.conf.d/* 2>/dev/null \
    >"$R/etc/apt/apt.conf.d/00fresh-check-host-acquire" || true
mkdir -p "$R/root/fresh"
git -C "$ROOT" bundle create "$R/root/fresh/libhoma.bundle" HEAD 2>"$LOGS/bundle.log" ||
    { cat "$LOGS/bundle.log" >&2; die "git bundle failed"; }
printf '%s\n' "${COMMANDS[@]}" >"$R/root/fresh/commands"
if [[ $DEB_CACHE == 1 ]]; then
    mkdir -p "$CACHE/debs/partial"
    # one run at a time in the .deb cache (apt's lock there does not wait)
    exec 9>"$CACHE/debs.lock"
    if ! flock -n 9; then
        echo "$PROG: another fresh-check uses $CACHE/debs: this one downloads anew"
        DEB_CACHE=0
    fi
fi

# The run inside the root: clone, then each command; "NAME STATUS SECONDS"
# per line in /root/fresh/results.
cat >"$R/root/fresh/run.sh" <<'EOF'
#!/bin/bash
set -u
cd /root
results=/root/fresh/results
: >"$results"
start=$(date +%s)
echo "=== fresh-check: git clone (in the root, git $(git --version | cut -d' ' -f3))"
if git -c advice.detachedHead=false clone -q /root/fresh/libhoma.bundle /root/libhoma; then
    echo "clone 0 $(($(date +%s) - start))" >>"$results"
    git -C /root/libhoma log --oneline -1
else
    echo "clone 1 $(($(date +%s) - start))" >>"$results"
    exit 1
fi
n=0
while IFS= read -r cmd <&3; do
    n=$((n + 1))
    printf '\n=== fresh-check: [%d] # %s\n' "$n" "$cmd"
    start=$(date +%s)
    (cd /root/libhoma && bash -c "$cmd") 2>&1 | tee "/root/fresh/command$n.log"
    rc=${PIPESTATUS[0]}
    secs=$(($(date +%s) - start))
    echo "command$n $rc $secs" >>"$results"
    printf '=== fresh-check: [%d] exit status %d after %d s: %s\n' "$n" "$rc" "$secs" "$cmd"
done 3</root/fresh/commands
EOF

# PID 1 of the new mount and PID namespaces: the mounts, then the chroot.
cat >"$WORK/inner.sh" <<'EOF'
#!/bin/bash
set -eu
R=$1 DEBS=$2
shift 2
mount --bind "$R" "$R" # `ip netns exec` needs / to be a mount point
mount -t proc proc "$R/proc"
mount -t sysfs sysfs "$R/sys"
mount --rbind /dev "$R/dev"
mount -t tmpfs -o mode=1777,nosuid,nodev tmpfs "$R/dev/shm"
mount -t tmpfs -o mode=755,nosuid,nodev tmpfs "$R/run"
if [[ -n $DEBS ]]; then mount --bind "$DEBS" "$R/var/cache/apt/archives"; fi
chroot "$R" /usr/bin/env -i "$@" /bin/bash /root/fresh/run.sh
EOF
phase_end "prepare (apt sources, git bundle of ${REV:0:12})" "ok"

# ---- 3. the commands, in the root ----------------------------------------------
ENVS=(PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin HOME=/root
    LANG=C.UTF-8 "TERM=${TERM:-dumb}")
for v in HOMA_DEMO_SECONDS HOMA_TEST_JOBS HOMA_FUZZ_SECONDS http_proxy https_proxy; do
    if [[ -n ${!v:-} ]]; then ENVS+=("$v=${!v}"); fi
done
RUN_START=$SECONDS
# In the background with job control on, so that it is a process group of its
# own that does not ignore SIGINT (the tests send signals); Ctrl-C reaches
# this script, whose cleanup ends the namespace.
set -m
unshare --mount --pid --fork --kill-child --propagation private \
    bash "$WORK/inner.sh" "$R" "$([[ $DEB_CACHE == 1 ]] && echo "$CACHE/debs")" "${ENVS[@]}" \
    </dev/null 9>&- &
NS_PID=$!
set +m
ns_rc=0
wait "$NS_PID" || ns_rc=$?
NS_PID=""
run_secs=$((SECONDS - RUN_START))
RUN_START=""

# ---- results --------------------------------------------------------------------
overall=0
declare -A got_rc got_secs
if [[ -r $R/root/fresh/results ]]; then
    while read -r name rc secs; do
        got_rc[$name]=$rc
        got_secs[$name]=$secs
    done <"$R/root/fresh/results"
fi
if [[ -n ${got_rc[clone]:-} ]]; then
    PH_NAMES+=("git clone of the bundle, in the root")
    PH_SECS+=("${got_secs[clone]}")
    PH_RESULTS+=("$([[ ${got_rc[clone]} == 0 ]] && echo ok || echo FAILED)")
    [[ ${got_rc[clone]} == 0 ]] || overall=1
fi
for i in "${!COMMANDS[@]}"; do
    name=command$((i + 1))
    if [[ -z ${got_rc[$name]:-} ]]; then
        PH_NAMES+=("${COMMANDS[$i]}")
        PH_SECS+=(0)
        PH_RESULTS+=("NOT RUN")
        overall=1
        continue
    fi
    extra=""
    log=$R/root/fresh/$name.log
    if [[ -r $log ]]; then
        s=$(sed -n 's/^== setup: done in \([0-9]*\) s$/\1/p' "$log" | head -n 1)
        [[ -z $s ]] || extra=" (of which package setup ${s} s)"
    fi
    PH_NAMES+=("${COMMANDS[$i]}")
    PH_SECS+=("${got_secs[$name]}")
    PH_RESULTS+=("exit status ${got_rc[$name]}$extra")
    [[ ${got_rc[$name]} == 0 ]] || overall=1
done
if [[ $ns_rc -ne 0 && $overall -eq 0 ]]; then
    echo "$PROG: the run in the root ended with status $ns_rc" >&2
    overall=1
fi
echo "$PROG: the commands took $run_secs s in the root"
exit "$overall"
