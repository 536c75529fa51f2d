# shellcheck shell=bash
# Library of the kernel-Homa peer harness (sourced; see docs/interop.md).
#
#   hx_resolve_env           find module source, kernel, headers, qemu (77 if missing)
#   hx_net_up                netns hx-interop-<pid> with bridge hx-interop-br
#                            (10.77.0.1/24, the libhoma side) and a trap teardown
#   hx_vm_start I            boot VM I (10.77.0.(1+I)) on tap hx-interop-tI
#   hx_vm I SCRIPT [TMO]     run SCRIPT (sh) in VM I, print its output, return its status
#   hx_ns CMD...             run CMD in the namespace (the libhoma side)
#   hx_capture_start F [EXPR] [SNAPLEN] / hx_capture_stop   tcpdump -w F on the bridge
#   hx_teardown              stop VMs and captures, delete the namespace
#
# Environment: HOMA_MODULE_SRC, HX_WORK, HX_KVER (see hx-build.sh); HX_ACCEL
# (auto|kvm|tcg, default auto: KVM when a VM boots with it, else TCG);
# HX_MEM (MiB, default 1024), HX_SMP (default 1), HX_BOOT_TIMEOUT (s, 180),
# HX_KERNEL_ARGS (more kernel command line, e.g. loglevel=8).

HX_DIR=${HX_DIR:-$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)}
HX_ROOT=$(cd "$HX_DIR/../.." && pwd)

hx_skip() {
    echo "SKIP: $*" >&2
    return 77
}

hx_resolve_env() {
    HOMA_MODULE_SRC=${HOMA_MODULE_SRC:-$HX_ROOT/../shared/third_party/HomaModule}
    [[ -f $HOMA_MODULE_SRC/homa_plumbing.c ]] ||
        { hx_skip "kernel Homa source not found (HOMA_MODULE_SRC=$HOMA_MODULE_SRC)"; return 77; }
    HOMA_MODULE_SRC=$(cd "$HOMA_MODULE_SRC" && pwd)
    HX_WORK=${HX_WORK:-$HX_ROOT/build/interop}
    HX_QEMU=${HX_QEMU:-$(command -v qemu-system-x86_64 || true)}
    [[ -n $HX_QEMU ]] || { hx_skip "qemu-system-x86_64 not installed (apt-get install qemu-system-x86)"; return 77; }
    HX_BUSYBOX=${HX_BUSYBOX:-}
    if [[ -z $HX_BUSYBOX ]]; then
        for b in /bin/busybox /usr/bin/busybox; do
            if [[ -x $b ]] && [[ $(file -L "$b" 2>/dev/null) == *'statically linked'* ]]; then
                HX_BUSYBOX=$b
                break
            fi
        done
    fi
    [[ -n $HX_BUSYBOX ]] || { hx_skip "no static busybox (apt-get install busybox-static)"; return 77; }
    if [[ -z ${HX_KVER:-} ]]; then
        local k v
        # shellcheck disable=SC2045 # ls -v: version order (the last wins)
        for k in $(ls -v /boot/vmlinuz-6.12*-cloud-amd64 2>/dev/null); do
            v=${k#/boot/vmlinuz-}
            if [[ -d /usr/src/linux-headers-$v && -d /lib/modules/$v/kernel ]]; then
                HX_KVER=$v
            fi
        done
    fi
    [[ -n ${HX_KVER:-} ]] ||
        { hx_skip "no linux-image-6.12.*-cloud-amd64-unsigned with matching linux-headers installed"; return 77; }
    HX_KERNEL=/boot/vmlinuz-$HX_KVER
    HX_KDIR=${HX_KDIR:-/usr/src/linux-headers-$HX_KVER}
    [[ -r $HX_KERNEL ]] || { hx_skip "$HX_KERNEL not readable"; return 77; }
    [[ -d $HX_KDIR ]] || { hx_skip "no kernel headers at $HX_KDIR"; return 77; }
    for t in ip tcpdump cpio gzip xz gcc make; do
        command -v "$t" >/dev/null || { hx_skip "$t not installed"; return 77; }
    done
    [[ $(id -u) -eq 0 ]] || { hx_skip "needs root (network namespaces, tap devices)"; return 77; }
    export HOMA_MODULE_SRC HX_WORK HX_QEMU HX_BUSYBOX HX_KVER HX_KERNEL HX_KDIR
}

HX_NS=
HX_TMP=
declare -a HX_VM_PID=() HX_VM_W=() HX_VM_R=() HX_CAP_PID=()

hx_net_up() {
    HX_NS=hx-interop-$$
    HX_TMP=$(mktemp -d /tmp/hx-interop.XXXXXX)
    trap hx_teardown EXIT
    trap 'exit 130' INT TERM
    ip netns add "$HX_NS"
    ip -n "$HX_NS" link set lo up
    ip -n "$HX_NS" link add hx-interop-br type bridge
    # No STP, no forwarding delay: the VMs talk as soon as they are up.
    ip -n "$HX_NS" link set hx-interop-br type bridge stp_state 0 forward_delay 0
    ip -n "$HX_NS" addr add 10.77.0.1/24 dev hx-interop-br
    ip -n "$HX_NS" link set hx-interop-br up
    # A host without Homa answers proto 146 with ICMP unreachable unless a raw
    # socket takes it; the tests open one, nothing else to do here.
}

hx_ns() {
    ip netns exec "$HX_NS" "$@"
}

hx_accel_order() {
    case ${HX_ACCEL:-auto} in
        kvm) echo kvm ;;
        tcg) echo tcg ;;
        *)
            if [[ -w /dev/kvm && ! -f $HX_WORK/kvm.bad ]]; then
                echo kvm tcg
            else
                echo tcg
            fi
            ;;
    esac
}

# hx_vm_start I [extra kernel args]
hx_vm_start() {
    local i=$1 extra=${2:-} accel
    local tap=hx-interop-t$i
    ip -n "$HX_NS" tuntap add dev "$tap" mode tap 2>/dev/null || true
    ip -n "$HX_NS" link set "$tap" master hx-interop-br
    ip -n "$HX_NS" link set "$tap" up
    for accel in $(hx_accel_order); do
        if _hx_vm_boot "$i" "$accel" "$extra"; then
            HX_VM_ACCEL[$i]=$accel
            return 0
        fi
        hx_vm_stop "$i"
        if [[ $accel == kvm ]]; then
            echo "hx: KVM does not boot this kernel here; using TCG emulation" >&2
            touch "$HX_WORK/kvm.bad"
        fi
    done
    echo "hx: VM $i did not boot; console:" >&2
    tail -30 "$HX_TMP/console-$i.log" >&2
    return 1
}
# shellcheck disable=SC2034 # per VM: kvm or tcg (read by the scripts)
declare -a HX_VM_ACCEL=()

_hx_vm_boot() {
    local i=$1 accel=$2 extra=$3 cpu
    local fifo=$HX_TMP/ctl-$i
    rm -f "$fifo.in" "$fifo.out"
    mkfifo "$fifo.in" "$fifo.out"
    local w r
    exec {w}<>"$fifo.in" {r}<>"$fifo.out"
    HX_VM_W[$i]=$w
    HX_VM_R[$i]=$r
    if [[ $accel == kvm ]]; then
        cpu=(-accel kvm -cpu host)
    else
        # shellcheck disable=SC2054 # the comma belongs to QEMU's option
        cpu=(-accel tcg,thread=multi -cpu "${HX_TCG_CPU:-max}")
    fi
    ip netns exec "$HX_NS" "$HX_QEMU" "${cpu[@]}" -m "${HX_MEM:-1024}" -smp "${HX_SMP:-1}" \
        -nodefaults -no-user-config -nographic -display none -monitor none -no-reboot \
        -kernel "$HX_KERNEL" -initrd "$HX_WORK/initrd.cpio.gz" \
        -append "console=ttyS0 panic=-1 quiet loglevel=4 hx.ip=10.77.0.$((1 + i))/24 ${HX_KERNEL_ARGS:-} $extra" \
        -netdev tap,id=n0,ifname=hx-interop-t$i,script=no,downscript=no \
        -device "virtio-net-pci,netdev=n0,mac=52:54:00:77:00:$(printf %02x $((1 + i)))" \
        -serial "file:$HX_TMP/console-$i.log" -serial "pipe:$fifo" \
        </dev/null >"$HX_TMP/qemu-$i.log" 2>&1 &
    HX_VM_PID[$i]=$!
    local line deadline=$((SECONDS + ${HX_BOOT_TIMEOUT:-180}))
    [[ $accel == kvm ]] && deadline=$((SECONDS + ${HX_KVM_TRY_TIMEOUT:-60}))
    while ((SECONDS < deadline)); do
        if read -r -t 2 -u "$r" line; then
            if [[ $line == *@@HX-READY* ]]; then
                echo "hx: VM $i up (${accel}, ${SECONDS}s into the script): ${line#*@@HX-READY }" >&2
                return 0
            fi
        fi
        kill -0 "${HX_VM_PID[$i]}" 2>/dev/null || { cat "$HX_TMP/qemu-$i.log" >&2; return 1; }
        grep -q 'KVM internal error\|emulation failure' "$HX_TMP/qemu-$i.log" 2>/dev/null && return 1
    done
    return 1
}

hx_vm_stop() {
    local i=$1 p=${HX_VM_PID[$1]:-}
    if [[ -n $p ]]; then
        kill "$p" 2>/dev/null || true
        wait "$p" 2>/dev/null || true
        HX_VM_PID[$i]=
    fi
    local fd=${HX_VM_W[$i]:-}
    [[ -n $fd ]] && exec {fd}>&-
    fd=${HX_VM_R[$i]:-}
    [[ -n $fd ]] && exec {fd}<&-
    HX_VM_W[$i]=
    HX_VM_R[$i]=
}

# hx_vm I SCRIPT [TIMEOUT]: prints the script's output; returns its status
# (124 when the VM did not answer in time).
hx_vm() {
    local i=$1 script=$2 tmo=${3:-120} line rc=124
    local deadline=$((SECONDS + tmo))
    printf '%s\n' "$(printf '%s\n' "$script" | base64 -w0)" >&"${HX_VM_W[$i]}"
    while ((SECONDS < deadline)); do
        if read -r -t 5 -u "${HX_VM_R[$i]}" line; then
            if [[ $line == @@HX-DONE* ]]; then
                rc=${line#@@HX-DONE }
                break
            fi
            printf '%s\n' "$line"
        elif ! kill -0 "${HX_VM_PID[$i]}" 2>/dev/null; then
            echo "hx: VM $i died" >&2
            break
        fi
    done
    return "$rc"
}

hx_capture_start() {
    local f=$1 expr=${2:-ip proto 146 or icmp} snap=${3:-0}
    # Not through hx_ns: a backgrounded function is a subshell, and the
    # SIGINT that makes tcpdump flush must reach tcpdump itself.
    # shellcheck disable=SC2086
    ip netns exec "$HX_NS" tcpdump -i hx-interop-br -s "$snap" -U -n -w "$f" $expr \
        2>"$HX_TMP/tcpdump-$$.log" &
    HX_CAP_PID+=($!)
    local n=0
    while ! grep -q 'listening on' "$HX_TMP/tcpdump-$$.log" 2>/dev/null && ((n < 50)); do
        sleep 0.1
        n=$((n + 1))
    done
}

hx_capture_stop() {
    local p
    for p in "${HX_CAP_PID[@]}"; do
        kill -INT "$p" 2>/dev/null || true
        wait "$p" 2>/dev/null || true
    done
    HX_CAP_PID=()
}

hx_teardown() {
    local i
    hx_capture_stop
    for i in "${!HX_VM_PID[@]}"; do
        hx_vm_stop "$i"
    done
    if [[ -n $HX_NS ]]; then
        # Anything still running in the namespace was started by this script.
        local p
        for p in $(ip netns pids "$HX_NS" 2>/dev/null); do
            kill "$p" 2>/dev/null || true
        done
        ip netns del "$HX_NS" 2>/dev/null || true
        HX_NS=
    fi
    if [[ -n $HX_TMP && -z ${HX_KEEP:-} ]]; then
        rm -rf "$HX_TMP"
    fi
}
