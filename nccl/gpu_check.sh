#!/usr/bin/env bash
# GPU check of libnccl-net-homa: two ranks on one GPU, made to look like
# two hosts (different NCCL_HOSTID, no P2P/SHM) so that NCCL moves the data
# through its network plugin; an allreduce from 4 KB to 256 MB through the
# Homa plugin, then through NCCL's own socket transport (NCCL_NET=Socket).
#
#   bash nccl/gpu_check.sh [BUILD_DIR]        (default: build)
#
# Then the staged homa.torch path on CUDA tensors: homa.torch.all_reduce
# against NCCL's allreduce (4 KB to 256 MB), and DDP training of a model on
# the GPU with the Homa hook against DDP's own NCCL allreduce.
#
# Needs an NVIDIA GPU and PyTorch with NCCL (and the homa Python package:
# PYTHONPATH=BUILD/python is set here).  Where there is none it says
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

cat >"$WORK/staged.py" <<'PYEOF'
import os, sys, time, torch, torch.distributed as dist, torch.nn as nn
from torch.nn.parallel import DistributedDataParallel as DDP
import homa, homa.torch
rank = int(os.environ["RANK"]); world = int(os.environ["WORLD_SIZE"])
os.environ["NCCL_HOSTID"] = "homa-gpu-check-%d" % rank
torch.cuda.set_device(0)
dist.init_process_group("nccl", rank=rank, world_size=world)
rt = homa.Runtime()
st = homa.torch.state(runtime=rt, timeout_ms=60000)
comm, stage = st.comm, homa.torch.Staging()
bad = 0
size = 4096
while size <= 256 << 20:
    x = torch.randn(size // 4, device="cuda", generator=torch.Generator("cuda").manual_seed(rank + size))
    ref = x.clone()
    dist.all_reduce(ref); torch.cuda.synchronize()
    times = []
    for _ in range(5 if size <= 16 << 20 else 2):
        y = x.clone(); torch.cuda.synchronize(); dist.barrier()
        t0 = time.perf_counter()
        homa.torch.all_reduce(comm, y, staging=stage)
        times.append(time.perf_counter() - t0)
    ok = torch.allclose(y, ref, rtol=1e-5, atol=1e-5)
    bad += not ok
    times.sort()
    if rank == 0:
        print("staged %10d B  %9.1f us  %s" % (size, times[len(times) // 2] * 1e6, "ok" if ok else "WRONG"), flush=True)
    size *= 4

def train(hook):
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(256, 2048), nn.ReLU(), nn.Linear(2048, 2048), nn.ReLU(), nn.Linear(2048, 1)).cuda()
    ddp = DDP(model, device_ids=[0], bucket_cap_mb=4)
    if hook:
        ddp.register_comm_hook(st, homa.torch.allreduce_hook)
    opt = torch.optim.SGD(ddp.parameters(), lr=0.01)
    gen = torch.Generator("cuda").manual_seed(7 + rank)
    torch.cuda.synchronize(); t0 = time.perf_counter()
    for _ in range(30):
        x = torch.randn(64, 256, device="cuda", generator=gen)
        opt.zero_grad(); ddp(x).square().mean().backward(); opt.step()
    torch.cuda.synchronize()
    return [p.detach().clone() for p in model.parameters()], (time.perf_counter() - t0) / 30

p_homa, t_homa = train(True)
p_nccl, t_nccl = train(False)
same = all(torch.allclose(a, b, rtol=1e-4, atol=1e-5) for a, b in zip(p_homa, p_nccl))
bad += not same
if rank == 0:
    print("ddp    homa hook %.1f ms/step, nccl %.1f ms/step, parameters %s" %
          (t_homa * 1e3, t_nccl * 1e3, "match" if same else "DIFFER"), flush=True)
st.close(); rt.close()
dist.destroy_process_group()
sys.exit(1 if bad else 0)
PYEOF
echo "== homa.torch staged through host memory (CUDA tensors), DDP hook vs NCCL"
srun() {
    local port=$((29500 + RANDOM % 1000)) pids=() rc=0 r
    for r in 0 1; do
        env PYTHONPATH="$BUILD/python:${PYTHONPATH:-}" RANK=$r WORLD_SIZE=2 MASTER_ADDR=127.0.0.1 \
            MASTER_PORT=$port NCCL_P2P_DISABLE=1 NCCL_SHM_DISABLE=1 NCCL_NET=Socket NCCL_SOCKET_IFNAME=lo \
            "$PY" "$WORK/staged.py" >"$WORK/staged.$r.log" 2>&1 &
        pids+=($!)
    done
    for r in "${pids[@]}"; do wait "$r" || rc=1; done
    grep -E '^(staged|ddp) ' "$WORK/staged.0.log" || true
    if [[ $rc -ne 0 ]]; then
        echo "gpu_check: staged run failed; rank logs:" >&2
        tail -n 30 "$WORK"/staged.*.log >&2
    fi
    return $rc
}
srun
