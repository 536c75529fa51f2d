"""Helpers shared by the Python package tests: ranks as threads in one process.

Each rank gets its own homa.Runtime (engine, UDP sockets, thread), so ranks
in threads talk over loopback UDP exactly like separate processes; the GIL
is released inside every collective, so the threads run concurrently.
"""
import threading

import pytest

import homa


class DictStore:
    """The smallest store: set/get like torch.distributed.TCPStore, but get()
    raises KeyError for a missing key (from_store() then polls)."""

    def __init__(self):
        self._d = {}
        self._lock = threading.Lock()

    def set(self, key, value):
        with self._lock:
            self._d[key] = value.encode() if isinstance(value, str) else bytes(value)

    def get(self, key):
        with self._lock:
            return self._d[key]


# libhoma aborts an RPC whose peer was silent for 100 ms (timeout_ticks).  Ranks
# as threads of one process, on a 2-core machine that runs other tests too,
# can be starved that long; a dead rank is still detected by the
# collectives' own timeout_ms.
RT_CONFIG = {"timeout_ticks": 1000}


def make_comms(n, faults=None, timeout_ms=20000, **options):
    """n communicators on 127.0.0.1, one runtime each (faults: a spec with {rank})."""
    runtimes = [homa.Runtime(faults=faults.format(rank=r) if faults else None, config=RT_CONFIG)
                for r in range(n)]
    socks = [homa.Socket(bind="127.0.0.1", runtime=rt) for rt in runtimes]
    eps = [s.endpoint for s in socks]
    comms = [homa.Communicator(r, n, eps, socket=socks[r], own_socket=True,
                               timeout_ms=timeout_ms, **options) for r in range(n)]
    return comms, runtimes


def close_comms(comms, runtimes):
    for c in comms:
        c.close()
    for rt in runtimes:
        rt.close()


def run_ranks(comms, fn, timeout=120):
    """Runs fn(comm) for every communicator in its own thread; returns the
    results in rank order, or raises the first exception of a rank."""
    results = [None] * len(comms)
    errors = [None] * len(comms)

    def body(r):
        try:
            results[r] = fn(comms[r])
        except BaseException as e:  # noqa: B902  (reported below)
            errors[r] = e

    threads = [threading.Thread(target=body, args=(r,)) for r in range(len(comms))]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout)
    assert not any(t.is_alive() for t in threads), "a rank hung"
    for e in errors:
        if e is not None:
            raise e
    return results


@pytest.fixture
def ranks():
    """ranks(n, **opts) -> list of communicators, closed after the test."""
    made = []

    def factory(n, **kw):
        comms, rts = make_comms(n, **kw)
        made.append((comms, rts))
        return comms

    yield factory
    for comms, rts in made:
        close_comms(comms, rts)
