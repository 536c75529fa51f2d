#!/usr/bin/env bash
# GPU check of libnccl-net-homa: two ranks on one GPU, made to look like
# two hosts (different NCCL_HOSTID, no P2P/SHM) so that NCCL moves the data
# through its network plugin; an allreduce from 4 KB to 256 MB through the
# Homa plugin, then through NCCL's own socket transport (NCCL_NET=Socket).
#
#   bash nccl/gpu_check.sh [BUILD_DIR]        (default: build)
#
# Needs an NVIDIA GPU and PyTorch with NCCL.  Where there is none it says
# "no GPU" and exits 0, so CI can call it anywhere.
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
BUILD=${1:-$ROOT/build}
PY=${PYTHON:-python3}

if ! command -v nvidia-smi >/dev/null 2>&1 ||
    ! "$PY" -c 'import sys, torch; sys.exit(0 if torch.cuda.is_available() and torch.distributed.is_nccl_available() else 1)' 2>/dev/null; then
    echo "no GPU (or no PyTorch with CUDA and NCCL): nothing to check"
    exit 0
fi
PLUGIN=$BUILD/nccl/libnccl-net-homa.so
if [[ ! -f $PLUGIN ]]; then
    echo "gpu_check: $PLUGIN not built" >&2
    exit 1
fi

WORK=$(mktemp -d)
trap 'rm -rf "$WORK"' EXIT
cat >"$WORK/allreduce.py" <<'PYEOF'
import os, sys, time, torch, torch.distributed as dist
rank = int(os.environ["RANK"]); world = int(os.environ["WORLD_SIZE"])
os.environ["NCCL_HOSTID"] = "homa-gpu-check-%d" % rank
torch.cuda.set_device(0)
dist.init_process_group("nccl", rank=rank, world_size=world)
size = 4096
while size <= 256 << 20:
    x = torch.ones(size // 4, device="cuda")
    for _ in range(3):
        dist.all_reduce(x)
    torch.cuda.synchronize()
    reps = 20 if size <= 16 << 20 else 5
    x.fill_(rank + 1)
    times = []
    for _ in range(reps):
        dist.barrier(); torch.cuda.synchronize()
        t0 = time.perf_counter()
        dist.all_reduce(x)
        torch.cuda.synchronize()
        times.append(time.perf_counter() - t0)
        x.fill_(rank + 1)
    dist.all_reduce(x); torch.cuda.synchronize()
    ok = bool(torch.all(x == world * (world + 1) / 2))
    times.sort(); t = times[len(times) // 2]
    bus = size / t / 1e9 * 2 * (world - 1) / world
    if rank == 0:
        print("%-6s %10d B  %9.1f us  busbw %7.3f GB/s  %s" %
              (os.environ.get("CHECK_NET", "?"), size, t * 1e6, bus, "ok" if ok else "WRONG"),
              flush=True)
    if not ok:
        sys.exit(1)
    size *= 4
dist.destroy_process_group()
PYEOF

run() { # label, then env assignments
    local label=$1
    shift
    local port=$((29500 + RANDOM % 1000)) pids=() rc=0 r
    for r in 0 1; do
        env "$@" CHECK_NET="$label" RANK=$r WORLD_SIZE=2 MASTER_ADDR=127.0.0.1 MASTER_PORT=$port \
            NCCL_P2P_DISABLE=1 NCCL_SHM_DISABLE=1 NCCL_DEBUG=${NCCL_DEBUG:-WARN} \
            NCCL_DEBUG_SUBSYS=INIT,NET "$PY" "$WORK/allreduce.py" >"$WORK/$label.$r.log" 2>&1 &
        pids+=($!)
    done
    for r in "${pids[@]}"; do wait "$r" || rc=1; done
    grep -v '^\s*$' "$WORK/$label.0.log" | grep -E ' B  |NET/|Error|error' || true
    if [[ $rc -ne 0 ]]; then
        echo "gpu_check: $label run failed; rank logs:" >&2
        tail -n 30 "$WORK/$label".*.log >&2
    fi
    return $rc
}

echo "== Homa plugin ($PLUGIN)"
run homa LD_LIBRARY_PATH="$BUILD/nccl:${LD_LIBRARY_PATH:-}" NCCL_NET_PLUGIN=homa NCCL_NET=Homa \
    NCCL_HOMA_ADDRS=127.0.0.1 NCCL_DEBUG=INFO
echo "== NCCL socket transport"
run socket NCCL_NET=Socket NCCL_SOCKET_IFNAME=lo
