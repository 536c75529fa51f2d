#!/usr/bin/env bash
# libhoma's Debian 12 packages: THE list of what the project's commands
# need, and their installer.  .ci/run, scripts/cluster-demo.sh,
# scripts/demo.sh and scripts/test-all.sh all go through this script.
#
#   bash scripts/setup.sh            # as root: install everything missing
#   bash scripts/setup.sh --demo     # only what the demos need
#   bash scripts/setup.sh --check    # say what is missing, install nothing
#
# Groups (default: all of them; --test includes the other two):
#   --demo    the demos: scripts/cluster-demo.sh (root: namespaces, tc) and
#             scripts/demo.sh: a C compiler, cmake, ninja, iproute2
#   --plot    the figures: homa-plot and the tools' --plot (python3-matplotlib);
#             optional for the demo, which skips its chart without it
#   --test    scripts/test-all.sh, everything CI runs (sanitizers, fuzzers,
#             Debian packages, Python, ABI, man pages, the interop tests'
#             QEMU and a Debian 6.12 cloud kernel with its headers)
#
# Modes:
#   (none)    install what is missing with apt-get (--no-install-recommends,
#             retried); as root, or through `sudo -n` otherwise
#   --check   list what is missing with the reason, install nothing; exit
#             status 0 nothing missing, 1 packages missing, 2 only the
#             interop kernel missing (optional: those tests then skip)
#   --ensure  for the scripts above: nothing missing, say nothing; else say
#             what is missing and why, and install it when that is allowed
#             (root, Debian's apt-get, HOMA_SETUP=auto), or print the command
#             to run and exit 1.  --for NAME: who asks, for the messages.
#   --list    the packages of the groups, one per line (no kernel)
#   --kernel  the version of the installed interop kernel (empty if none)
#
# Environment:
#   HOMA_SETUP=auto   (default) --ensure installs what is missing as root
#   HOMA_SETUP=check  --ensure never installs: it prints the command instead
#   HOMA_SETUP=off    --ensure checks nothing (e.g. not Debian, own tools)
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
export DEBIAN_FRONTEND=noninteractive

# group  package  why.  One line each; a package belongs to the first group
# that needs it (--test takes every group).
PACKAGES=(
    "demo build-essential gcc, make and libc headers: build libhoma and its tools"
    "demo cmake the build system"
    "demo ninja-build faster builds (used when present)"
    "demo iproute2 ip(8) and tc(8): the emulated cluster's namespaces, links and priority queues"
    "plot python3 homa-plot and the Python tools"
    "plot python3-matplotlib homa-plot: the charts of --plot (the demo's PNG)"
    "test clang fuzzers (libFuzzer) and the clang build"
    "test libclang-rt-14-dev clang's sanitizer and libFuzzer runtimes"
    "test llvm llvm-symbolizer for readable sanitizer stacks"
    "test libcmocka-dev unit tests (cmocka)"
    "test pkg-config install check"
    "test dpkg-dev Debian packages (scripts/deb-check.sh): dpkg-buildpackage"
    "test debhelper debian/rules (dh, compat 13)"
    "test dh-python dh_python3 for python3-homa"
    "test lintian checks the Debian packages"
    "test scdoc man pages (docs/man/*.scd)"
    "test man-db man -l (man page rendering test), man -w libhoma (deb-check)"
    "test iputils-ping ping(8): the namespace test waits for neighbour discovery"
    "test tcpdump the HOMA_PCAP test reads the capture back"
    "test python3-dev the Python extension (python/)"
    "test python3-numpy Python tests: collectives on numpy arrays"
    "test python3-pytest Python tests, run by ctest"
    "test python3-setuptools pip install of python/ (install check)"
    "test python3-torch the PyTorch DDP hook tests (torch.distributed, gloo)"
    "test abigail-tools ABI check (scripts/abi-check.sh: abidw, abidiff)"
    "test qemu-system-x86 interop tests: kernel-Homa peer VMs (scripts/interop)"
    "test busybox-static interop tests: the VMs' initramfs"
    "test cpio interop tests: packs the initramfs"
)
# The interop tests (docs/interop.md) boot a Debian 6.12 cloud kernel in
# QEMU and build homa.ko against its headers: the newest point release of
# the archive that offers both packages.
KERNEL_WHY="interop tests: the peer VMs' kernel and the headers homa.ko is built against"

# Commands that stand for a group where dpkg cannot tell (not Debian).
probes() {
    case $1 in
    demo) echo cmake cc ip tc ;;
    test) echo cmake gcc ;;
    esac
}

usage() {
    sed -n '2,/^set -euo/p' "${BASH_SOURCE[0]}" | sed -e '/^set -euo/d' -e 's/^# \{0,1\}//'
}

die() {
    echo "setup: $*" >&2
    exit 1
}

MODE=install
WHO=setup
GROUPS_WANTED=()
while [[ $# -gt 0 ]]; do
    case $1 in
    --demo | --plot | --test) GROUPS_WANTED+=("${1#--}") ;;
    --check) MODE=check ;;
    --ensure) MODE=ensure ;;
    --list) MODE=list ;;
    --kernel) MODE=kernel ;;
    --for)
        [[ $# -ge 2 ]] || die "--for needs a name"
        WHO=$2
        shift
        ;;
    -h | --help)
        usage
        exit 0
        ;;
    *)
        echo "setup: unknown argument '$1'" >&2
        usage >&2
        exit 2
        ;;
    esac
    shift
done
[[ ${#GROUPS_WANTED[@]} -gt 0 ]] || GROUPS_WANTED=(test)

want_demo=0 want_plot=0 want_test=0
for g in "${GROUPS_WANTED[@]}"; do
    case $g in
    demo) want_demo=1 ;;
    plot) want_plot=1 ;;
    test) want_demo=1 want_plot=1 want_test=1 ;;
    esac
done
# The option that installs the selection, for the messages.
if [[ $want_test == 1 ]]; then
    OPTS="--test"
else
    OPTS=""
    [[ $want_demo == 0 ]] || OPTS+=" --demo"
    [[ $want_plot == 0 ]] || OPTS+=" --plot"
    OPTS=${OPTS# }
fi

selected() { # group
    case $1 in
    demo) [[ $want_demo == 1 ]] ;;
    plot) [[ $want_plot == 1 ]] ;;
    test) [[ $want_test == 1 ]] ;;
    *) return 1 ;;
    esac
}

# The selected packages, "package why" per line.
selection() {
    local e g rest
    for e in "${PACKAGES[@]}"; do
        g=${e%% *}
        rest=${e#* }
        if selected "$g"; then printf '%s\n' "$rest"; fi
    done
}

is_debian() {
    [[ -r /etc/debian_version ]] && command -v dpkg-query >/dev/null 2>&1 &&
        command -v apt-get >/dev/null 2>&1
}

pkg_ok() {
    dpkg-query -W -f='${db:Status-Abbrev}' "$1" 2>/dev/null | grep -q '^ii'
}

# The newest 6.12 cloud kernel installed with its headers (its version).
installed_kernel() {
    local v
    dpkg-query -W -f='${Package} ${db:Status-Abbrev}\n' \
        'linux-image-6.12.*-cloud-amd64-unsigned' 2>/dev/null |
        awk '$2 == "ii" { print $1 }' | sed -E 's/^linux-image-(.*)-unsigned$/\1/' |
        while read -r v; do
            if pkg_ok "linux-headers-$v"; then echo "$v"; fi
        done | sort -V | tail -n 1
}

# The newest 6.12 cloud kernel the archive offers with its headers (apt-get
# update first); empty if none.
candidate_kernel() {
    local v
    apt-cache search --names-only '^linux-image-6\.12\.[0-9.]+\+deb[0-9]+-cloud-amd64-unsigned$' |
        awk '{print $1}' | sed -E 's/^linux-image-(.*)-unsigned$/\1/' | sort -V |
        while read -r v; do
            if apt-cache show "linux-headers-$v" >/dev/null 2>&1; then echo "$v"; fi
        done | tail -n 1 || true
}

MISSING=()      # packages
MISSING_WHY=()  # their reasons
KERNEL_MISSING=0
find_missing() {
    local pkg why installed
    # one dpkg-query for all: "package " per installed one
    # shellcheck disable=SC2016 # dpkg-query's format, not the shell's
    installed=" $(selection | awk '{print $1}' |
        { xargs dpkg-query -W -f='${Package} ${db:Status-Abbrev}\n' 2>/dev/null || true; } |
        awk '$2 == "ii" { printf "%s ", $1 }') "
    while read -r pkg why; do
        if [[ $installed != *" $pkg "* ]]; then
            MISSING+=("$pkg")
            MISSING_WHY+=("$why")
        fi
    done < <(selection)
    if [[ $want_test == 1 && -z $(installed_kernel) ]]; then KERNEL_MISSING=1; fi
}

print_missing() { # prefix
    local i
    for i in "${!MISSING[@]}"; do
        printf '%s  %-20s %s\n' "$1" "${MISSING[$i]}" "${MISSING_WHY[$i]}"
    done
    if [[ $KERNEL_MISSING == 1 ]]; then
        printf '%s  %-20s %s\n' "$1" "interop kernel" "(optional) linux-image-6.12.*-cloud-amd64-unsigned and its linux-headers: $KERNEL_WHY; without it they skip"
    fi
}

SUDO=()
APT_OPTS=(-q -o DPkg::Lock::Timeout=300)
# apt-get with a few retries: a fresh machine's mirror can be flaky.
apt_retry() {
    local i
    for i in 1 2 3; do
        if ${SUDO[@]+"${SUDO[@]}"} apt-get "${APT_OPTS[@]}" "$@" </dev/null; then
            return 0
        fi
        echo "setup: apt-get $1 failed (attempt $i), retrying in 10 s" >&2
        sleep 10
    done
    ${SUDO[@]+"${SUDO[@]}"} apt-get "${APT_OPTS[@]}" "$@" </dev/null
}

# Installs MISSING (and the kernel when KERNEL_MISSING).
install_missing() {
    if [[ $(id -u) -ne 0 ]]; then
        command -v sudo >/dev/null 2>&1 ||
            die "not root and no sudo: run as root: bash scripts/setup.sh $OPTS"
        SUDO=(sudo -n)
    fi
    local start=$SECONDS
    apt_retry update
    if [[ ${#MISSING[@]} -gt 0 ]]; then
        echo "== setup: apt-get install --no-install-recommends ${MISSING[*]}"
        apt_retry install -y --no-install-recommends "${MISSING[@]}"
    fi
    if [[ $KERNEL_MISSING == 1 ]]; then
        local kver
        kver=$(candidate_kernel)
        if [[ -n $kver ]]; then
            echo "== setup: interop kernel $kver"
            apt_retry install -y --no-install-recommends "linux-image-$kver-unsigned" \
                "linux-headers-$kver"
        else
            echo "setup: no linux-image-6.12.*-cloud-amd64-unsigned with headers in the" \
                "archive; the interop tests will skip" >&2
        fi
    fi
    echo "== setup: done in $((SECONDS - start)) s"
}

case $MODE in
list)
    selection | awk '{print $1}'
    exit 0
    ;;
kernel)
    is_debian && installed_kernel
    exit 0
    ;;
esac

if ! is_debian; then
    case $MODE in
    check) die "not a Debian system (no dpkg-query/apt-get): cannot check packages" ;;
    install) die "not a Debian system (no dpkg-query/apt-get): install the equivalents of: $(selection | awk '{print $1}' | tr '\n' ' ')" ;;
    esac
    # --ensure: the commands that stand for the groups
    [[ ${HOMA_SETUP:-auto} != off ]] || exit 0
    lacking=()
    for g in demo test; do
        selected "$g" || continue
        for c in $(probes "$g"); do
            command -v "$c" >/dev/null 2>&1 || lacking+=("$c")
        done
    done
    if [[ ${#lacking[@]} -gt 0 ]]; then
        echo "$WHO: missing commands: ${lacking[*]}.  This is not a Debian system, so" \
            "scripts/setup.sh cannot install them: install cmake, a C compiler and" \
            "iproute2 (ip, tc) with your package manager (Debian packages:" \
            "$(selection | awk '{print $1}' | tr '\n' ' ' | sed 's/ $//'))." >&2
        exit 1
    fi
    exit 0
fi

find_missing

case $MODE in
check)
    total=$(selection | wc -l)
    if [[ ${#MISSING[@]} -eq 0 && $KERNEL_MISSING == 0 ]]; then
        kinfo=""
        [[ $want_test == 0 ]] || kinfo=", and the interop kernel $(installed_kernel)"
        echo "setup: all $total packages of '$OPTS' are installed$kinfo"
        exit 0
    fi
    echo "setup: missing for '$OPTS':"
    print_missing "   "
    cmd="bash scripts/setup.sh $OPTS"
    [[ $(id -u) -eq 0 ]] || cmd="sudo $cmd"
    if [[ ${#MISSING[@]} -gt 0 ]]; then
        echo "setup: ${#MISSING[@]} of $total packages missing; install them with: $cmd"
        exit 1
    fi
    echo "setup: only the optional interop kernel is missing; install it with: $cmd"
    exit 2
    ;;
install)
    if [[ ${#MISSING[@]} -eq 0 && $KERNEL_MISSING == 0 ]]; then
        echo "== setup: every package of '$OPTS' is installed"
        exit 0
    fi
    echo "== setup: installing for '$OPTS':"
    print_missing "  "
    install_missing
    exit 0
    ;;
esac

# --ensure
[[ ${HOMA_SETUP:-auto} != off ]] || exit 0
if [[ ${#MISSING[@]} -eq 0 ]]; then
    if [[ $KERNEL_MISSING == 1 ]]; then
        echo "$WHO: note: no linux-image-6.12.*-cloud-amd64-unsigned with its headers is" \
            "installed: the interop tests will skip (bash scripts/setup.sh --test installs it)"
    fi
    exit 0
fi
echo "$WHO: these Debian packages are missing ($OPTS):"
print_missing ""
if [[ $(id -u) -eq 0 && ${HOMA_SETUP:-auto} == auto ]]; then
    echo "$WHO: installing them now with apt-get (bash scripts/setup.sh $OPTS;" \
        "HOMA_SETUP=check to never install)"
    install_missing
    exit 0
fi
if [[ $(id -u) -eq 0 ]]; then
    cmd="bash scripts/setup.sh $OPTS"
    why="HOMA_SETUP=${HOMA_SETUP} forbids installing them here"
else
    cmd="sudo bash scripts/setup.sh $OPTS"
    why="installing them needs root"
fi
echo "$WHO: $why; run this (from $ROOT), then run $WHO again:" >&2
echo "" >&2
echo "    $cmd" >&2
echo "" >&2
exit 1
