"""`executors.testing.free_port`: the one helper that finds a port for a throwaway server.

`VirtualClock` and `wait_until` are pinned where they drive executors (`test_periodic.py`,
`test_service.py`, `test_validate_entry_points.py`).
"""

from __future__ import annotations

import socket

import pytest

from executors.testing import free_port


def test_free_port_is_released_for_the_caller_to_bind() -> None:
    """The port is a valid TCP port on loopback that a server can bind and listen on at once:
    the probing socket is closed before the function returns."""
    port = free_port()
    assert isinstance(port, int)
    assert 0 < port < 65536
    with socket.socket() as server:
        server.bind(("127.0.0.1", port))
        server.listen(1)
        with socket.create_connection(("127.0.0.1", port), timeout=5):
            pass


def test_free_port_has_no_listener() -> None:
    """Nothing listens on the returned port: a connection to it is refused."""
    port = free_port()
    with pytest.raises(ConnectionRefusedError), socket.socket() as client:
        client.settimeout(5)
        client.connect(("127.0.0.1", port))

