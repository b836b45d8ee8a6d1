"""A free TCP port on loopback, for the throwaway servers the tests and benchmarks start."""

from __future__ import annotations

import socket

__all__ = ("free_port",)


def free_port() -> int:
    """A port on 127.0.0.1 that nothing listens on right now (the kernel picks it).

    The port is released before the caller's server binds it, so another process could take it
    in between; on a test machine that race is rare enough, and the server then fails loudly.
    """
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])
