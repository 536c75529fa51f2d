"""PyTorch integration: Homa collectives on CPU tensors and a DDP communication hook.

    import homa.torch
    dist.init_process_group("gloo")                  # or not at all: see state()
    model = DDP(model)
    model.register_comm_hook(homa.torch.state(), homa.torch.allreduce_hook)

The hook averages each gradient bucket over the ranks with homa allreduce,
on a worker thread that runs the buckets in the order DDP hands them over
(the same order on every rank), and returns a torch.futures.Future that
completes with the bucket's tensor, reduced in place.  float32, float16 and
bfloat16 gradients are supported (CPU tensors only: libhoma moves host
memory).
"""

import datetime
import os
import queue
import threading
import time

import torch
import torch.distributed as dist

import homa

__all__ = ["as_buffer", "state", "allreduce_hook", "DDPState", "all_reduce"]

_NUMPY_DTYPES = (torch.float32, torch.float16, torch.int32, torch.int64)


def as_buffer(tensor, dtype=None, writable=True):
    """(numpy view, dtype) of a contiguous CPU tensor, sharing its memory.

    bfloat16 tensors become an int16 view with dtype 'bfloat16' (numpy has
    no bfloat16).  Raises ValueError for GPU or non-contiguous tensors and
    TypeError for other dtypes.
    """
    if tensor.device.type != "cpu":
        raise ValueError(f"homa collectives need CPU tensors, not {tensor.device}")
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


def all_reduce(comm, tensor, op="sum"):
    """In-place allreduce of a CPU tensor on a homa.Communicator; returns the tensor."""
    comm.allreduce(tensor, op=op)
    return tensor


class DDPState:
    """State of the Homa DDP hook: a communicator and a worker thread.

    submit(tensor) queues an in-place average of the tensor over the ranks
    and returns a torch.futures.Future completed (with the tensor) by the
    worker thread, which runs the queued reductions one at a time in order.
    The thread releases the GIL inside libhoma, so the backward pass keeps
    computing while earlier buckets are being reduced.  An error (e.g.
    homa.TimeoutError when a rank died) is set on the future; the
    communicator is then broken and later buckets fail with homa.StateError.
    """

    def __init__(self, comm, op="avg"):
        self.comm = comm
        self.op = op
        self.buckets = 0
        self.comm_seconds = 0.0  # time spent inside allreduce, for profiling
        self._queue = queue.SimpleQueue()
        self._thread = threading.Thread(target=self._run, name="homa-ddp", daemon=True)
        self._thread.start()

    def submit(self, tensor):
        fut = torch.futures.Future()
        if self._thread is None:
            fut.set_exception(RuntimeError("homa.torch.DDPState is closed"))
            return fut
        self._queue.put((tensor, fut))
        return fut

    def _run(self):
        while True:
            item = self._queue.get()
            if item is None:
                return
            tensor, fut = item
            try:
                t0 = time.perf_counter()
                self.comm.allreduce(tensor, op=self.op)
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
          timeout_ms=30000, runtime=None, key="homa/ddp", **options):
    """A DDPState for register_comm_hook(): a homa.Communicator over all ranks.

    rank / world_size default to those of torch.distributed (of
    process_group) when it is initialised, else to the RANK and WORLD_SIZE
    environment variables (set by torchrun).  Endpoints are exchanged
    through `store` (any object with set/get, e.g. a TCPStore), else through
    the default process group's store, else through a new TCPStore at
    MASTER_ADDR:MASTER_PORT (rank 0 serves it).  host: the address this rank
    listens on (must be reachable by the others; the default suits one
    machine).  timeout_ms: a collective that makes no progress for this long
    (a dead rank) fails with homa.TimeoutError.  Other options go to
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
    st = DDPState(comm)
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
    Returns a torch.futures.Future completed with the bucket's flattened
    gradient tensor, reduced in place.
    """
    # torch >= 1.10 names it buffer(); 1.8-1.9 get_tensor().
    tensor = bucket.buffer() if hasattr(bucket, "buffer") else bucket.get_tensor()
    return state.submit(tensor)
