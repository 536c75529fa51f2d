"""homa.torch: tensors in collectives, the DDP hook state, and DDP training
with the Homa hook against plain gloo."""
import datetime
import os
import socket
import subprocess
import sys
import threading

import pytest
import torch
import torch.distributed as dist

import homa
import homa.torch as ht
from conftest import run_ranks
from ddp_worker import make_model

HERE = os.path.dirname(os.path.abspath(__file__))


def test_as_buffer():
    for dt in (torch.float32, torch.float16, torch.int32, torch.int64):
        t = torch.arange(6, dtype=dt)
        arr, hd = ht.as_buffer(t)
        assert hd is None and arr.ctypes.data == t.data_ptr()  # same memory
    b = torch.ones(4, dtype=torch.bfloat16)
    arr, hd = ht.as_buffer(b)
    assert hd == "bfloat16" and arr.ctypes.data == b.data_ptr() and arr.itemsize == 2
    w = torch.zeros(3, requires_grad=True)
    assert ht.as_buffer(w)[0].ctypes.data == w.data_ptr()
    with pytest.raises(ValueError):
        ht.as_buffer(torch.zeros(4, 4)[:, 0])
    with pytest.raises(TypeError):
        ht.as_buffer(torch.zeros(4, dtype=torch.float64))


def test_tensors_in_collectives(ranks):
    comms = ranks(2)

    def fn(comm):
        r = comm.rank
        out = {}
        for dt in (torch.float32, torch.float16, torch.bfloat16, torch.int64):
            t = torch.full((1001,), r + 1, dtype=dt)
            out["sum", dt] = comm.allreduce(t) is t and t.clone()
            t = torch.full((5,), r + 1, dtype=dt)
            res = torch.empty_like(t)
            comm.allreduce(t, op="max", out=res)
            out["max", dt] = res
            g = torch.empty(10, dtype=dt)
            comm.allgather(torch.full((5,), r, dtype=dt), g)
            out["ag", dt] = g
            b = torch.full((3,), r + 7, dtype=dt)
            comm.broadcast(b, root=1)
            out["bc", dt] = b
        return out

    for res in run_ranks(comms, fn):
        for dt in (torch.float32, torch.float16, torch.bfloat16, torch.int64):
            assert torch.equal(res["sum", dt], torch.full((1001,), 3, dtype=dt))
            assert torch.equal(res["max", dt], torch.full((5,), 2, dtype=dt))
            assert torch.equal(res["ag", dt], torch.tensor([0] * 5 + [1] * 5, dtype=dt))
            assert torch.equal(res["bc", dt], torch.full((3,), 8, dtype=dt))


class FakeBucket:
    """What DDP hands to a comm hook, as far as allreduce_hook looks."""

    def __init__(self, t):
        self._t = t

    def buffer(self):
        return self._t


def test_hook_state_averages_in_order(ranks):
    comms = ranks(3)
    states = [ht.DDPState(c) for c in comms]
    dts = [torch.float32, torch.float16, torch.bfloat16, torch.float32]
    sizes = [10, 70_001, 1, 300_000]

    def fn(st):
        r = st.comm.rank
        # Queue everything at once, as DDP does during backward.
        futs = [ht.allreduce_hook(st, FakeBucket(torch.full((n,), 3.0 * r, dtype=dt)))
                for n, dt in zip(sizes, dts)]
        return [f.wait() for f in futs]

    results = run_ranks(states, fn)
    for res in results:
        for t, n, dt in zip(res, sizes, dts):
            assert t.dtype == dt and t.numel() == n
            assert torch.equal(t, torch.full((n,), 3.0, dtype=dt))  # (0 + 3 + 6) / 3
    for st in states:
        assert st.buckets == 4
        st.close()


def test_hook_failure_sets_exception(ranks):
    comms = ranks(2, timeout_ms=800)
    st = ht.DDPState(comms[0])  # rank 1 never takes part
    fut = st.submit(torch.ones(1000))
    with pytest.raises(Exception) as ei:
        fut.wait()
    assert "peer" in str(ei.value) or "Timeout" in repr(ei.value) or "timed" in str(ei.value)
    fut2 = st.submit(torch.ones(10))
    with pytest.raises(Exception):
        fut2.wait()
    st.close()


class RecordingCopier(ht._SyncCopier):
    """A synchronous copier that logs the pipeline's order of operations."""

    def __init__(self, log):
        self.log = log

    def to_host(self, src, dst):
        self.log.append(("in", dst.data_ptr(), src.numel()))
        dst.copy_(src)

    def to_device(self, src, dst):
        self.log.append(("out", src.data_ptr(), src.numel()))
        dst.copy_(src)


def test_staging_matches_whole_allreduce(ranks):
    comms = ranks(3)

    def fn(comm):
        r = comm.rank
        out = []
        # sizes around the chunk size (1000 B = 250 float32, 500 bfloat16)
        for dt, n, chunk, depth, op in [
            (torch.float32, 1001, 1000, 3, "sum"),
            (torch.float32, 250, 1000, 2, "avg"),
            (torch.float32, 249, 1000, 1, "max"),
            (torch.bfloat16, 1500, 1000, 2, "sum"),
            (torch.int64, 7, 8, 3, "sum"),
        ]:
            base = torch.arange(n, dtype=torch.float32).to(dt)
            t = base + r
            want = base + r
            comm.allreduce(want, op=op)
            st = ht.Staging(chunk_bytes=chunk, depth=depth)
            assert st.allreduce(comm, t, op=op) is t
            out.append((t, want, st.chunks, -(-n * t.element_size() // chunk)))
        return out

    for res in run_ranks(comms, fn):
        for got, want, chunks, expect_chunks in res:
            assert torch.equal(got, want)
            assert chunks == expect_chunks


def test_staging_pipelines_depth_ahead(ranks):
    comms = ranks(2)

    def fn(comm):
        log = []
        st = ht.Staging(chunk_bytes=400, depth=3)  # 100 float32 per chunk
        st._copiers["cpu"] = RecordingCopier(log)
        t = torch.ones(950) * (comm.rank + 1)
        st.allreduce(comm, t)
        return t, log

    for t, log in run_ranks(comms, fn):
        assert torch.equal(t, torch.full((950,), 3.0))
        kinds = [k for k, _, _ in log]
        # 10 chunks: 3 fetched ahead, then each copy-back is followed by the
        # fetch of the chunk that reuses its buffer.
        assert kinds[:3] == ["in"] * 3
        assert kinds[3:] == ["out", "in"] * 7 + ["out"] * 3
        assert [n for k, _, n in log if k == "in"][-1] == 50
        # chunk i+3 goes into chunk i's buffer
        ins = [p for k, p, _ in log if k == "in"]
        assert ins[3] == ins[0] and ins[4] == ins[1] and len(set(ins)) == 3


def test_staging_refuses_bad_input():
    with pytest.raises(ValueError):
        ht.Staging(chunk_bytes=0)
    empty = torch.zeros(0)
    assert ht.Staging().allreduce(None, empty) is empty  # nothing to reduce, no collective
    with pytest.raises(ValueError):
        ht.Staging().allreduce(None, torch.zeros(4, 4)[:, 0])


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
def test_staging_cuda(ranks):
    comms = ranks(2)

    def fn(comm):
        t = torch.arange(3_000_001, device="cuda", dtype=torch.float32) * (comm.rank + 1)
        st = ht.DDPState(comm, staging=ht.Staging(chunk_bytes=1 << 20))
        st.submit(t).wait()
        return t.cpu()

    for t in run_ranks(comms, fn):
        assert torch.allclose(t, torch.arange(3_000_001, dtype=torch.float32) * 1.5)


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_state_with_explicit_store():
    port = free_port()
    master = dist.TCPStore("127.0.0.1", port, 3, True, timeout=datetime.timedelta(seconds=30),
                           wait_for_workers=False)
    states = [None] * 3

    def make(r):
        store = master if r == 0 else dist.TCPStore("127.0.0.1", port, 3, False,
                                                    timeout=datetime.timedelta(seconds=30))
        # ranks in different scheduling classes still reduce together
        states[r] = ht.state(rank=r, world_size=3, store=store, timeout_ms=10000,
                             sched_class=r % 2 if r else None)

    threads = [threading.Thread(target=make, args=(r,)) for r in range(3)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    try:
        outs = run_ranks(states, lambda st: st.submit(torch.full((100,), float(st.comm.rank))).wait())
        for t in outs:
            assert torch.equal(t, torch.full((100,), 1.0))
    finally:
        for st in states:
            st.close()


def test_state_needs_rank_without_dist(monkeypatch):
    monkeypatch.delenv("RANK", raising=False)
    monkeypatch.delenv("WORLD_SIZE", raising=False)
    if dist.is_initialized():
        pytest.skip("a process group is initialised")
    with pytest.raises(ValueError, match="RANK"):
        ht.state()


def test_ddp_homa_hook_matches_gloo(tmp_path):
    world, steps = 2, 12
    init = tmp_path / "pg_init"
    out = tmp_path / "params"
    env = dict(os.environ, OMP_NUM_THREADS="1")
    procs = [subprocess.Popen([sys.executable, os.path.join(HERE, "ddp_worker.py"), str(r),
                               str(world), str(init), str(out), str(steps)],
                              env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
             for r in range(world)]
    outs = [p.communicate(timeout=240)[0] for p in procs]
    for r, p in enumerate(procs):
        assert p.returncode == 0, f"rank {r}:\n{outs[r]}"
    res = [torch.load(f"{out}.{r}.pt") for r in range(world)]
    initial = make_model().state_dict()
    assert res[0]["buckets"] >= 2 * steps  # several buckets per step went through Homa
    for name, ref in res[0]["gloo"].items():
        for r in range(world):
            # Every rank ends with the same weights with either transport...
            assert torch.equal(res[r]["homa"][name], res[0]["homa"][name]), name
            assert torch.equal(res[r]["gloo"][name], ref), name
        # ...and Homa's match gloo's up to float rounding of the averages.
        torch.testing.assert_close(res[0]["homa"][name], ref, rtol=1e-4, atol=1e-5)
        assert not torch.equal(ref, initial[name])  # training did move them

