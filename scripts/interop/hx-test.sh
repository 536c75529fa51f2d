#!/usr/bin/env bash
# The interop test groups (ctest interop__GROUP; docs/interop.md). Each group
# boots its kernel-Homa VM(s) once and runs several checks; libhoma runs in
# the host namespace (10.77.0.1) with the raw IP driver, the kernel in the VM
# (10.77.0.2; a second VM is 10.77.0.3).
#
#   hx-test.sh GROUP HX_LPEER HX_PCAP_DECODE
#   GROUP: k2k sizes sched loss end_of_life soak
#
# Exit 0 when every check passed, 1 otherwise, 77 when a prerequisite is
# missing. HX_KEEP=1 keeps the work directory (captures, logs) and prints it.
set -uo pipefail
HX_DIR=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
source "$HX_DIR/hx-lib.sh"
group=${1:?usage: hx-test.sh GROUP HX_LPEER HX_PCAP_DECODE}
LPEER=${2:?hx_lpeer path}
DECODE=${3:?hx_pcap_decode path}
hx_resolve_env || exit $?
"$HX_DIR/hx-build.sh" || exit $?
hx_net_up

FAILS=0
pass() { echo "PASS: $*"; }
fail() {
    echo "FAIL: $*"
    FAILS=$((FAILS + 1))
}
# check DESCRIPTION COMMAND...: PASS/FAIL by the command's status.
check() {
    local d=$1
    shift
    if "$@"; then pass "$d"; else fail "$d"; fi
}
# check_hard: the same for what a crash of the peer cannot excuse (a wrong
# byte, a malformed packet); counted in HARD_FAILS too.
HARD_FAILS=0
check_hard() {
    local d=$1
    shift
    if "$@"; then
        pass "$d"
    else
        fail "$d"
        HARD_FAILS=$((HARD_FAILS + 1))
    fi
}

# lp NAME ARGS...: runs hx_lpeer in the namespace (foreground), output to
# $HX_TMP/NAME.log and to stdout; returns its status.
lp() {
    local name=$1
    shift
    ip netns exec "$HX_NS" "$LPEER" "$@" --counters >"$HX_TMP/$name.log" 2>&1
    local rc=$?
    sed "s/^/  [$name] /" "$HX_TMP/$name.log" | grep -v 'counter driver\.\(send\|recv\|poll\)_syscalls'
    return $rc
}
# lp_bg NAME ARGS...: the same in the background; the pid goes to LP_PID.
lp_bg() {
    local name=$1
    shift
    ip netns exec "$HX_NS" "$LPEER" "$@" --counters >"$HX_TMP/$name.log" 2>&1 &
    LP_PID=$!
    sleep 0.5
}
lp_wait() { # lp_wait NAME PID: stops a server and shows its log
    kill -TERM "$2" 2>/dev/null
    wait "$2"
    local rc=$?
    sed "s/^/  [$1] /" "$HX_TMP/$1.log" | grep -v 'counter driver\.\(send\|recv\|poll\)_syscalls'
    return $rc
}
# counter NAME LOG: a counter hx_lpeer printed (0 when absent).
counter() {
    local v
    v=$(awk -v n="$1" '$1 == "hx_lpeer:" && $2 == "counter" && $3 == n {print $4}' "$2" | tail -1)
    echo "${v:-0}"
}
# No malformed packet from the kernel: every structural drop counter and the
# driver's garbage counter stay zero.
no_malformed() {
    local log=$1 c bad=0
    for c in drop_short drop_bad_type drop_truncated drop_zero_id drop_bad_range \
        drop_bad_priority drop_bad_acks drop_msg_too_long drop_bad_grant drop_inconsistent \
        driver.garbage_in; do
        if [[ $(counter "$c" "$log") != 0 ]]; then
            echo "  $log: $c = $(counter "$c" "$log")"
            bad=1
        fi
    done
    return $bad
}
ok_line() { grep -q "^$2: ok" "$HX_TMP/$1.log"; }
# kmetrics I: the kernel's /proc/net/homa_metrics summed over cores, non-zero only.
KM='awk '\''NF >= 2 && $2 ~ /^[0-9]+$/ && $1 != "core" && $1 != "time_cycles" && $1 != "cpu_khz" {s[$1] += $2} END {for (k in s) if (s[k]) print k, s[k]}'\'' /proc/net/homa_metrics | sort'
kmetrics() { hx_vm "$1" "$KM" >"$HX_TMP/kmetrics-$1-$2.txt"; }
kmetric() { # kmetric FILE NAME
    local v
    v=$(awk -v n="$2" '$1 == n {print $2}' "$1")
    echo "${v:-0}"
}
kdiff() { # kdiff BEFORE AFTER NAME
    echo $(($(kmetric "$2" "$3") - $(kmetric "$1" "$3")))
}
gt0() { (($1 > 0)); }
eq() { [[ $1 == "$2" ]]; }

# decode PCAP [extra checks]: libhoma's decoder over the capture, zero rejects.
decode() {
    "$DECODE" "$1" >"$1.txt" 2>&1
    local rc=$?
    sed 's/^/  [decode] /' "$1.txt"
    check_hard "capture $(basename "$1") decoded by homa_wire_decode with zero rejects" eq "$rc" 0
}

LENS=1,1396,1397,1424,1425,100000,1000000
KSRV='khoma_peer server --port 4000 >/tmp/ks.log 2>&1 & echo $! >/tmp/ks.pid; sleep 0.3'

group_k2k() {
    hx_vm_start 1 || return 1
    hx_vm_start 2 || return 1
    hx_vm 1 "$KSRV; server --port 4001 --validate >/tmp/srv.log 2>&1 &"
    hx_capture_start "$HX_TMP/k2k.pcap"
    hx_vm 2 "khoma_peer client --server 10.77.0.2:4000 --lens $LENS --count 2" 300 | sed 's/^/  [kclient] /'
    check "kernel -> kernel, khoma_peer $LENS x2, payloads verified" eq "${PIPESTATUS[0]}" 0
    hx_vm 2 'for l in 100 1424 100000 1000000; do homa_test 10.77.0.2:4001 --length $l invoke || exit 1; done' 300 |
        sed 's/^/  [homa_test] /'
    check "kernel -> kernel, module's homa_test invoke to module's server (100 B .. 1 MB)" eq "${PIPESTATUS[0]}" 0
    hx_capture_stop
    decode "$HX_TMP/k2k.pcap"
}

group_sizes() {
    hx_vm_start 1 || return 1
    hx_vm 1 "$KSRV"
    kmetrics 1 before
    hx_capture_start "$HX_TMP/sizes.pcap"
    lp l2k client --server 10.77.0.2:4000 --lens $LENS --count 2
    check "libhoma client -> kernel server: $LENS x2, payloads verified" ok_line l2k hx_lpeer
    check "libhoma saw nothing malformed from the kernel (client)" no_malformed "$HX_TMP/l2k.log"

    lp_bg lsrv server --port 5000 --seconds 300
    hx_vm 1 "khoma_peer client --server 10.77.0.1:5000 --lens $LENS --count 2" 300 | sed 's/^/  [kclient] /'
    check "kernel client -> libhoma server: $LENS x2, payloads verified (client side)" eq "${PIPESTATUS[0]}" 0
    # 0 B: the module refuses zero-length messages in sendmsg ("message has
    # length zero"), so the kernel can neither send nor answer one.
    hx_vm 1 "khoma_peer client --server 10.77.0.1:5000 --lens 0" 60 >"$HX_TMP/k0.log" 2>&1
    sed 's/^/  [kclient-0B] /' "$HX_TMP/k0.log"
    check "kernel refuses to send a 0 B message (EINVAL in sendmsg)" grep -q 'sendmsg len 0: Invalid argument' "$HX_TMP/k0.log"
    lp_wait lsrv "$LP_PID"
    check "libhoma server verified every request from the kernel" ok_line lsrv hx_lpeer
    check "libhoma server: 14 requests, 14 replies" eq "$(counter server_requests "$HX_TMP/lsrv.log")/$(counter server_replies "$HX_TMP/lsrv.log")" 14/14
    check "libhoma saw nothing malformed from the kernel (server)" no_malformed "$HX_TMP/lsrv.log"

    # A 0 B request from libhoma: the module never delivers a zero-length
    # message to its application (it answers RESENDs with BUSY instead), so
    # no response comes; libhoma must not crash or get a bogus response.
    lp l2k0 client --server 10.77.0.2:4000 --lens 0 --timeout-ms 3000 --expect-error
    check "libhoma 0 B request to the kernel: no response (the module does not deliver 0 B messages), no bogus reply" ok_line l2k0 hx_lpeer
    hx_capture_stop
    kmetrics 1 after
    sed 's/^/  [kernel] /' "$HX_TMP/kmetrics-1-after.txt"
    check "kernel counted no short packets or unknown types from libhoma" \
        eq "$(kmetric "$HX_TMP/kmetrics-1-after.txt" short_packets)/$(kmetric "$HX_TMP/kmetrics-1-after.txt" unknown_packet_types)" 0/0
    decode "$HX_TMP/sizes.pcap"
}

group_sched() {
    hx_vm_start 1 || return 1
    # Cutoffs unlike libhoma's defaults (200/2800/15000/1000000 at 7..4), so
    # the capture shows whose cutoffs each side used; the write bumps the
    # kernel's cutoff_version, so it announces them in CUTOFFS.
    hx_vm 1 "echo 0 0 0 0 0 1000000 5000 1000 >/proc/sys/net/homa/unsched_cutoffs; cat /proc/sys/net/homa/unsched_cutoffs /proc/sys/net/homa/cutoff_version; $KSRV" |
        sed 's/^/  [kernel cutoffs, version] /'
    kmetrics 1 before
    hx_capture_start "$HX_TMP/sched.pcap"
    local lens=800,3000,20000,300000,1000000
    lp l2k client --server 10.77.0.2:4000 --lens $lens --count 3 --inflight 3
    check "libhoma -> kernel, scheduled traffic ($lens x3, 3 in flight)" ok_line l2k hx_lpeer
    lp_bg lsrv server --port 5000 --seconds 300
    hx_vm 1 "khoma_peer client --server 10.77.0.1:5000 --lens $lens --count 3 --inflight 3" 300 | sed 's/^/  [kclient] /'
    check "kernel -> libhoma, scheduled traffic ($lens x3, 3 in flight)" eq "${PIPESTATUS[0]}" 0
    lp_wait lsrv "$LP_PID"
    check "libhoma server verified every request" ok_line lsrv hx_lpeer
    hx_capture_stop
    kmetrics 1 after
    local b=$HX_TMP/kmetrics-1-before.txt a=$HX_TMP/kmetrics-1-after.txt
    check "libhoma granted to the kernel (grant_out > 0, client and server)" \
        gt0 $(($(counter grant_out "$HX_TMP/l2k.log") * $(counter grant_out "$HX_TMP/lsrv.log")))
    check "the kernel granted to libhoma (grant_in > 0, client and server)" \
        gt0 $(($(counter grant_in "$HX_TMP/l2k.log") * $(counter grant_in "$HX_TMP/lsrv.log")))
    check "kernel sent and received GRANTs ($(kdiff "$b" "$a" packets_sent_GRANT) / $(kdiff "$b" "$a" packets_rcvd_GRANT))" \
        gt0 $(($(kdiff "$b" "$a" packets_sent_GRANT) * $(kdiff "$b" "$a" packets_rcvd_GRANT)))
    check "libhoma received the kernel's CUTOFFS" gt0 "$(counter cutoffs_in "$HX_TMP/l2k.log")"
    check "the kernel received libhoma's CUTOFFS ($(kdiff "$b" "$a" packets_rcvd_CUTOFFS))" gt0 "$(kdiff "$b" "$a" packets_rcvd_CUTOFFS)"
    check "libhoma saw nothing malformed from the kernel" no_malformed "$HX_TMP/l2k.log"
    check "libhoma saw nothing malformed from the kernel (server)" no_malformed "$HX_TMP/lsrv.log"
    decode "$HX_TMP/sched.pcap"
    # Each direction's first DATA packets (offset 0) sent under the
    # receiver's announced cutoff version use the priority those cutoffs give.
    local l2k k2l
    l2k=$(awk '/10.77.0.1 -> 10.77.0.2/ {f=1} /10.77.0.2 -> 10.77.0.1/ {f=0} f && /first-data-priority/ {print $3, $5}' "$HX_TMP/sched.pcap.txt")
    k2l=$(awk '/10.77.0.2 -> 10.77.0.1/ {f=1} /10.77.0.1 -> 10.77.0.2/ {f=0} f && /first-data-priority/ {print $3, $5}' "$HX_TMP/sched.pcap.txt")
    check "libhoma's unscheduled priorities follow the kernel's CUTOFFS (match/mismatch: $l2k)" \
        awk -v s="$l2k" 'BEGIN {split(s, a, " "); exit !(a[1] > 0 && a[2] == 0)}'
    # The module picks a message's unscheduled priority when the message is
    # set up and stamps the cutoff version when a packet leaves, so a CUTOFFS
    # arriving in between shows as a rare mismatch (seen: 1 in 400); libhoma
    # is held to none.
    check "the kernel's unscheduled priorities follow libhoma's CUTOFFS (match/mismatch: $k2l)" \
        awk -v s="$k2l" 'BEGIN {split(s, a, " "); exit !(a[1] > 0 && a[2] * 50 <= a[1])}'
}

group_loss() {
    hx_vm_start 1 || return 1
    hx_vm 1 "$KSRV"
    kmetrics 1 before
    hx_capture_start "$HX_TMP/loss.pcap" "ip proto 146" 200
    local lens=1,1425,30000,100000,1000000
    HOMA_FAULTS="drop=0.05,seed=11" lp l2k client --server 10.77.0.2:4000 --lens $lens --count 4 --inflight 2 --timeout-ms 60000
    check "libhoma -> kernel with 5% loss at libhoma (send and receive): every RPC completes" ok_line l2k hx_lpeer
    HOMA_FAULTS="drop=0.05,seed=12" lp_bg lsrv server --port 5000 --seconds 300
    hx_vm 1 "khoma_peer client --server 10.77.0.1:5000 --lens $lens --count 4 --inflight 2" 300 | sed 's/^/  [kclient] /'
    check "kernel -> libhoma with 5% loss at libhoma: every RPC completes" eq "${PIPESTATUS[0]}" 0
    lp_wait lsrv "$LP_PID"
    check "libhoma server verified every request" ok_line lsrv hx_lpeer
    hx_capture_stop
    kmetrics 1 after
    local b=$HX_TMP/kmetrics-1-before.txt a=$HX_TMP/kmetrics-1-after.txt
    local rs=$(($(counter resend_out "$HX_TMP/l2k.log") + $(counter resend_out "$HX_TMP/lsrv.log")))
    local rr=$(($(counter resend_in "$HX_TMP/l2k.log") + $(counter resend_in "$HX_TMP/lsrv.log")))
    local rt=$(($(counter retransmit_pkts "$HX_TMP/l2k.log") + $(counter retransmit_pkts "$HX_TMP/lsrv.log")))
    check "libhoma sent RESENDs ($rs) and the kernel received them ($(kdiff "$b" "$a" packets_rcvd_RESEND))" \
        gt0 $((rs * $(kdiff "$b" "$a" packets_rcvd_RESEND)))
    check "the kernel retransmitted (resent_packets $(kdiff "$b" "$a" resent_packets))" gt0 "$(kdiff "$b" "$a" resent_packets)"
    check "the kernel sent RESENDs ($(kdiff "$b" "$a" packets_sent_RESEND)), libhoma got $rr and retransmitted $rt packets" \
        gt0 $((rr * rt * $(kdiff "$b" "$a" packets_sent_RESEND)))
    check "libhoma saw nothing malformed from the kernel" no_malformed "$HX_TMP/l2k.log"
    decode "$HX_TMP/loss.pcap"
}

group_end_of_life() {
    hx_vm_start 1 || return 1
    hx_vm 1 "$KSRV"
    kmetrics 1 before
    # 1. NEED_ACK/ACK free server state on both sides.
    lp l2k client --server 10.77.0.2:4000 --lens 1,5000,200000 --count 3
    check "libhoma -> kernel RPCs" ok_line l2k hx_lpeer
    sleep 2
    hx_vm 1 'kill -USR1 $(cat /tmp/ks.pid); sleep 0.5; grep "info num_rpcs" /tmp/ks.log | tail -1' >"$HX_TMP/kinfo.txt"
    cat "$HX_TMP/kinfo.txt"
    check "kernel server socket holds no RPC after libhoma's acks" grep -q 'num_rpcs 0' "$HX_TMP/kinfo.txt"
    lp_bg lsrv server --port 5000 --seconds 300
    hx_vm 1 "khoma_peer client --server 10.77.0.1:5000 --lens 1,5000,200000 --count 3" 120 | sed 's/^/  [kclient] /'
    check "kernel -> libhoma RPCs" eq "${PIPESTATUS[0]}" 0
    sleep 3
    lp_wait lsrv "$LP_PID"
    check "libhoma server freed every RPC after the kernel's acks (server_acked $(counter server_acked "$HX_TMP/lsrv.log") of $(counter server_requests "$HX_TMP/lsrv.log"), server_timeouts $(counter server_timeouts "$HX_TMP/lsrv.log"))" \
        eq "$(counter server_acked "$HX_TMP/lsrv.log")/$(counter server_timeouts "$HX_TMP/lsrv.log")" 9/0
    kmetrics 1 mid
    local b=$HX_TMP/kmetrics-1-before.txt m=$HX_TMP/kmetrics-1-mid.txt
    echo "  kernel ACK sent/received $(kdiff "$b" "$m" packets_sent_ACK)/$(kdiff "$b" "$m" packets_rcvd_ACK), NEED_ACK sent/received $(kdiff "$b" "$m" packets_sent_NEED_ACK)/$(kdiff "$b" "$m" packets_rcvd_NEED_ACK)"
    check "acks crossed (kernel received ACK packets or piggybacked acks: ACK rcvd $(kdiff "$b" "$m" packets_rcvd_ACK), libhoma ack_in $(counter ack_in "$HX_TMP/lsrv.log"))" \
        gt0 $(($(kdiff "$b" "$m" packets_rcvd_ACK) + $(counter ack_in "$HX_TMP/lsrv.log")))

    # 2. RPC_UNKNOWN: the kernel does not have the RPC (libhoma's first
    # 200 ms of sending are blacked out, so the request never reached it);
    # libhoma's RESEND for the response gets RPC_UNKNOWN, libhoma restarts
    # the request and the kernel answers it. (Closing and reopening the
    # kernel server socket instead, khoma_peer --lose, made the kernel
    # answer ICMP port unreachable, which fails the RPC at once.)
    HOMA_FAULTS="blackout_ms=200,blackout_start_ms=0,dir=tx" lp lrestart client --server 10.77.0.2:4000 --lens 3000 --count 1 --timeout-ms 60000
    check "a kernel without the RPC answers RPC_UNKNOWN (libhoma unknown_in $(counter unknown_in "$HX_TMP/lrestart.log"))" \
        gt0 "$(counter unknown_in "$HX_TMP/lrestart.log")"
    check "libhoma restarted the request (client_restarts $(counter client_restarts "$HX_TMP/lrestart.log")) and it completed" \
        eval 'ok_line lrestart hx_lpeer && gt0 $(counter client_restarts "$HX_TMP/lrestart.log")'

    # 3. A kernel peer that goes away: first Homa unloaded (the host answers
    # ICMP protocol unreachable), then the whole VM gone (silence).
    hx_vm 1 'kill $(cat /tmp/ks.pid); sleep 0.5; rmmod homa && echo homa unloaded'
    lp gone1 client --server 10.77.0.2:4000 --lens 1000 --timeout-ms 30000 --expect-error
    check "Homa unloaded: libhoma's RPC fails at once with a clear error ($(grep -o 'last_error=[^=]*bytes' "$HX_TMP/gone1.log" | sed 's/ bytes$//'))" \
        ok_line gone1 hx_lpeer
    hx_vm_stop 1
    local t0=$SECONDS
    lp gone2 client --server 10.77.0.2:4000 --lens 1000 --timeout-ms 60000 --expect-error
    check "VM gone: libhoma's RPC fails with a clear error after $((SECONDS - t0)) s ($(grep -o 'last_error=[^=]*bytes' "$HX_TMP/gone2.log" | sed 's/ bytes$//'))" \
        ok_line gone2 hx_lpeer
}

# The VM's side of a failure: the kernel server's log, the kernel log
# (oops, OOM) and free memory.
vm_report() {
    hx_vm 1 "echo '-- /tmp/ks.log:'; tail -n 20 /tmp/ks.log; echo '-- dmesg:'; dmesg | tail -n 40; echo '-- meminfo:'; head -n 5 /proc/meminfo" 60 |
        sed 's/^/  [vm] /'
}

# After a stalled kernel client: the module's log, libhoma's counters so
# far and every captured packet of the stalled RPCs (HX_KEEP=1 keeps it all).
stall_report() {
    echo "  stall report:"
    vm_report
    local ids
    ids=$(awk '$2 == "rpc" && $3 == "id" {printf "%s%s", sep, $4; sep = ","}' "$HX_TMP/kclient.log")
    if [[ -n $ids ]]; then
        hx_capture_stop
        "$DECODE" --trace "$ids" "$HX_TMP/soak.pcap" | grep '^trace' | tail -n 200 | sed 's/^/  [pcap] /'
    fi
}

# The kernel of VM I oopsed or panicked (its console says so).
vm_crashed() { grep -qE 'Oops|BUG: |Kernel panic' "$HX_TMP/console-$1.log" 2>/dev/null; }

# Under emulation the module itself may crash under this load (a double
# fault or a NULL dereference in its sendmsg path, seen with one vCPU, also
# between two kernel VMs and no libhoma at all: group k2k_soak;
# docs/interop.md).  Such
# an attempt proves nothing either way: it is reported, its soft checks
# are discounted, and the soak runs again on a fresh VM, up to
# HX_SOAK_ATTEMPTS (3) times.  Wrong bytes and malformed packets count in
# every attempt.
group_soak() {
    local attempts=${HX_SOAK_ATTEMPTS:-3} n fails0 hard0 crashes=0
    for ((n = 1; n <= attempts; n++)); do
        fails0=$FAILS
        hard0=$HARD_FAILS
        echo "  soak attempt $n of at most $attempts"
        soak_attempt || fail "soak attempt $n could not run to the end"
        if ! vm_crashed 1; then
            echo "  soak: attempt $n ran with the kernel up to the end ($crashes earlier attempt(s) ended by a kernel crash)"
            return 0
        fi
        crashes=$((crashes + 1))
        echo "  soak: the kernel VM crashed during attempt $n; its oops:"
        grep -m1 -A30 -E 'Oops|BUG: |Kernel panic' "$HX_TMP/console-1.log" | grep -E 'Oops|BUG|RIP: 0010|homa_|Kernel panic' | head -n 12 |
            sed 's/^/  [vm-console] /'
        cp "$HX_TMP/console-1.log" "$HX_TMP/console-1.attempt$n.log"
        FAILS=$((fails0 + HARD_FAILS - hard0))
        hx_capture_stop
        hx_vm_stop 1
    done
    fail "the kernel VM crashed in all $attempts soak attempts"
}

soak_attempt() {
    # Two vCPUs: with one, the module crashed in about a third of the runs
    # (also kernel to kernel); with two, in none of 25 (docs/interop.md).
    local HX_SMP=${HX_SOAK_SMP:-2}
    hx_vm_start 1 || return 1
    # One emulated vCPU: the module's busy polling in recvmsg (poll_usecs 50)
    # keeps it from processing packets for long stretches (a soft lockup was
    # seen once), so it is off here; libhoma's timeout is 3 s for the same
    # reason (with 1 s, 8 of 292 RPCs timed out in one run).
    hx_vm 1 "echo 0 >/proc/sys/net/homa/poll_usecs; $KSRV"
    kmetrics 1 before
    local secs=${HX_SOAK_SECONDS:-12}
    hx_capture_start "$HX_TMP/soak.pcap" "ip proto 146 or icmp" 200
    lp_bg lsrv server --port 5000 --seconds 600 --timeout-ticks 3000
    local sp=$LP_PID
    lp_bg lcli client --server 10.77.0.2:4000 --lens 100,1500,9000,60000,250000 --inflight 8 --seconds "$secs" --timeout-ms 60000 --timeout-ticks 3000
    local cp=$LP_PID
    # --stall-s: a kernel RPC that never completes fails the check (with the
    # module's view of it) instead of hanging the test.
    # HX_SOAK_CRASH=N (a test of this harness): crash the VM's kernel on
    # purpose 3 s into each of the first N attempts.
    local crash=
    ((n <= ${HX_SOAK_CRASH:-0})) && crash="(sleep 3; echo c >/proc/sysrq-trigger) & "
    hx_vm 1 "${crash}khoma_peer client --server 10.77.0.1:5000 --lens 100,1500,9000,60000,250000 --inflight 8 --seconds $secs --stall-s 45" $((secs + 150)) |
        tee "$HX_TMP/kclient.log" | sed 's/^/  [kclient] /'
    local krc=${PIPESTATUS[0]}
    check "kernel -> libhoma: 8 in flight for ${secs} s, every payload verified" eq "$krc" 0
    if ((krc != 0)); then
        stall_report
    fi
    wait "$cp"
    sed 's/^/  [lcli] /' "$HX_TMP/lcli.log" | grep -v syscalls
    # Every RPC completes and every response verifies: no tolerance.
    local st
    st=$(sed -nE 's/^hx_lpeer: (ok|FAIL) rpcs=([0-9]+) sent=([0-9]+) bad=([0-9]+) errors=([0-9]+) failed=([0-9]+).*/\2 \3 \4 \5 \6/p' "$HX_TMP/lcli.log")
    check_hard "libhoma -> kernel: no response byte wrong ($st)" \
        awk -v s="$st" 'BEGIN {split(s, a, " "); exit !(a[3] == 0)}'
    check "libhoma -> kernel: 8 in flight for ${secs} s, every RPC completed and verified (ok sent bad errors failed: $st)" \
        awk -v s="$st" 'BEGIN {split(s, a, " "); exit !(a[2] > 0 && a[1] == a[2] && a[3] == 0 && a[4] == 0 && a[5] == 0)}'
    if [[ $FAILS != 0 && $krc == 0 ]]; then
        vm_report
    fi
    sleep 1
    lp_wait lsrv "$sp"
    check "libhoma server verified every request" ok_line lsrv hx_lpeer
    hx_capture_stop
    kmetrics 1 after
    local b=$HX_TMP/kmetrics-1-before.txt a=$HX_TMP/kmetrics-1-after.txt
    echo "  kernel packets (sent / received) during the soak:"
    local t
    for t in DATA GRANT RESEND RPC_UNKNOWN BUSY CUTOFFS NEED_ACK ACK; do
        echo "    $t $(kdiff "$b" "$a" packets_sent_$t) / $(kdiff "$b" "$a" packets_rcvd_$t)"
    done
    check_hard "libhoma saw nothing malformed from the kernel (client)" no_malformed "$HX_TMP/lcli.log"
    check_hard "libhoma saw nothing malformed from the kernel (server)" no_malformed "$HX_TMP/lsrv.log"
    check "kernel counted no short packets or unknown types from libhoma" \
        eq "$(kmetric "$a" short_packets)/$(kmetric "$a" unknown_packet_types)" 0/0
    decode "$HX_TMP/soak.pcap"
}

# The control for the soak: the same traffic between two kernel-Homa VMs,
# no libhoma involved (not a ctest; for telling the module's own failures
# under emulation from libhoma's).
group_k2k_soak() {
    local HX_SMP=${HX_SOAK_SMP:-2}
    hx_vm_start 1 || return 1
    hx_vm_start 2 || return 1
    local secs=${HX_SOAK_SECONDS:-12} i rc
    for i in 1 2; do
        hx_vm "$i" "echo 0 >/proc/sys/net/homa/poll_usecs; $KSRV"
    done
    local args="--lens 100,1500,9000,60000,250000 --inflight 8 --seconds $secs --stall-s 45"
    hx_vm 2 "khoma_peer client --server 10.77.0.2:4000 $args >/tmp/kc.log 2>&1 & echo \$! >/tmp/kc.pid"
    hx_vm 1 "khoma_peer client --server 10.77.0.3:4000 $args" $((secs + 150)) | sed 's/^/  [kclient1] /'
    check "kernel 1 -> kernel 2: 8 in flight for ${secs} s" eq "${PIPESTATUS[0]}" 0
    hx_vm 2 "while kill -0 \$(cat /tmp/kc.pid) 2>/dev/null; do sleep 1; done; cat /tmp/kc.log; grep -q '^khoma_peer: ok' /tmp/kc.log" $((secs + 150)) |
        sed 's/^/  [kclient2] /'
    rc=${PIPESTATUS[0]}
    check "kernel 2 -> kernel 1: 8 in flight for ${secs} s" eq "$rc" 0
    for i in 1 2; do
        hx_vm "$i" "echo '-- /tmp/ks.log:'; tail -n 5 /tmp/ks.log; dmesg | grep -i -A3 'oops\|bug\|panic\|killed' | head -n 20" 60 | sed "s/^/  [vm$i] /"
    done
}

case $group in
    k2k | sizes | sched | loss | end_of_life | soak | k2k_soak) ;;
    *)
        echo "hx-test.sh: unknown group $group" >&2
        exit 2
        ;;
esac
echo "== interop group $group (kernel $HX_KVER, module $HOMA_MODULE_SRC)"
t0=$SECONDS
if ! "group_$group"; then
    fail "group $group could not run to the end"
fi
if [[ -n ${HX_KEEP:-} ]]; then
    echo "hx-test.sh: logs and captures kept in $HX_TMP"
fi
echo "== interop group $group: $FAILS failed check(s), $((SECONDS - t0)) s"
((FAILS == 0))
