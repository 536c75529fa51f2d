#!/usr/bin/python3
"""DDP training step time: the Homa comm hook vs DDP's default gloo allreduce.

    PYTHONPATH=build-py/python /usr/bin/python3 bench/python/ddp_bench.py \
        --ranks 4 [--model mlp|cnn] [--steps 60] [--background w4 --gbps 0.5] [--json out.json]

Starts --ranks worker processes on this machine (loopback).  Each trains the
same model on synthetic data (a fixed random batch per rank) with
DistributedDataParallel, first with gloo's allreduce and then with
homa.torch.allreduce_hook (order alternated by --order), and records rank 0's
wall time per training step (forward, backward with the gradient
allreduces, optimizer step) after --warmup steps.

--background W: also measure every configuration while competing RPC traffic
runs: `homa-perf server` and `homa-perf client --test workload --workload W
--gbps G` (--bg-proto homa or tcp) on loopback, started before and stopped
after each measurement.  The table then has rows without and with it.

On the cluster in a box (docs/cluster.md) run one worker per emulated host
instead, with torchrun or by hand (see docs/python.md).

Not a test: the numbers depend on the machine; on loopback all ranks share
its cores.
"""
import argparse
import datetime
import glob
import json
import os
import re
import statistics
import subprocess
import sys
import time

from benchutil import free_port, percentile

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))


def make_model(kind):
    import torch.nn as nn

    if kind == "mlp":  # 3.2 M parameters: 12.6 MB of float32 gradients per step
        return nn.Sequential(nn.Flatten(), nn.Linear(3 * 32 * 32, 512), nn.ReLU(),
                             nn.Linear(512, 1024), nn.ReLU(), nn.Linear(1024, 1024), nn.ReLU(),
                             nn.Linear(1024, 10))
    # A small CIFAR-style CNN: 0.6 M parameters, more compute per byte.
    return nn.Sequential(
        nn.Conv2d(3, 32, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2),
        nn.Conv2d(32, 64, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2),
        nn.Conv2d(64, 128, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2),
        nn.Flatten(), nn.Linear(128 * 4 * 4, 256), nn.ReLU(), nn.Linear(256, 10))


def worker(args):
    import torch
    import torch.distributed as dist
    import torch.nn as nn
    from torch.nn.parallel import DistributedDataParallel as DDP

    rank, world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    torch.set_num_threads(1)
    dist.init_process_group("gloo", rank=rank, world_size=world,
                            timeout=datetime.timedelta(seconds=600))
    import homa.torch

    gen = torch.Generator().manual_seed(rank)
    x = torch.randn(args.batch, 3, 32, 32, generator=gen)
    y = torch.randint(0, 10, (args.batch,), generator=gen)
    results = {}
    for backend in args.backends.split(","):
        torch.manual_seed(0)
        model = DDP(make_model(args.model), bucket_cap_mb=args.bucket_mb)
        state = None
        if backend == "homa":
            cfg = dict((k, int(v)) for k, v in
                       (kv.split("=", 1) for kv in args.homa_config.split(",") if kv))
            tick_ms = cfg.get("tick_ns", 1000000) / 1e6
            cfg["timeout_ticks"] = max(1, int(args.rpc_timeout_ms / tick_ms))
            rt = homa.Runtime(config=cfg, link_bps=args.link_bps)
            state = homa.torch.state(host=args.host, key=f"ddp-bench/{args.tag}",
                                     timeout_ms=120000, runtime=rt, sched_class=args.sched_class)
            model.register_comm_hook(state, homa.torch.allreduce_hook)
        opt = torch.optim.SGD(model.parameters(), lr=0.01)
        times, comm = [], []
        dist.barrier()
        for step in range(args.warmup + args.steps):
            t0 = time.perf_counter()
            c0 = state.comm_seconds if state is not None else 0.0
            opt.zero_grad()
            nn.functional.cross_entropy(model(x), y).backward()
            opt.step()
            if step >= args.warmup:
                times.append(time.perf_counter() - t0)
                if state is not None:
                    comm.append(state.comm_seconds - c0)
            if rank == 0:  # progress, so a stalled configuration shows where it is
                print(f"{backend} step {step}: {(time.perf_counter() - t0) * 1e3:.0f} ms",
                      file=sys.stderr, flush=True)
        dist.barrier()
        results[backend] = {
            "median_ms": statistics.median(times) * 1e3,
            "p99_ms": percentile(times, 99) * 1e3,
            "steps": len(times),
        }
        if state is not None:
            # time inside the hook's allreduce calls per step (rank 0), and
            # the engine counters that say whether packets were lost
            results[backend]["comm_median_ms"] = statistics.median(comm) * 1e3
            results[backend]["counters"] = rt.counters()
            state.close()
            rt.close()
    dist.destroy_process_group()
    if rank == 0:
        with open(args.result, "w") as f:
            json.dump(results, f)


def find_homa_perf(path):
    if path:
        return path
    for cand in sorted(glob.glob(os.path.join(ROOT, "build*", "tools", "homa-perf"))):
        if os.access(cand, os.X_OK):
            return cand
    sys.exit("homa-perf not found: build it (cmake --build <dir> --target homa-perf) "
             "or pass --homa-perf PATH")


class Background:
    """A homa-perf echo server and a workload client on loopback."""

    def __init__(self, exe, workload, gbps, proto):
        self.server = subprocess.Popen([exe, "server", "--proto", proto, "--port", "0"],
                                       stdout=subprocess.PIPE, text=True)
        line = self.server.stdout.readline()
        m = re.search(r"port (\d+)", line)
        if not m:
            self.server.kill()
            sys.exit(f"homa-perf server: unexpected first line {line!r}")
        self.client = subprocess.Popen(
            [exe, "client", "--proto", proto, "--server", f"127.0.0.1:{m.group(1)}", "--test",
             "workload", "--workload", workload, "--gbps", str(gbps), "--seconds", "100000",
             "--json"], stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
        time.sleep(1.0)  # let the load settle

    def stop(self):
        for p in (self.client, self.server):
            p.terminate()
        for p in (self.client, self.server):
            try:
                p.wait(10)
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait()


def run_once(args, tag):
    port = free_port()
    tmp = f"/tmp/homa-ddp-bench-{os.getpid()}.json"
    env = dict(os.environ, WORLD_SIZE=str(args.ranks), MASTER_ADDR="127.0.0.1",
               MASTER_PORT=str(port), OMP_NUM_THREADS="1")
    cmd = [sys.executable, os.path.abspath(__file__), "--worker", "--model", args.model,
           "--steps", str(args.steps), "--warmup", str(args.warmup), "--batch", str(args.batch),
           "--bucket-mb", str(args.bucket_mb), "--backends", args.backends, "--host", args.host,
           "--rpc-timeout-ms", str(args.rpc_timeout_ms), "--homa-config", args.homa_config,
           "--link-bps", str(args.link_bps), "--tag", tag, "--result", tmp]
    procs = [subprocess.Popen(cmd, env=dict(env, RANK=str(r))) for r in range(args.ranks)]
    rc = [p.wait() for p in procs]
    if any(rc):
        sys.exit(f"a worker failed: exit codes {rc}")
    with open(tmp) as f:
        res = json.load(f)
    os.unlink(tmp)
    return res


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--ranks", type=int, default=4)
    ap.add_argument("--model", choices=["mlp", "cnn"], default="mlp")
    ap.add_argument("--steps", type=int, default=60)
    ap.add_argument("--warmup", type=int, default=5)
    ap.add_argument("--batch", type=int, default=32)
    ap.add_argument("--bucket-mb", type=float, default=25.0, help="DDP bucket_cap_mb")
    ap.add_argument("--backends", default="gloo,homa")
    ap.add_argument("--rpc-timeout-ms", type=int, default=1000,
                    help="libhoma RPC timeout (engine timeout_ticks of 1 ms; libhoma's default "
                         "100 ms is too short when ranks share few, busy cores)")
    ap.add_argument("--host", default="127.0.0.1")
    ap.add_argument("--homa-config", default="",
                    help="engine settings for the ranks' runtime, e.g. "
                         "unsched_bytes=2832,grant_window=2832,tick_ns=5000000")
    ap.add_argument("--link-bps", type=int, default=0,
                    help="pacer rate of the ranks' runtime in bit/s (0 = no pacing)")
    ap.add_argument("--sched-class", type=int, default=None,
                    help="scheduling class (0-3) of the Homa hook's socket (Socket.set_class)")
    ap.add_argument("--background", metavar="WORKLOAD",
                    help="also run with competing homa-perf traffic of this workload (e.g. w4)")
    ap.add_argument("--gbps", type=float, default=0.5, help="background offered load")
    ap.add_argument("--bg-proto", choices=["homa", "tcp"], default="homa")
    ap.add_argument("--homa-perf", help="path of homa-perf (default: build*/tools/homa-perf)")
    ap.add_argument("--json", help="also write the results here")
    ap.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--tag", default="0", help=argparse.SUPPRESS)
    ap.add_argument("--result", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.worker:
        worker(args)
        return
    rows = []
    print(f"DDP benchmark: {args.ranks} ranks on loopback, model {args.model}, batch {args.batch}, "
          f"{args.steps} timed steps", file=sys.stderr)
    rows.append(("none", run_once(args, "idle")))
    if args.background:
        exe = find_homa_perf(args.homa_perf)
        bg_name = f"{args.background} {args.bg_proto} {args.gbps:g} Gb/s"
        bg = Background(exe, args.background, args.gbps, args.bg_proto)
        try:
            rows.append((bg_name, run_once(args, "bg")))
        finally:
            bg.stop()
    backends = args.backends.split(",")
    print()
    head = f"{'background':>22} | {'backend':>7} | {'median ms/step':>14} | {'p99 ms/step':>11}"
    print(head)
    print("-" * len(head))
    for name, res in rows:
        for b in backends:
            print(f"{name:>22} | {b:>7} | {res[b]['median_ms']:>14.1f} | {res[b]['p99_ms']:>11.1f}")
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"ranks": args.ranks, "model": args.model, "batch": args.batch,
                       "steps": args.steps, "cpus": os.cpu_count(),
                       "rows": [{"background": n, **r} for n, r in rows]}, f, indent=1)
        print(f"\nJSON: {args.json}")


if __name__ == "__main__":
    main()
