"""A Ray address where something listens passes the probe made before ray.init (tests/unit/cluster/test_address.py
has the addresses where nothing does). A server: a plain listening socket on 127.0.0.1."""

from __future__ import annotations

import socket

import pytest

from essaflow.cluster.address import check_reachable

pytestmark = pytest.mark.integration


def test_a_listening_port_passes_the_probe():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen()
        check_reachable(f"127.0.0.1:{s.getsockname()[1]}")
