"""Helpers shared by the benchmark scripts in this directory."""
import socket


def percentile(xs, q):
    """The q-th percentile (0-100) of xs, nearest rank."""
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(round(q / 100 * (len(xs) - 1))))]


def free_port():
    """A TCP port on 127.0.0.1 that was free a moment ago."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]
