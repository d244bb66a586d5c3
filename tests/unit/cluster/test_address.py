"""A Ray address: refused at config load when it is no address, and probed before ray.init, so an address where
nothing listens fails within seconds with one line naming it (ray.init would wait without end). An address where
something listens passes: tests/integration/test_cluster_address.py (a listening socket is a server)."""

from __future__ import annotations

import socket
import time

import pytest

from essaflow.cluster.address import ClusterUnreachable, check_reachable, head_of, ray_address_problem
from essaflow.config import ConfigError, load_config


def _closed_port() -> int:
    """A port on 127.0.0.1 where nothing listens (bound, then released)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.mark.parametrize(
    ("address", "head"),
    [
        ("10.0.0.5:6379", ("10.0.0.5", 6379)),
        ("head-node.cluster.local:6379", ("head-node.cluster.local", 6379)),
        ("ray://bob:pw@head:10001", ("head", 10001)),
        ("[::1]:6379", ("::1", 6379)),
        ("auto", None),
        ("local", None),
    ],
)
def test_ray_addresses_name_their_head(address, head):
    assert head_of(address) == head and ray_address_problem(address) is None


@pytest.mark.parametrize("address", ["not a host", "head", "head:port", "http://head:6379", "head:99999", ":6379"])
def test_a_malformed_ray_address_is_a_config_error_naming_the_forms(address):
    with pytest.raises(ConfigError, match=r"ray_address: .* (is not a Ray address|has scheme)") as err:
        load_config(None, [f"ray_address={address}"])
    assert "host:port" in str(err.value)


def test_an_address_where_nothing_listens_fails_within_seconds_naming_it():
    port = _closed_port()
    t0 = time.monotonic()
    with pytest.raises(ClusterUnreachable) as err:
        check_reachable(f"127.0.0.1:{port}", "RAY_ADDRESS")
    assert time.monotonic() - t0 < 3
    said = str(err.value)
    assert said.startswith(f"Ray cluster at 127.0.0.1:{port} (RAY_ADDRESS) is unreachable: connection refused")
    assert "\n" not in said


def test_a_host_that_does_not_resolve_and_a_malformed_environment_address_are_named():
    with pytest.raises(ClusterUnreachable, match="does not resolve"):
        check_reachable("no-such-host.invalid:6379")
    with pytest.raises(ClusterUnreachable, match="^RAY_ADDRESS: 'not a host' is not a Ray address"):
        check_reachable("not a host", "RAY_ADDRESS")


def test_local_and_auto_are_not_probed():
    check_reachable("local")  # nothing to probe
    check_reachable("auto")
