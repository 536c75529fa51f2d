"""PyTorch integration: Homa collectives on CPU tensors and a DDP communication hook.

    import homa.torch
    dist.init_process_group("gloo")                  # or not at all: see state()
    model = DDP(model)
    model.register_comm_hook(homa.torch.state(), homa.torch.allreduce_hook)

The hook averages each gradient bucket over the ranks with homa allreduce,
on a worker thread that runs the buckets in the order DDP hands them over
(the same order on every rank), and returns a torch.futures.Future that
completes with the bucket's tensor, reduced in place.  float32, float16 and
bfloat16 gradients are supported.

libhoma moves host memory.  GPU tensors (CUDA, or any other device torch
can copy from) are staged: a Staging object copies the tensor to pinned host
memory chunk by chunk on a side stream, reduces each chunk over Homa and
copies it back, so that while one chunk is on the network the next is coming
off the GPU and the previous one is going back (see Staging).
"""

import datetime
import os
import queue
import threading
import time

import torch
import torch.distributed as dist

import homa

__all__ = ["as_buffer", "state", "allreduce_hook", "DDPState", "all_reduce", "Staging"]

_NUMPY_DTYPES = (torch.float32, torch.float16, torch.int32, torch.int64)


def as_buffer(tensor, dtype=None, writable=True):
    """(numpy view, dtype) of a contiguous CPU tensor, sharing its memory.

    bfloat16 tensors become an int16 view with dtype 'bfloat16' (numpy has
    no bfloat16).  Raises ValueError for GPU or non-contiguous tensors and
    TypeError for other dtypes.
    """
    if tensor.device.type != "cpu":
        raise ValueError(f"homa collectives need CPU tensors, not {tensor.device} "
                         "(homa.torch.all_reduce and the DDP hook stage GPU tensors: see Staging)")
    if not tensor.is_contiguous():
        raise ValueError("homa collectives need contiguous tensors (use .contiguous() and copy back)")
    t = tensor.detach()  # shares memory; numpy() refuses tensors that require grad
    if t.dtype == torch.bfloat16:
        return t.view(torch.int16).numpy(), dtype if dtype is not None else "bfloat16"
    if t.dtype in _NUMPY_DTYPES:
        return t.numpy(), dtype
    raise TypeError(
        f"homa collectives support float32, float16, bfloat16, int32 and int64 tensors, not {t.dtype}"
    )


class _SyncCopier:
    """Copies between a tensor and host buffers synchronously (CPU tensors,
    devices without streams).  Also what the tests drive Staging with."""

    pinned = False

    def begin(self, ready):
        pass

    def to_host(self, src, dst):
        dst.copy_(src)

    def to_device(self, src, dst):
        dst.copy_(src)

    def wait(self, ev):
        pass

    def finish(self):
        pass


class _CudaCopier:
    """Copies on a side stream of the tensor's device, with events per chunk."""

    pinned = True

    def __init__(self, device):
        self.device = device
        self.stream = torch.cuda.Stream(device=device)

    def begin(self, ready):
        # The tensor was produced on the submitter's stream: copy only after it.
        if ready is not None:
            self.stream.wait_event(ready)
        else:
            self.stream.wait_stream(torch.cuda.current_stream(self.device))

    def _copy(self, src, dst):
        with torch.cuda.stream(self.stream):
            dst.copy_(src, non_blocking=True)
        ev = torch.cuda.Event()
        ev.record(self.stream)
        return ev

    to_host = _copy
    to_device = _copy

    def wait(self, ev):
        if ev is not None:
            ev.synchronize()

    def finish(self):
        self.stream.synchronize()


def ready_event(tensor):
    """An event marking the point, on the current stream, after which a GPU
    tensor holds its value (None for CPU tensors).  Record it in the thread
    that produced the tensor and pass it to Staging.allreduce from another."""
    if tensor.device.type != "cuda":
        return None
    ev = torch.cuda.Event()
    ev.record(torch.cuda.current_stream(tensor.device))
    return ev


class Staging:
    """Allreduce of tensors that are not in host memory, through host buffers.

    Staging(chunk_bytes=4 MiB, depth=3)

    allreduce(comm, tensor, op) splits the (contiguous) tensor into chunks of
    chunk_bytes and pipelines them through `depth` host buffers: chunk i+1
    is copied off the device while chunk i is reduced over Homa and chunk i-1
    is copied back.  On CUDA the buffers are pinned and the copies run on a
    side stream of the tensor's device, ordered after the stream the tensor
    was produced on (or after a given ready event); the call returns when the
    tensor holds the result.  Buffers are kept between calls (one set per
    dtype).  The result equals an allreduce of the whole tensor: reductions
    are element-wise, so chunking does not change them.  Not thread-safe: one
    Staging per thread (DDPState has its own).
    """

    def __init__(self, chunk_bytes=4 << 20, depth=3):
        if chunk_bytes < 1 or depth < 1:
            raise ValueError("Staging: chunk_bytes and depth must be at least 1")
        self.chunk_bytes = int(chunk_bytes)
        self.depth = int(depth)
        self.chunks = 0  # chunks reduced so far
        self.bytes = 0  # bytes staged so far
        self._copiers = {}
        self._buffers = {}

    def _copier(self, device):
        key = str(device)
        c = self._copiers.get(key)
        if c is None:
            c = _CudaCopier(device) if device.type == "cuda" else _SyncCopier()
            self._copiers[key] = c
        return c

    def _host_buffers(self, dtype, elems, pinned):
        key = (dtype, pinned)
        bufs = self._buffers.get(key)
        if bufs is None or bufs[0].numel() < elems:
            bufs = [torch.empty(elems, dtype=dtype, pin_memory=pinned) for _ in range(self.depth)]
            self._buffers[key] = bufs
        return bufs

    def allreduce(self, comm, tensor, op="sum", ready=None):
        """In-place allreduce of `tensor` (any device) on comm; returns tensor."""
        if not tensor.is_contiguous():
            raise ValueError("homa collectives need contiguous tensors (use .contiguous() and copy back)")
        flat = tensor.detach().view(-1)
        n = flat.numel()
        if n == 0:
            return tensor
        per = max(1, self.chunk_bytes // flat.element_size())
        nchunks = (n + per - 1) // per
        copier = self._copier(flat.device)
        bufs = self._host_buffers(flat.dtype, min(per, n), copier.pinned)
        events = [None] * self.depth

        def fetch(i):
            lo = i * per
            hi = min(n, lo + per)
            events[i % self.depth] = copier.to_host(flat[lo:hi], bufs[i % self.depth][: hi - lo])

        copier.begin(ready)
        try:
            for i in range(min(self.depth, nchunks)):
                fetch(i)
            for i in range(nchunks):
                lo = i * per
                hi = min(n, lo + per)
                host = bufs[i % self.depth][: hi - lo]
                copier.wait(events[i % self.depth])
                comm.allreduce(host, op=op)
                copier.to_device(host, flat[lo:hi])
                self.chunks += 1
                self.bytes += (hi - lo) * flat.element_size()
                # Same stream: the copy back of chunk i is done before chunk
                # i+depth overwrites its buffer.
                if i + self.depth < nchunks:
                    fetch(i + self.depth)
        finally:
            copier.finish()
        return tensor


def all_reduce(comm, tensor, op="sum", staging=None):
    """In-place allreduce of a tensor on a homa.Communicator; returns the tensor.

    CPU tensors are reduced in place; others are staged through host memory
    (staging: a Staging to use, else a new one with its defaults)."""
    if tensor.device.type == "cpu":
        comm.allreduce(tensor, op=op)
        return tensor
    return (staging or Staging()).allreduce(comm, tensor, op=op)


class DDPState:
    """State of the Homa DDP hook: a communicator and a worker thread.

    submit(tensor) queues an in-place average of the tensor over the ranks
    and returns a torch.futures.Future completed (with the tensor) by the
    worker thread, which runs the queued reductions one at a time in order.
    Tensors on a GPU are staged through pinned host memory by `staging`
    (a Staging; default Staging(), 4 MiB chunks, 3 buffers).
    The thread releases the GIL inside libhoma, so the backward pass keeps
    computing while earlier buckets are being reduced.  An error (e.g.
    homa.TimeoutError when a rank died) is set on the future; the
    communicator is then broken and later buckets fail with homa.StateError.
    """

    def __init__(self, comm, op="avg", staging=None):
        self.comm = comm
        self.op = op
        self.staging = staging if staging is not None else Staging()
        self.buckets = 0
        self.comm_seconds = 0.0  # time spent inside allreduce, for profiling
        self._queue = queue.SimpleQueue()
        self._thread = threading.Thread(target=self._run, name="homa-ddp", daemon=True)
        self._thread.start()

    def submit(self, tensor):
        # A future holding CUDA tensors must name their device.
        cuda = tensor.device.type == "cuda"
        fut = torch.futures.Future(devices=[tensor.device]) if cuda else torch.futures.Future()
        if self._thread is None:
            fut.set_exception(RuntimeError("homa.torch.DDPState is closed"))
            return fut
        # Recorded here, on the producer's thread and stream.
        self._queue.put((tensor, ready_event(tensor), fut))
        return fut

    def _run(self):
        while True:
            item = self._queue.get()
            if item is None:
                return
            tensor, ready, fut = item
            try:
                t0 = time.perf_counter()
                if tensor.device.type == "cpu":
                    self.comm.allreduce(tensor, op=self.op)
                else:
                    self.staging.allreduce(self.comm, tensor, op=self.op, ready=ready)
                self.comm_seconds += time.perf_counter() - t0
                self.buckets += 1
            except Exception as exc:
                fut.set_exception(exc)
                continue
            # DDP's own callbacks (copying into .grad) run here, on this thread.
            fut.set_result(tensor)

    def close(self):
        """Stops the worker thread (after the queued buckets) and closes the communicator."""
        if self._thread is not None:
            self._queue.put(None)
            self._thread.join()
            self._thread = None
        self.comm.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def __repr__(self):
        return f"<homa.torch.DDPState {self.comm!r} buckets={self.buckets}>"


def _group_key(key, process_group):
    if process_group is None or process_group is dist.GroupMember.WORLD:
        return key
    ranks = getattr(dist, "get_process_group_ranks", None)
    if ranks is not None:
        members = ranks(process_group)
    else:  # torch 1.13: the group's global ranks
        members = sorted(dist.distributed_c10d._pg_group_ranks[process_group].keys())
    return f"{key}/group-{'-'.join(map(str, members))}"


def state(process_group=None, rank=None, world_size=None, store=None, host="127.0.0.1",
          timeout_ms=30000, runtime=None, key="homa/ddp", staging=None, sched_class=None,
          **options):
    """A DDPState for register_comm_hook(): a homa.Communicator over all ranks.

    rank / world_size default to those of torch.distributed (of
    process_group) when it is initialised, else to the RANK and WORLD_SIZE
    environment variables (set by torchrun).  Endpoints are exchanged
    through `store` (any object with set/get, e.g. a TCPStore), else through
    the default process group's store, else through a new TCPStore at
    MASTER_ADDR:MASTER_PORT (rank 0 serves it).  host: the address this rank
    listens on (must be reachable by the others; the default suits one
    machine).  timeout_ms: a collective that makes no progress for this long
    (a dead rank) fails with homa.TimeoutError.  staging: the Staging used
    for GPU buckets (default Staging()).  sched_class: the scheduling class
    (0-3, Socket.set_class) of the communicator's socket, so that a host
    engine shared with other processes (homad) sends and grants the
    gradients before their messages (default: leave it at 0).  Other options go to
    homa.Communicator (chunk_bytes, window, small_bytes).
    """
    initialized = dist.is_available() and dist.is_initialized()
    if rank is None:
        rank = dist.get_rank(process_group) if initialized else _env_int("RANK")
    if world_size is None:
        world_size = dist.get_world_size(process_group) if initialized else _env_int("WORLD_SIZE")
    if store is None:
        if initialized:
            store = dist.distributed_c10d._get_default_store()
        else:
            addr = os.environ.get("MASTER_ADDR", "127.0.0.1")
            port = _env_int("MASTER_PORT")
            store = dist.TCPStore(addr, port, world_size, rank == 0,
                                  timeout=datetime.timedelta(milliseconds=max(timeout_ms, 1000)))
    comm = homa.Communicator.from_store(store, rank, world_size, host=host,
                                        key=_group_key(key, process_group), runtime=runtime,
                                        timeout_ms=timeout_ms, **options)
    if sched_class is not None:
        try:
            comm.socket.set_class(sched_class)
        except BaseException:
            comm.close()
            raise
    st = DDPState(comm, staging=staging)
    st.store = store  # keep a TCPStore we created alive for the job
    return st


def _env_int(name):
    val = os.environ.get(name)
    if val is None:
        raise ValueError(
            f"homa.torch.state(): torch.distributed is not initialised and ${name} is not set "
            "(pass rank=, world_size= and store=, or launch with torchrun)")
    return int(val)


def allreduce_hook(state, bucket):
    """DDP communication hook: averages the bucket's gradients over the ranks with Homa.

    Use as model.register_comm_hook(homa.torch.state(...), homa.torch.allreduce_hook).
    Works for CPU and GPU models alike (GPU buckets are staged, see Staging).
    Returns a torch.futures.Future completed with the bucket's flattened
    gradient tensor, reduced in place.
    """
    # torch >= 1.10 names it buffer(); 1.8-1.9 get_tensor().
    tensor = bucket.buffer() if hasattr(bucket, "buffer") else bucket.get_tensor()
    return state.submit(tensor)
