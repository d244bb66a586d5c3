"""A Ray address: its spelling checked when a config loads, and the head's port probed before ``ray.init``.

``ray.init(address=...)`` on an address where nothing listens does not fail: Ray rewrites 127.0.0.1 to the machine's
routable address, prints C++ warnings every few seconds and waits for the GCS without end, so a job would hang
(or, in the pipeline, have spent compute on its baseline first). A plain TCP connect to the head's port answers in
milliseconds: refused, timed out, or a host name that does not resolve, each one line naming the address. Never
imports ray.
"""

from __future__ import annotations

import ipaddress
import re
import socket
from urllib.parse import urlsplit

#: the addresses that name no head to probe: a new local Ray, or the cluster Ray finds started on this machine
NO_HEAD = ("local", "auto")
FORMS = "the head's GCS host:port (e.g. 10.0.0.5:6379), ray://host:10001 (Ray Client), auto, or local"
_LABEL = re.compile(r"(?!-)[A-Za-z0-9-]{1,63}(?<!-)")
PROBE_TIMEOUT_S = 3.0


class ClusterUnreachable(RuntimeError):
    """Nothing answers at the Ray address; the message names the address and what to do."""


def ray_address_problem(address: str) -> str | None:
    """What is wrong with the spelling of a Ray address (the words after the field), else None."""
    try:
        head_of(address)
    except ValueError as err:
        return str(err)
    return None


def head_of(address: str) -> tuple[str, int] | None:
    """(host, port) a Ray address names; None for `local` and `auto`; ValueError naming the accepted forms."""
    text = address.strip()
    if text in NO_HEAD:
        return None
    rest = text
    if "://" in text:
        scheme, _, rest = text.partition("://")
        if scheme != "ray":
            raise ValueError(f"{_shown(text)} has scheme {scheme!r}; a Ray address is {FORMS}")
        rest = rest.split("/", 1)[0].rsplit("@", 1)[-1]  # the user-info (if any) is no part of where
    try:
        parts = urlsplit(f"//{rest}")
        host, port = parts.hostname, parts.port
    except ValueError:
        host, port = None, None
    if not host or port is None or not _is_host(host):
        raise ValueError(f"{_shown(text)} is not a Ray address: give {FORMS}")
    return host, port


def check_reachable(address: str, source: str = "ray_address", timeout: float = PROBE_TIMEOUT_S) -> None:
    """ClusterUnreachable unless something accepts a TCP connection at the head's port within `timeout` seconds;
    `source` names where the address came from (`ray_address`, `RAY_ADDRESS`). `local` and `auto` pass."""
    try:
        head = head_of(address)
    except ValueError as err:
        raise ClusterUnreachable(f"{source}: {err}") from None
    if head is None:
        return
    host, port = head
    where = f"{host}:{port}"
    try:
        socket.create_connection(head, timeout=timeout).close()
    except OSError as err:
        raise ClusterUnreachable(
            f"Ray cluster at {where} ({source}) is unreachable: {_why(err, timeout)}; start its head there "
            f"(ray start --head --port {port}), point ray_address / RAY_ADDRESS at a running cluster, or unset "
            "both for a new local Ray"
        ) from None


def _why(err: OSError, timeout: float) -> str:
    if isinstance(err, ConnectionRefusedError):
        return "connection refused, nothing listens on that port"
    if isinstance(err, socket.gaierror):
        return "its host name does not resolve"
    if isinstance(err, TimeoutError):
        return f"no answer within {timeout:g} s"
    return err.strerror or type(err).__name__


def _is_host(host: str) -> bool:
    try:
        ipaddress.ip_address(host)
        return True
    except ValueError:
        return len(host) <= 253 and all(_LABEL.fullmatch(label) for label in host.rstrip(".").split("."))


def _shown(text: str) -> str:
    from essaflow.secrets import mask_passwords

    text = mask_passwords(text)
    return repr(text) if len(text) <= 80 else repr(text[:80]) + f"... ({len(text):,} characters)"
