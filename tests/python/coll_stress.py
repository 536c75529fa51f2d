#!/usr/bin/python3
"""Stress test of the collectives: many small and medium allreduces, repeated.

    PYTHONPATH=build-py/python /usr/bin/python3 tests/python/coll_stress.py \
        [--ranks 5] [--rounds 40] [--timeout-ms 5000] [--faults drop=0.01]

Ranks are threads of this process, each with its own homa.Runtime (engine,
UDP sockets, background thread), talking over loopback.  Every round makes
new communicators and runs 100 allreduces (every dtype and op; 0, 1, 7,
1,001 and 40,009 elements: both the recursive-doubling and the ring
algorithm).  A round that fails (a stall ends in homa.TimeoutError after
--timeout-ms) is reported with the call each rank was in and the engine
counters that say something about loss recovery.  Run two copies at once
to add CPU contention.  Exit status 1 if any round failed.
"""
import argparse
import sys
import threading
import time

import numpy as np

import homa

DTYPES = [np.float32, np.float16, np.int32, np.int64]
OPS = ["sum", "avg", "max", "min"]
SIZES = [0, 1, 7, 1001, 40_009]
SHOW = ["resend_in", "resend_out", "retransmit_pkts", "client_timeouts", "server_timeouts",
        "busy_in", "rpcs_live", "drop_no_rpc", "drop_no_memory", "fault_drops", "send_errors"]


def one_round(args, rnd):
    config = {"timeout_ticks": args.timeout_ticks} if args.timeout_ticks else None
    rts = [homa.Runtime(faults=args.faults.format(rank=r, round=rnd) if args.faults else None,
                        config=config) for r in range(args.ranks)]
    socks = [homa.Socket(bind="127.0.0.1", runtime=rt) for rt in rts]
    eps = [s.endpoint for s in socks]
    comms = [homa.Communicator(r, args.ranks, eps, socket=socks[r], own_socket=True,
                               timeout_ms=args.timeout_ms) for r in range(args.ranks)]
    cases = [(dt, op, n) for dt in DTYPES for op in OPS for n in SIZES]
    where = [None] * args.ranks
    errors = [None] * args.ranks

    def rank(r):
        try:
            for i, (dt, op, n) in enumerate(cases):
                where[r] = (i, np.dtype(dt).name, op, n)
                comms[r].allreduce(np.full(n, r + 1, dtype=dt), op=op)
            where[r] = "done"
        except Exception as e:  # reported below
            errors[r] = e

    t0 = time.monotonic()
    threads = [threading.Thread(target=rank, args=(r,)) for r in range(args.ranks)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    failed = any(errors)
    if failed:
        print(f"round {rnd}: FAILED after {time.monotonic() - t0:.1f} s")
        for r in range(args.ranks):
            c = rts[r].counters()
            info = " ".join(f"{k}={c[k]}" for k in SHOW if c.get(k))
            print(f"  rank {r}: at {where[r]}: {errors[r]!r}\n          {info}")
    for c in comms:
        c.close()
    for rt in rts:
        rt.close()
    return not failed


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--ranks", type=int, default=5)
    ap.add_argument("--rounds", type=int, default=40)
    ap.add_argument("--timeout-ms", type=int, default=5000)
    ap.add_argument("--timeout-ticks", type=int,
                    help="engine RPC timeout in 1 ms ticks (libhoma default 100)")
    ap.add_argument("--faults", help="fault spec per runtime; {rank} and {round} are replaced")
    args = ap.parse_args()
    ok = sum(one_round(args, r) for r in range(args.rounds))
    print(f"{ok} of {args.rounds} rounds passed ({args.ranks} ranks, 100 allreduces each)")
    return 0 if ok == args.rounds else 1


if __name__ == "__main__":
    sys.exit(main())
