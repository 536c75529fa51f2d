#!/usr/bin/python3
"""Allreduce latency and bus bandwidth: Homa (homa.Communicator) vs torch.distributed gloo.

    PYTHONPATH=build-py/python /usr/bin/python3 bench/python/allreduce_bench.py \
        --ranks 4 [--sizes 4K,64K,1M,16M,64M] [--json out.json]

Starts --ranks worker processes on this machine (loopback), or, when RANK /
WORLD_SIZE / MASTER_ADDR / MASTER_PORT are set (torchrun, or one process per
host by hand), runs as one of the workers.  For every size (bytes of
float32), each backend runs a few warm-up calls and then `iters` timed
allreduces (sum, in place); before each timed call the ranks meet in a
barrier of the same backend, and rank 0's time for the call is recorded.
Reported: median and p99 latency, and bus bandwidth = 2 (n-1)/n * bytes /
median time (the NCCL-tests definition: what each rank's link carries).

Not a test: numbers depend on the machine, and on loopback every byte costs
CPU time on both ends (on a 2-core machine 4 ranks share 2 cores).
"""
import argparse
import datetime
import json
import os
import statistics
import subprocess
import sys
import time

from benchutil import free_port, percentile

import numpy as np


def parse_size(s):
    s = s.strip().upper()
    mult = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30}.get(s[-1:], 1)
    return int(float(s[:-1] if s[-1:] in "KMG" else s) * mult)


def fmt_size(n):
    for unit, div in (("MB", 1 << 20), ("KB", 1 << 10)):
        if n >= div and n % div == 0:
            return f"{n // div} {unit}"
    return f"{n} B"


def iters_for(size, scale):
    # Fewer calls for big sizes (64 MB: 12) but enough for a p99 of small ones.
    return max(10, min(300, int(scale * 200 * (262144 / size) ** 0.5)))


def worker(args):
    rank, world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    import torch
    import torch.distributed as dist

    torch.set_num_threads(1)
    dist.init_process_group("gloo", rank=rank, world_size=world,
                            timeout=datetime.timedelta(seconds=600))
    results = {}
    backends = [b for b in args.backends.split(",") if b]
    comm = None
    if "homa" in backends:
        import homa

        rt = homa.Runtime(config={"timeout_ticks": args.rpc_timeout_ms})
        comm = homa.Communicator.from_store(dist.distributed_c10d._get_default_store(), rank,
                                            world, host=args.host, key="bench",
                                            timeout_ms=120000, runtime=rt)
    for size in [parse_size(s) for s in args.sizes.split(",")]:
        n = size // 4
        arr = np.ones(n, dtype=np.float32)
        ten = torch.from_numpy(arr)
        iters = iters_for(size, args.scale)
        for backend in backends:
            if backend == "homa":
                def op():
                    comm.allreduce(arr)
                barrier = comm.barrier
            else:
                def op():
                    dist.all_reduce(ten)
                barrier = dist.barrier
            for _ in range(args.warmup):
                barrier()
                op()
            lat = []
            for _ in range(iters):
                barrier()
                t0 = time.perf_counter()
                op()
                lat.append(time.perf_counter() - t0)
            # Values grow by world each call: reset so floats stay finite.
            arr.fill(1.0)
            med = statistics.median(lat)
            results.setdefault(str(size), {})[backend] = {
                "iters": iters,
                "median_us": med * 1e6,
                "p99_us": percentile(lat, 99) * 1e6,
                "busbw_GBps": 2 * (world - 1) / world * size / med / 1e9,
            }
        if rank == 0:
            r = results[str(size)]
            print(f"  {fmt_size(size):>7}: " + ", ".join(
                f"{b} {r[b]['median_us']:.0f} us" for b in backends), file=sys.stderr, flush=True)
    if comm is not None:
        comm.close()
        rt.close()
    dist.barrier()
    dist.destroy_process_group()
    if rank == 0:
        if args.result:  # started by launch(): it prints the table
            with open(args.result, "w") as f:
                json.dump(results, f)
        else:  # started by torchrun or by hand
            report(results, args, world)


def launch(args):
    port = free_port()
    tmp = f"/tmp/homa-allreduce-bench-{os.getpid()}.json"
    env = dict(os.environ, WORLD_SIZE=str(args.ranks), MASTER_ADDR="127.0.0.1",
               MASTER_PORT=str(port), OMP_NUM_THREADS="1")
    cmd = [sys.executable, os.path.abspath(__file__), "--worker", "--sizes", args.sizes,
           "--warmup", str(args.warmup), "--scale", str(args.scale), "--backends",
           args.backends, "--rpc-timeout-ms", str(args.rpc_timeout_ms), "--host", args.host,
           "--result", tmp]
    print(f"allreduce benchmark: {args.ranks} ranks on loopback, float32 sum, "
          f"backends {args.backends}", file=sys.stderr)
    procs = [subprocess.Popen(cmd, env=dict(env, RANK=str(r))) for r in range(args.ranks)]
    rc = [p.wait() for p in procs]
    if any(rc):
        sys.exit(f"a worker failed: exit codes {rc}")
    with open(tmp) as f:
        results = json.load(f)
    os.unlink(tmp)
    report(results, args, args.ranks)


def report(results, args, world):
    backends = args.backends.split(",")
    print()
    head = f"{'size':>8} |" + "|".join(
        f" {b + ' median':>12} {b + ' p99':>10} {'busbw':>9} " for b in backends)
    if len(backends) == 2:
        head += f"| {backends[1] + '/' + backends[0]:>10}"
    print(head)
    print("-" * len(head))
    for size in sorted(results, key=int):
        r = results[size]
        line = f"{fmt_size(int(size)):>8} |" + "|".join(
            f" {r[b]['median_us']:>9.0f} us {r[b]['p99_us']:>7.0f} us "
            f"{r[b]['busbw_GBps']:>5.2f} GB/s " for b in backends)
        if len(backends) == 2:
            line += f"| {r[backends[1]]['median_us'] / r[backends[0]]['median_us']:>9.2f}x"
        print(line)
    if args.json:
        meta = {"ranks": world, "dtype": "float32", "op": "sum", "cpus": os.cpu_count(),
                "loadavg": os.getloadavg(), "results": results}
        with open(args.json, "w") as f:
            json.dump(meta, f, indent=1)
        print(f"\nJSON: {args.json}")


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--ranks", type=int, default=4)
    ap.add_argument("--sizes", default="4K,16K,64K,256K,1M,4M,16M,64M",
                    help="comma-separated byte counts (K, M suffixes)")
    ap.add_argument("--backends", default="homa,gloo", help="homa,gloo or one of them")
    ap.add_argument("--warmup", type=int, default=3)
    ap.add_argument("--scale", type=float, default=1.0, help="multiply the iteration counts")
    ap.add_argument("--rpc-timeout-ms", type=int, default=1000,
                    help="libhoma RPC timeout (engine timeout_ticks of 1 ms; libhoma's default "
                         "100 ms is too short when ranks share few, busy cores)")
    ap.add_argument("--host", default="127.0.0.1",
                    help="address this rank's Homa socket binds (reachable by the others)")
    ap.add_argument("--json", help="also write the results here")
    ap.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--result", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.worker or ("RANK" in os.environ and "WORLD_SIZE" in os.environ):
        worker(args)
    else:
        launch(args)


if __name__ == "__main__":
    main()
