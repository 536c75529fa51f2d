"""One rank of a multi-process collective test (run by test_coll.py).

    coll_worker.py check PATH RANK SIZE   allreduce/allgather/broadcast, checked
    coll_worker.py die   PATH RANK SIZE   the last rank kills itself after a
                                          barrier; the others must time out
"""
import os
import signal
import sys
import time

import numpy as np

import homa


def main():
    mode, path, rank, size = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
    timeout_ms = 1500 if mode == "die" else 20000
    # A 1 s RPC timeout instead of 100 ms: the test machine may be busy (the
    # fault spec still comes from HOMA_FAULTS).  The dead rank is found by
    # the collectives' timeout_ms either way.
    rt = homa.Runtime(config={"timeout_ticks": 1000})
    comm = homa.Communicator.from_file(path, rank, size, timeout_ms=timeout_ms, runtime=rt)
    if mode == "check":
        for n in (1, 1000, 300_007):
            a = np.arange(n, dtype=np.float32) * (rank + 1)
            comm.allreduce(a)
            want = np.arange(n, dtype=np.float32) * (size * (size + 1) // 2)
            assert np.array_equal(a, want), f"allreduce {n}"
        g = np.zeros(size * 100, dtype=np.int64)
        comm.allgather(np.full(100, rank, dtype=np.int64), g)
        assert np.array_equal(g, np.repeat(np.arange(size), 100)), "allgather"
        b = np.full(10, rank, dtype=np.int32)
        comm.broadcast(b, root=size - 1)
        assert np.all(b == size - 1), "broadcast"
        comm.barrier()
        drops = rt.counters()["fault_drops"]
        print(f"rank {rank}: ok drops={drops}")
        # No pause before closing: homa_comm_destroy() keeps the socket open
        # until our replies are acknowledged (bounded), so a peer whose last
        # response from us was lost still gets it.
    else:
        comm.allreduce(np.ones(1000, np.float32))
        comm.barrier()
        if rank == size - 1:
            time.sleep(0.2)
            os.kill(os.getpid(), signal.SIGKILL)
        time.sleep(0.5)
        t0 = time.monotonic()
        try:
            comm.allreduce(np.ones(100_000, np.float32))
        except (homa.TimeoutError, homa.UnreachableError) as e:
            # Timeout, or at once: the dead rank's port answers with ICMP
            # port unreachable.
            took = time.monotonic() - t0
            print(f"rank {rank}: failed after {took:.2f} s: {e}")
            assert took < 10 * timeout_ms / 1000, took
        else:
            print(f"rank {rank}: no error although a rank died")
            return 1
    comm.close()
    rt.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
