"""homa.Communicator: collectives on numpy arrays, rendezvous, loss and failures."""
import os
import subprocess
import sys
import threading
import time

import numpy as np
import pytest

import homa
from conftest import RT_CONFIG, DictStore, run_ranks

HERE = os.path.dirname(os.path.abspath(__file__))
DTYPES = ["float32", "float16", "bfloat16", "int32", "int64"]
OPS = ["sum", "avg", "max", "min"]
# 0, 1, not divisible by any rank count 2..5, and one above small_bytes (64 KiB)
# for every dtype so the ring algorithm runs too.
SIZES = [0, 1, 7, 1001, 40_009]


# bfloat16 is the high half of a float32; numpy holds it as uint16.
def to_bf16(a):
    return (np.asarray(a, dtype=np.float32).view(np.uint32) >> 16).astype(np.uint16)


def from_bf16(a):
    return (a.astype(np.uint32) << 16).view(np.float32)


def values(rank, n, dtype, seed=0):
    """Rank-dependent exact values: small integers for the float types, so
    sums, maxima and minima are exact in every precision."""
    rng = np.random.default_rng(seed * 7919 + rank * 131 + n)
    if dtype == "int64":
        return rng.integers(-(2**40), 2**40, n, dtype=np.int64)
    if dtype == "int32":
        return rng.integers(-(2**20), 2**20, n, dtype=np.int32)
    return rng.integers(-16, 16, n).astype(np.float64)


def storage(vals, dtype):
    """The array handed to homa (numpy dtype; bfloat16 as uint16)."""
    if dtype == "bfloat16":
        return to_bf16(vals)
    return np.array(vals, dtype={"float32": np.float32, "float16": np.float16}.get(dtype, dtype))


def as_f64(arr, dtype):
    return from_bf16(arr).astype(np.float64) if dtype == "bfloat16" else arr.astype(np.float64)


def reference(op, rows, dtype, nranks):
    stack = np.stack([np.asarray(r, dtype=np.float64) for r in rows]) if rows[0].size else None
    if stack is None:
        return np.zeros(0)
    if op == "sum":
        return stack.sum(0)
    if op == "max":
        return stack.max(0)
    if op == "min":
        return stack.min(0)
    avg = stack.sum(0) / nranks
    return np.trunc(avg) if dtype.startswith("int") else avg


def check(got, want, dtype, op):
    g = as_f64(got, dtype)
    if op == "avg" and not dtype.startswith("int"):
        # One rounding of the float32 result to the storage type.
        rtol = {"float32": 1e-6, "float16": 2**-10, "bfloat16": 2**-7}[dtype]
        np.testing.assert_allclose(g, want, rtol=rtol, atol=1e-6)
    else:
        np.testing.assert_array_equal(g, want)


def ddt(dtype):
    return "bfloat16" if dtype == "bfloat16" else None


@pytest.mark.parametrize("nranks", [2, 3, 4, 5])
def test_allreduce_all_ops_dtypes_sizes(ranks, nranks):
    comms = ranks(nranks)
    cases = [(dt, op, n) for dt in DTYPES for op in OPS for n in SIZES]
    if nranks != 3:  # the full matrix once; the other rank counts a cross-section
        cases = [c for i, c in enumerate(cases) if i % 5 == nranks % 5 or c[2] in (0, 7)]

    def rank_fn(comm):
        out = []
        for i, (dt, op, n) in enumerate(cases):
            a = storage(values(comm.rank, n, dt, seed=i), dt)
            if i % 2:
                res = comm.allreduce(a, op=op, dtype=ddt(dt))
                assert res is a
            else:  # out of place: the input must stay untouched
                before = a.copy()
                res = np.empty_like(a)
                assert comm.allreduce(a, op=op, out=res, dtype=ddt(dt)) is res
                assert np.array_equal(a, before)
            out.append(res)
        return out

    results = run_ranks(comms, rank_fn)
    for i, (dt, op, n) in enumerate(cases):
        want = reference(op, [values(r, n, dt, seed=i) for r in range(nranks)], dt, nranks)
        for r in range(nranks):
            check(results[r][i], want, dt, op)


@pytest.mark.parametrize("nranks", [2, 3, 5])
def test_broadcast_allgather_reduce_scatter(ranks, nranks):
    comms = ranks(nranks)
    sizes = [0, 1, 7, 20_011]

    def rank_fn(comm):
        r, out = comm.rank, {}
        for dt in DTYPES:
            for n in sizes:
                for root in range(nranks):
                    buf = storage(values(r, n, dt, seed=root), dt)
                    out["bc", dt, n, root] = comm.broadcast(buf, root=root, dtype=ddt(dt))
                send = storage(values(r, n, dt), dt)
                recv = np.zeros(n * nranks, dtype=send.dtype)
                out["ag", dt, n] = comm.allgather(send, recv, dtype=ddt(dt))
                # In place: sendbuf is this rank's block of recvbuf.
                recv2 = np.zeros(n * nranks, dtype=send.dtype)
                recv2[r * n:(r + 1) * n] = send
                comm.allgather(recv2[r * n:(r + 1) * n], recv2, dtype=ddt(dt))
                assert np.array_equal(recv2, recv)
                for op in ("sum", "max"):
                    big = storage(values(r, n * nranks, dt), dt)
                    part = np.empty(n, dtype=big.dtype)
                    out["rs", dt, n, op] = comm.reduce_scatter(big, part, op=op, dtype=ddt(dt))
        comm.barrier()
        return out

    results = run_ranks(comms, rank_fn)
    for dt in DTYPES:
        for n in sizes:
            for root in range(nranks):
                want = as_f64(storage(values(root, n, dt, seed=root), dt), dt)
                for r in range(nranks):
                    check(results[r]["bc", dt, n, root], want, dt, "sum")
            want = np.concatenate([as_f64(storage(values(q, n, dt), dt), dt) for q in range(nranks)])
            for r in range(nranks):
                check(results[r]["ag", dt, n], want, dt, "sum")
            for op in ("sum", "max"):
                full = reference(op, [values(q, n * nranks, dt) for q in range(nranks)], dt, nranks)
                for r in range(nranks):
                    check(results[r]["rs", dt, n, op], full[r * n:(r + 1) * n], dt, op)


def test_large_chunked_allreduce(ranks):
    comms = ranks(3)
    n = 3_000_017  # 12 MB of float32: many 1 MiB chunks

    def rank_fn(comm):
        a = np.full(n, comm.rank + 1, dtype=np.float32)
        a[::1000] = comm.rank
        return comm.allreduce(a)

    for res in run_ranks(comms, rank_fn):
        want = np.full(n, 6, dtype=np.float32)
        want[::1000] = 3
        np.testing.assert_array_equal(res, want)


def test_allreduce_under_loss(ranks):
    comms = ranks(3, faults="drop=0.05,seed={rank}7")

    def rank_fn(comm):
        out = []
        for i, n in enumerate([1000, 200_003]):
            a = storage(values(comm.rank, n, "float32", seed=i), "float32")
            out.append(comm.allreduce(a))
        g = np.zeros(3 * 5000, dtype=np.int64)
        comm.allgather(np.arange(5000, dtype=np.int64) * (comm.rank + 1), g)
        out.append(g)
        comm.barrier()
        return out

    results = run_ranks(comms, rank_fn)
    for i, n in enumerate([1000, 200_003]):
        want = reference("sum", [values(r, n, "float32", seed=i) for r in range(3)], "float32", 3)
        for r in range(3):
            check(results[r][i], want, "float32", "sum")
    want = np.concatenate([np.arange(5000) * (q + 1) for q in range(3)])
    for r in range(3):
        np.testing.assert_array_equal(results[r][2], want)
    assert sum(c.socket.runtime.counters()["fault_drops"] for c in comms) > 0


def test_from_store_and_bytes_buffers():
    store = DictStore()
    rts = [homa.Runtime(config=RT_CONFIG) for _ in range(3)]
    comms = [None] * 3

    def make(r):
        comms[r] = homa.Communicator.from_store(store, r, 3, runtime=rts[r], key="t",
                                                   store_timeout=30)

    threads = [threading.Thread(target=make, args=(r,)) for r in range(3)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    try:
        assert [c.rank for c in comms] == [0, 1, 2] and all(c.size == 3 for c in comms)
        assert "rank 1 of 3" in repr(comms[1])

        def fn(comm):
            # A bytearray with an explicit dtype, and a memoryview cast.
            b = bytearray(np.arange(4, dtype=np.int32).tobytes())
            comm.allreduce(b, dtype="int32")
            m = memoryview(bytearray(16)).cast("q")
            m[0], m[1] = comm.rank, -comm.rank
            comm.allreduce(m, op="max")
            return np.frombuffer(b, dtype=np.int32), list(m)

        for ints, m in run_ranks(comms, fn):
            assert list(ints) == [0, 3, 6, 9] and m == [2, 0]
    finally:
        for c in comms:
            c.close()
        for rt in rts:
            rt.close()


def test_argument_errors(ranks):
    c0, c1 = ranks(2)
    with pytest.raises(TypeError):
        c0.allreduce(np.zeros(4, dtype=np.float64))  # float64: not a Homa dtype
    with pytest.raises(TypeError):
        c0.allreduce(np.zeros(4, dtype=np.uint32))
    with pytest.raises(TypeError):
        c0.allreduce(b"\0" * 16, dtype="float32")  # read-only for an in-place call
    with pytest.raises(TypeError):
        c0.allreduce(object())
    with pytest.raises((ValueError, BufferError)):
        c0.allreduce(np.zeros((4, 4), dtype=np.float32)[:, 1])  # not contiguous
    with pytest.raises(ValueError):
        c0.allreduce(np.zeros(4, np.float32), out=np.zeros(5, np.float32))
    with pytest.raises(ValueError):
        c0.allreduce(np.zeros(4, np.float32), op="product")
    with pytest.raises(ValueError):
        c0.allreduce(np.zeros(4, np.float32), dtype="complex64")
    with pytest.raises(TypeError):
        c0.allreduce(np.zeros(4, np.float32), dtype="bfloat16")  # 4-byte items
    with pytest.raises(ValueError):
        c0.allreduce(bytearray(7), dtype="int32")  # not whole elements
    with pytest.raises(ValueError):
        c0.broadcast(np.zeros(4, np.float32), root=2)
    with pytest.raises(ValueError):
        c0.allgather(np.zeros(4, np.float32), np.zeros(7, np.float32))
    with pytest.raises(ValueError):
        c0.reduce_scatter(np.zeros(8, np.float32), np.zeros(8, np.float32))
    with pytest.raises(ValueError):
        homa.Communicator(2, 2, ["127.0.0.1:1", "127.0.0.1:2"])
    with pytest.raises(ValueError):
        homa.Communicator(0, 2, ["127.0.0.1:1"])
    with pytest.raises(homa.AddressError):
        homa.Communicator(0, 2, ["127.0.0.1:1", "nowhere.invalid:2"])
    # The communicator's socket is reserved for it.
    with pytest.raises(RuntimeError):
        c0.socket.send("127.0.0.1:1", b"")
    with pytest.raises(RuntimeError):
        c0.socket.close()
    with pytest.raises(RuntimeError):
        homa.Communicator(0, 2, [c0.endpoint, c1.endpoint], socket=c0.socket)
    # Nothing was sent: the pair still works.
    out = run_ranks([c0, c1], lambda c: c.allreduce(np.ones(3, np.float32)))
    assert all(list(o) == [2, 2, 2] for o in out)


def test_socket_reusable_after_close():
    with homa.Socket(bind="127.0.0.1") as s, homa.Socket(bind="127.0.0.1") as peer:
        comm = homa.Communicator(0, 2, [s.endpoint, peer.endpoint], socket=s)
        comm.close()
        assert comm.closed and not s.closed
        with pytest.raises(ValueError):
            comm.barrier()
        s.send(peer.endpoint, b"still mine")
        assert bytes(peer.recv(timeout=5)) == b"still mine"


def test_missing_rank_times_out(ranks):
    comms = ranks(3, timeout_ms=1000)
    live = comms[:2]  # rank 2 never joins

    def fn(comm):
        t0 = time.monotonic()
        with pytest.raises(homa.TimeoutError) as ei:
            comm.allreduce(np.ones(100_000, np.float32))
        assert ei.value.code == homa.ERR_TIMEOUT
        took = time.monotonic() - t0
        with pytest.raises(homa.StateError):  # broken from now on
            comm.barrier()
        return took

    for took in run_ranks(live, fn):
        assert took < 6.0, took


def test_from_file_processes_with_loss(tmp_path):
    """Real processes: file rendezvous, HOMA_FAULTS loss from the environment."""
    path = str(tmp_path / "rendezvous")
    env = dict(os.environ, HOMA_FAULTS="drop=0.05,seed=11")
    procs = [subprocess.Popen([sys.executable, os.path.join(HERE, "coll_worker.py"), "check",
                               path, str(r), "4"], env=env, stdout=subprocess.PIPE,
                              stderr=subprocess.STDOUT, text=True) for r in range(4)]
    outs = [p.communicate(timeout=120)[0] for p in procs]
    for r, (p, out) in enumerate(zip(procs, outs)):
        assert p.returncode == 0, f"rank {r}:\n{out}"
        assert "ok" in out and "drops" in out


def test_killed_rank_detected(tmp_path):
    """A rank killed mid-job: the survivors raise homa.TimeoutError within the timeout
    (or homa.UnreachableError at once, from ICMP port unreachable)."""
    path = str(tmp_path / "rendezvous")
    procs = [subprocess.Popen([sys.executable, os.path.join(HERE, "coll_worker.py"), "die",
                               path, str(r), "3"], stdout=subprocess.PIPE,
                              stderr=subprocess.STDOUT, text=True) for r in range(3)]
    outs = [p.communicate(timeout=120)[0] for p in procs]
    assert procs[2].returncode == -9, outs[2]
    for r in (0, 1):
        assert procs[r].returncode == 0, f"rank {r}:\n{outs[r]}"
        assert "failed after" in outs[r]
