"""homa.Socket, homa.Message, homa.Runtime, homa.serve and the error classes."""
import asyncio
import builtins
import errno
import os
import select
import threading
import time

import pytest

import homa


@pytest.fixture
def pair():
    srv = homa.Socket(bind="127.0.0.1")
    cli = homa.Socket()
    yield srv, cli
    cli.close()
    srv.close()


def echo_once(srv, timeout=5):
    msg = srv.recv(homa.RECV_REQUEST, timeout=timeout)
    assert msg is not None and msg.is_request
    srv.reply(msg, msg)  # zero-copy echo
    return msg


def test_send_recv_reply(pair):
    srv, cli = pair
    rpc = cli.send(srv.endpoint, b"hello", cookie=42)
    assert rpc % 2 == 0
    req = srv.recv(timeout=5)
    assert req.is_request and req.id % 2 == 1 and bytes(req) == b"hello"
    assert req.peer.startswith("127.0.0.1:")
    srv.reply(req, b"HELLO")
    req.release()
    resp = cli.recv(id=rpc, timeout=5)
    assert not resp.is_request
    assert resp.id == rpc and resp.cookie == 42
    assert bytes(resp) == b"HELLO" and len(resp) == 5
    assert resp.peer == srv.endpoint
    resp.release()


def test_send_priority(pair):
    srv, cli = pair
    payload = os.urandom(200_000)
    for prio in (None, 0, 7, (2, 5)):
        rpc = cli.send(srv.endpoint, payload, priority=prio)
        echo_once(srv).release()
        resp = cli.recv(id=rpc, timeout=5)
        assert memoryview(resp) == payload
        resp.release()
    for bad in (8, -1, (3, 2), (0, 8)):
        with pytest.raises(ValueError):
            cli.send(srv.endpoint, b"x", priority=bad)
    for bad in ("7", (1, 2, 3), 1.5):
        with pytest.raises(TypeError):
            cli.send(srv.endpoint, b"x", priority=bad)


def test_set_class(pair):
    srv, cli = pair
    for cls in (3, 0, 1):
        cli.set_class(cls)
        srv.set_class(cls)
        payload = os.urandom(100_000)
        rpc = cli.send(srv.endpoint, payload)
        echo_once(srv).release()
        resp = cli.recv(id=rpc, timeout=5)
        assert memoryview(resp) == payload
        resp.release()
    for bad in (4, -1):
        with pytest.raises(ValueError):
            cli.set_class(bad)
    with pytest.raises(TypeError):
        cli.set_class("1")


def test_call_and_echo_large(pair):
    srv, cli = pair
    payload = os.urandom(1_000_000)
    t = threading.Thread(target=echo_once, args=(srv,))
    t.start()
    with cli.call(srv.endpoint, payload, timeout=10) as resp:
        assert isinstance(resp, homa.Message)
        assert memoryview(resp) == payload
    t.join()


def test_endpoint_forms(pair):
    srv, cli = pair
    for dest in (srv.endpoint, ("127.0.0.1", srv.port), ("localhost", srv.port)):
        t = threading.Thread(target=echo_once, args=(srv,))
        t.start()
        assert bytes(cli.call(dest, b"x", timeout=5)) == b"x"
        t.join()
    assert homa.parse_endpoint(("127.0.0.1", 80)) == "127.0.0.1:80"
    assert homa.parse_endpoint("[::1]:80") == "[::1]:80"


def test_message_zero_copy_buffer(pair):
    srv, cli = pair
    cli.send(srv.endpoint, b"abcdef")
    msg = srv.recv(timeout=5)
    v1 = memoryview(msg)
    v2 = msg.data
    assert not v1.readonly and v1.nbytes == 6
    # Both views are the same memory: a write through one shows in the other.
    v1[0] = ord("X")
    assert bytes(v2) == b"Xbcdef" and bytes(msg) == b"Xbcdef"
    # release() with live views: they stay valid, new views are refused.
    msg.release()
    assert msg.released and len(msg) == 0
    assert bytes(v1) == b"Xbcdef"
    with pytest.raises(ValueError):
        memoryview(msg)
    with pytest.raises(ValueError):
        bytes(msg)
    v1.release()
    v2.release()
    srv.reply(msg, b"")  # a released request can still be answered
    assert cli.recv(timeout=5) is not None


def test_message_outlives_socket():
    srv = homa.Socket(bind="127.0.0.1")
    with homa.Socket() as cli:
        cli.send(srv.endpoint, b"payload")
        msg = srv.recv(timeout=5)
    view = memoryview(msg)
    srv.close()
    assert bytes(view) == b"payload"  # taken out of libhoma: no dangling pointer
    view.release()
    msg.release()


def test_empty_message(pair):
    srv, cli = pair
    t = threading.Thread(target=echo_once, args=(srv,))
    t.start()
    resp = cli.call(srv.endpoint, b"", timeout=5)
    t.join()
    assert len(resp) == 0 and bytes(resp) == b"" and memoryview(resp).nbytes == 0


def test_recv_timeout_returns_none(pair):
    srv, cli = pair
    assert srv.recv(timeout=0) is None
    t0 = time.monotonic()
    assert srv.recv(timeout=0.05) is None
    assert time.monotonic() - t0 >= 0.04


def test_dead_server_timeout(pair):
    _, cli = pair
    # A port that swallows packets and never answers: a closed one would
    # draw ICMP port unreachable (see test_closed_port_unreachable).
    import socket as pysocket
    sink = pysocket.socket(pysocket.AF_INET, pysocket.SOCK_DGRAM)
    sink.bind(("127.0.0.1", 0))
    sink.setsockopt(pysocket.SOL_SOCKET, pysocket.SO_RCVBUF, 4096)
    ep = "127.0.0.1:%d" % sink.getsockname()[1]
    t0 = time.monotonic()
    with pytest.raises(homa.TimeoutError) as ei:
        cli.call(ep, b"anyone?", timeout=10)
    assert time.monotonic() - t0 < 5
    e = ei.value
    assert e.code == homa.ERR_TIMEOUT and isinstance(e, builtins.TimeoutError)
    assert isinstance(e, homa.HomaError) and isinstance(e, OSError)
    assert e.errno == errno.ETIMEDOUT and e.strerror.startswith("call: ")
    assert e.peer == ep
    # The same failure through send/recv carries the RPC id.
    rpc = cli.send(ep, b"x", cookie=9)
    with pytest.raises(homa.TimeoutError) as ei:
        cli.recv(homa.RECV_RESPONSE, timeout=10)
    assert ei.value.id == rpc and ei.value.cookie == 9
    sink.close()


def test_closed_port_unreachable(pair):
    _, cli = pair
    dead = homa.Socket(bind="127.0.0.1")
    ep = dead.endpoint
    dead.close()
    t0 = time.monotonic()
    with pytest.raises(homa.UnreachableError) as ei:
        cli.call(ep, b"anyone?", timeout=10)
    assert time.monotonic() - t0 < 1  # ICMP port unreachable, not the timeout
    e = ei.value
    assert e.code == homa.ERR_UNREACHABLE and e.errno == errno.EHOSTUNREACH
    assert e.peer == ep


@pytest.mark.skipif(os.geteuid() != 0, reason="the raw IP driver needs CAP_NET_RAW (root)")
def test_raw_driver_echo():
    with homa.Runtime(driver="raw", ignore_env=True) as rt:
        with homa.Socket(bind="127.0.0.1", runtime=rt) as srv, homa.Socket(runtime=rt) as cli:
            stop = threading.Event()
            t = threading.Thread(target=homa.serve, args=(srv, lambda r: bytes(r)),
                                 kwargs={"stop": stop, "poll": 0.02})
            t.start()
            for n in (0, 1, 1500, 100_000):
                data = os.urandom(n)
                assert bytes(cli.call(srv.endpoint, data, timeout=10)) == data
            stop.set()
            t.join()
            assert rt.counters()["datagrams_in"] > 0


def test_raw_driver_option_checked():
    with pytest.raises(ValueError):
        homa.Runtime(driver="carrier-pigeon")


def test_call_deadline(pair):
    srv, cli = pair  # srv never answers
    with pytest.raises(homa.TimeoutError) as ei:
        cli.call(srv.endpoint, b"slow", timeout=0.05)
    assert ei.value.code == homa.ERR_AGAIN
    assert srv.recv(timeout=5).is_request  # the request did arrive


def test_errors(pair):
    srv, cli = pair
    with pytest.raises(homa.PortInUseError) as ei:
        homa.Socket(port=srv.port)
    assert ei.value.code == homa.ERR_PORT_IN_USE
    with pytest.raises(homa.AddressError):
        cli.send("no-such-host.invalid:1", b"")
    with pytest.raises(ValueError):  # AddressError is a ValueError too
        cli.send("300.1.1.1:5", b"")
    with pytest.raises(TypeError):
        cli.send(1234, b"")
    with pytest.raises(TypeError):
        cli.send(srv.endpoint, "not bytes")
    with pytest.raises(homa.MessageTooLongError):
        cli.send(srv.endpoint, bytes(2_000_000))
    with pytest.raises(ValueError):
        cli.recv(flags=0)
    with pytest.raises(ValueError):
        cli.recv(timeout=-1)
    with pytest.raises(homa.NotFoundError):
        cli.abort(12345678)
    with pytest.raises(homa.NotFoundError):
        srv.reply(7777, b"")
    # Second reply to the same request.
    cli.send(srv.endpoint, b"q")
    req = srv.recv(timeout=5)
    srv.reply(req, b"a")
    with pytest.raises(homa.StateError):
        srv.reply(req, b"b")
    # Replying to a response, or on another socket.
    resp = cli.recv(timeout=5)
    with pytest.raises(ValueError):
        cli.reply(resp, b"")
    with pytest.raises(ValueError):
        cli.reply(req, b"")
    assert "invalid" in homa.strerror(homa.ERR_INVAL).lower()


def test_abort_client_rpc(pair):
    srv, cli = pair
    rpc = cli.send(srv.endpoint, b"never mind")
    cli.abort(rpc)
    assert cli.recv(id=0, flags=homa.RECV_RESPONSE, timeout=0.1) is None


def test_closed_socket():
    s = homa.Socket()
    s.close()
    s.close()
    assert s.closed
    with pytest.raises(homa.ShutdownError):
        s.send("127.0.0.1:1", b"")
    with pytest.raises(homa.ShutdownError):
        s.recv(timeout=0)
    with pytest.raises(homa.ShutdownError):
        s.fileno()


def test_close_wakes_blocked_recv():
    s = homa.Socket()
    errors = []

    def waiter():
        try:
            s.recv()
        except homa.ShutdownError as e:
            errors.append(e)

    t = threading.Thread(target=waiter)
    t.start()
    time.sleep(0.05)
    s.close()
    t.join(timeout=5)
    assert not t.is_alive() and len(errors) == 1


def test_select_fileno(pair):
    srv, cli = pair
    fd = srv.fileno()
    while srv.recv(timeout=0) is not None:
        pass
    cli.send(srv.endpoint, b"ping")
    r, _, _ = select.select([fd], [], [], 5)
    assert r == [fd]
    msg = srv.recv(timeout=0)
    assert bytes(msg) == b"ping"
    srv.reply(msg, b"pong")
    assert srv.recv(timeout=0) is None  # drained: the fd is clear again
    assert bytes(cli.recv(timeout=5)) == b"pong"


def test_asyncio_server(pair):
    srv, cli = pair

    async def main():
        loop = asyncio.get_running_loop()
        got = asyncio.Event()
        seen = []

        def readable():
            # Drain: the descriptor stays readable until recv(timeout=0) is None.
            while (m := srv.recv(timeout=0)) is not None:
                with m:
                    seen.append(bytes(m))
                    srv.reply(m, bytes(m)[::-1])
            if len(seen) == 3:
                got.set()

        loop.add_reader(srv.fileno(), readable)
        ids = [cli.send(srv.endpoint, f"req{i}".encode()) for i in range(3)]
        await asyncio.wait_for(got.wait(), 5)
        loop.remove_reader(srv.fileno())
        return ids, seen

    ids, seen = asyncio.run(main())
    assert sorted(seen) == [b"req0", b"req1", b"req2"]
    for i, rpc in enumerate(ids):
        assert bytes(cli.recv(id=rpc, timeout=5)) == f"req{i}"[::-1].encode()


def test_serve_helper(pair):
    srv, cli = pair
    stop = threading.Event()
    errors = []

    def handler(req):
        if bytes(req) == b"boom":
            raise RuntimeError("boom")
        return bytes(req).upper()

    t = threading.Thread(
        target=homa.serve, args=(srv, handler),
        kwargs={"stop": stop, "poll": 0.02, "on_error": lambda e, m: errors.append(e)})
    t.start()
    try:
        assert bytes(cli.call(srv.endpoint, b"abc", timeout=5)) == b"ABC"
        with pytest.raises(homa.TimeoutError):
            cli.call(srv.endpoint, b"boom", timeout=0.3)
        assert bytes(cli.call(srv.endpoint, b"again", timeout=5)) == b"AGAIN"
    finally:
        stop.set()
        t.join(timeout=5)
    assert not t.is_alive()
    assert len(errors) == 1 and str(errors[0]) == "boom"


def test_serve_ends_when_socket_closed():
    srv = homa.Socket(bind="127.0.0.1")
    t = threading.Thread(target=homa.serve, args=(srv, lambda r: b""))
    t.start()
    time.sleep(0.05)
    srv.close()
    t.join(timeout=5)
    assert not t.is_alive()


def test_runtime_options_and_counters():
    with homa.Runtime(busy_poll_us=0, faults="drop=0.2,seed=3", ignore_env=True,
                      config={"timeout_ticks": 200}) as rt:
        assert rt.config["timeout_ticks"] == 200
        with homa.Socket(bind="127.0.0.1", runtime=rt) as srv, homa.Socket(runtime=rt) as cli:
            assert srv.runtime is rt
            stop = threading.Event()
            t = threading.Thread(target=homa.serve, args=(srv, lambda r: bytes(r)),
                                 kwargs={"stop": stop, "poll": 0.02})
            t.start()
            for i in range(20):
                data = os.urandom(200_000)
                assert memoryview(cli.call(srv.endpoint, data, timeout=10)) == data
            stop.set()
            t.join()
            c = rt.counters()
            assert c["fault_drops"] > 0 and c["datagrams_out"] > 0
            with pytest.raises(RuntimeError):
                rt.close()  # sockets still open
    assert rt.closed
    with pytest.raises(ValueError):
        homa.Socket(runtime=rt)
    with pytest.raises(ValueError):
        homa.Runtime(faults="drop=lots")
    with pytest.raises(ValueError):
        homa.Runtime(config={"no_such_field": 1})
    with pytest.raises(TypeError):
        homa.Socket(runtime="default")
    assert isinstance(homa.default_runtime(), homa.Runtime)


@pytest.mark.skipif(not hasattr(os, "fork"), reason="needs fork()")
def test_fork_child_gets_its_own_runtime(pair):
    srv, cli = pair
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:  # child: inherited objects refuse to work, new ones do
        code = 0
        try:
            cli.send(srv.endpoint, b"x")
            code = 1
        except RuntimeError:
            pass
        try:
            with homa.Socket() as s:
                s.send(srv.endpoint, b"from child")
        except Exception:
            code = 2
        os.write(w, bytes([code]))
        os._exit(0)
    os.close(w)
    code = os.read(r, 1)
    os.waitpid(pid, 0)
    os.close(r)
    assert code == b"\0"
    msg = srv.recv(timeout=5)
    assert bytes(msg) == b"from child"
