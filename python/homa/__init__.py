"""Homa RPCs and collectives for Python, on libhoma (a user-space Homa over UDP).

Sockets and RPCs::

    import homa
    with homa.Socket(bind="127.0.0.1") as srv, homa.Socket() as cli:
        rpc = cli.send(srv.endpoint, b"ping")
        with srv.recv() as req:          # a homa.Message: zero-copy payload
            srv.reply(req, bytes(req).upper())
        print(bytes(cli.recv(id=rpc)))   # b'PING'

Collectives (every rank runs the same calls, in the same order)::

    comm = homa.Communicator.from_file("/shared/job42", rank, size, host=my_ip)
    comm.allreduce(grad)                 # numpy array, in place, GIL released

PyTorch DDP: ``model.register_comm_hook(homa.torch.state(), homa.torch.allreduce_hook)``.

See docs/python.md for the whole API.  Errors are ``homa.HomaError``
(an ``OSError``) and its subclasses; bad arguments raise ValueError/TypeError.
"""

import errno as _errno
import itertools
import threading
import time

from ._homa import (  # noqa: F401  (re-exported)
    AVG,
    BFLOAT16,
    ERR_ABORTED,
    ERR_ADDR,
    ERR_AGAIN,
    ERR_INVAL,
    ERR_IO,
    ERR_LIMIT,
    ERR_MSGSIZE,
    ERR_NO_PORT,
    ERR_NOMEM,
    ERR_NOT_FOUND,
    ERR_PERM,
    ERR_PORT_IN_USE,
    ERR_SHUTDOWN,
    ERR_STATE,
    ERR_TIMEOUT,
    ERR_UNREACHABLE,
    FLOAT16,
    FLOAT32,
    INT32,
    INT64,
    MAX,
    MIN,
    RECV_ANY,
    RECV_REQUEST,
    RECV_RESPONSE,
    SUM,
    AbortedError,
    AddressError,
    HomaError,
    InvalidArgumentError,
    LimitError,
    Message,
    MessageTooLongError,
    NotFoundError,
    NotPermittedError,
    OutOfMemoryError,
    PortInUseError,
    Runtime,
    ShutdownError,
    Socket,
    StateError,
    TimeoutError,
    UnreachableError,
    WouldBlockError,
    default_runtime,
    dtype_size,
    parse_endpoint,
    strerror,
)
from . import _homa

__all__ = [
    "Runtime",
    "Socket",
    "Message",
    "Communicator",
    "serve",
    "default_runtime",
    "strerror",
    "parse_endpoint",
    "dtype_size",
    "HomaError",
    "InvalidArgumentError",
    "OutOfMemoryError",
    "WouldBlockError",
    "TimeoutError",
    "NotFoundError",
    "MessageTooLongError",
    "PortInUseError",
    "AbortedError",
    "LimitError",
    "StateError",
    "ShutdownError",
    "AddressError",
    "UnreachableError",
    "NotPermittedError",
    "RECV_REQUEST",
    "RECV_RESPONSE",
    "RECV_ANY",
    "SUM",
    "AVG",
    "MAX",
    "MIN",
    "FLOAT32",
    "FLOAT16",
    "BFLOAT16",
    "INT32",
    "INT64",
]

__version__ = "0.4.0"


def serve(sock, handler, *, stop=None, poll=0.1, on_error=None):
    """Answers requests on `sock` until `stop` is set or the socket is closed.

    handler(request) gets each request's payload as a read-only-by-convention
    memoryview (no copy; valid only during the call: copy what you keep) and
    returns the response: any bytes-like object, or None for an empty one.

    stop: a threading.Event (or anything with is_set()); checked every `poll`
    seconds.  The loop also ends, without error, when another thread closes
    the socket.  If handler raises, the request is dropped without a reply
    (its client eventually gets homa.TimeoutError) and then: with
    on_error=None the exception propagates and serve() ends; otherwise
    on_error(exc, message) is called and serving goes on.

    Returns the number of requests answered.
    """
    answered = 0
    while stop is None or not stop.is_set():
        try:
            msg = sock.recv(RECV_REQUEST, timeout=poll)
        except ShutdownError:
            break
        if msg is None:
            continue
        with msg:
            try:
                with memoryview(msg) as view:
                    resp = handler(view)
            except Exception as exc:
                try:
                    sock.abort(msg.id)
                except HomaError:
                    pass
                if on_error is None:
                    raise
                on_error(exc, msg)
                continue
            try:
                sock.reply(msg, b"" if resp is None else resp)
            except ShutdownError:
                break
            answered += 1
    return answered


def _is_tensor(obj):
    # torch.Tensor without importing torch: tensors have both.
    return hasattr(obj, "data_ptr") and hasattr(obj, "numpy") and hasattr(obj, "dtype")


def _as_buffer(obj, dtype, writable):
    """(buffer, dtype) for a buffer-protocol object or a torch CPU tensor."""
    if _is_tensor(obj):
        from . import torch as _ht

        return _ht.as_buffer(obj, dtype, writable)
    return obj, dtype


# Communicators created through one store in this process are numbered per
# (store, key, rank), so that repeated rendezvous under the same key never mix:
# every rank creates its communicators in the same order.  (The rank is part
# of the key for ranks that are threads of one process, as in the tests.)
_rendezvous_counter = {}
_rendezvous_lock = threading.Lock()


def _next_generation(key):
    with _rendezvous_lock:
        c = _rendezvous_counter.setdefault(key, itertools.count())
        return next(c)


class Communicator(_homa.Communicator):
    """A group of `size` processes (ranks) running collectives over Homa.

    Communicator(rank, size, endpoints, socket=None, runtime=None, *,
                 timeout_ms=None, chunk_bytes=None, window=None, small_bytes=None,
                 own_socket=False)

    endpoints: every rank's 'host:port' (or (host, port)), in rank order.
    socket: this rank's homa.Socket, open on endpoints[rank]'s port; it is
    used exclusively by the communicator until close().  Without it the
    communicator opens (and owns) a socket bound to endpoints[rank].

    Usually made with Communicator.from_store() or Communicator.from_file(),
    which exchange the endpoints.

    Options (None = libhoma's default): timeout_ms (a call fails with
    homa.TimeoutError after this long without progress, e.g. a dead rank;
    default 30,000), chunk_bytes (message size, default 1 MiB), window
    (messages in flight per peer, default 4), small_bytes (allreduce uses
    recursive doubling up to this size, a ring above; default 64 KiB).

    Collectives take any C-contiguous buffer-protocol object (numpy arrays,
    bytearray, memoryview) or a torch CPU tensor, of float32, float16, int32
    or int64 (from the buffer's format), or bfloat16 with dtype="bfloat16"
    (numpy has no bfloat16: pass 2-byte items, e.g. uint16).  They work on
    the buffer's memory directly (no copy) with the GIL released.  All ranks
    must call the same collectives in the same order with the same sizes.
    After an error other than a bad argument the communicator is broken
    (later calls raise homa.StateError): close it.
    """

    @classmethod
    def from_store(cls, store, rank, size, host="127.0.0.1", *, key="homa", runtime=None,
                   store_timeout=300.0, **options):
        """Rendezvous through a key-value store.

        store: any object with set(key, value) and get(key) -> bytes, such as
        torch.distributed.TCPStore / FileStore / HashStore; get() may block
        until the key exists (TCPStore does) or raise KeyError/LookupError
        (polled then, for up to store_timeout seconds).  Each rank opens a
        socket on `host` (an address the other ranks can reach) with an
        ephemeral port, publishes 'host:port' under '<key>/<n>/<rank>' and
        reads everyone else's.  n counts the communicators made with this
        key (and rank) in this process, so repeated rendezvous on one store
        don't mix.
        """
        gen = _next_generation(("store", id(store), key, rank))
        sock = Socket(bind=(host, 0), runtime=runtime)
        try:
            store.set(f"{key}/{gen}/{rank}", sock.endpoint)
            endpoints = []
            deadline = time.monotonic() + store_timeout
            for r in range(size):
                endpoints.append(_store_get(store, f"{key}/{gen}/{r}", deadline))
            comm = cls(rank, size, endpoints, socket=sock, own_socket=True, **options)
        except BaseException:
            sock.close()
            raise
        return comm

    @classmethod
    def from_file(cls, path, rank, size, host="127.0.0.1", *, runtime=None, **options):
        """Rendezvous through a file on a file system all ranks see.

        Each rank opens a socket on `host` (an address the others can reach;
        the default suits one machine), appends 'rank endpoint' to `path` and
        waits until all ranks have (up to timeout_ms).  The file must be
        empty or absent when the job starts: use a fresh path per job.
        """
        return cls(rank, size, runtime=runtime, path=path, host=host, **options)

    def allreduce(self, buf, op="sum", out=None, dtype=None):
        """Element-wise reduction over all ranks: op is 'sum', 'avg', 'max' or 'min'.

        In place in buf, or into out (same dtype and length).  Returns the
        result buffer.  'avg' on integers truncates toward zero.
        """
        b, dt = _as_buffer(buf, dtype, out is None)
        o = None if out is None else _as_buffer(out, dtype, True)[0]
        super().allreduce(b, op, o, dt)
        return buf if out is None else out

    def broadcast(self, buf, root=0, dtype=None):
        """Copies root's buf into buf on every rank; returns buf."""
        b, dt = _as_buffer(buf, dtype, True)
        super().broadcast(b, root, dt)
        return buf

    def allgather(self, sendbuf, recvbuf, dtype=None):
        """recvbuf (size times sendbuf's length) gets rank r's sendbuf as block r."""
        s, dt = _as_buffer(sendbuf, dtype, False)
        super().allgather(s, _as_buffer(recvbuf, dtype, True)[0], dt)
        return recvbuf

    def reduce_scatter(self, sendbuf, recvbuf, op="sum", dtype=None):
        """sendbuf holds size blocks of recvbuf's length; rank r gets op over block r."""
        s, dt = _as_buffer(sendbuf, dtype, False)
        super().reduce_scatter(s, _as_buffer(recvbuf, dtype, True)[0], op, dt)
        return recvbuf

    def __repr__(self):
        state = "closed" if self.closed else f"at {self.endpoint}"
        return f"<homa.Communicator rank {self.rank} of {self.size} {state}>"


def _store_get(store, key, deadline):
    while True:
        try:
            val = store.get(key)
        except (KeyError, LookupError):
            val = None
        if val is not None:
            return val.decode() if isinstance(val, (bytes, bytearray)) else str(val)
        if time.monotonic() > deadline:
            err = TimeoutError(_errno.ETIMEDOUT, f"rendezvous: no value for {key!r} in the store")
            err.code = ERR_TIMEOUT
            raise err
        time.sleep(0.01)
