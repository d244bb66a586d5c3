"""An S3 endpoint where nothing listens fails at this process's first request to it, not after retry_timeout. No
server: a port nothing listens on. Once something answered there, a refused connection is a server restarting and is
retried: tests/integration/test_s3_first_contact.py (a server that answers, then goes away)."""

from __future__ import annotations

import time

import pytest

from devstack import free_port
from essaflow.storage import S3Store, StorageError
from essaflow.storage import s3 as s3_module


@pytest.fixture(autouse=True)
def fresh_process(monkeypatch):
    """No endpoint reached yet, as in a new process."""
    monkeypatch.setattr(s3_module, "_REACHED", set())
    for name in ("ESSAFLOW_S3_ENDPOINT_URL", "AWS_ENDPOINT_URL_S3", "AWS_ENDPOINT_URL", "HTTP_PROXY", "http_proxy"):
        monkeypatch.delenv(name, raising=False)


def _store(url: str, **kw) -> S3Store:
    return S3Store("bkt", "p", endpoint_url=url, access_key="a", secret_key="b", **kw)


def test_a_first_request_where_nothing_listens_is_refused_at_once():
    url = f"http://127.0.0.1:{free_port()}"
    start = time.monotonic()
    with pytest.raises(StorageError) as err:
        _store(url).put_bytes("k", b"v")
    assert err.value.kind == "refused" and not err.value.transient
    assert str(err.value) == (f"S3 endpoint {url} is unreachable: connection refused, nothing listens there "
                              "(storage_uri s3://bkt/p); start the S3 server, or set ESSAFLOW_S3_ENDPOINT_URL to one "
                              "that runs")  # fmt: skip
    assert time.monotonic() - start < 2


def test_a_host_name_that_does_not_resolve_is_refused_at_once():
    with pytest.raises(StorageError, match="its host name does not resolve") as err:
        _store("http://no-such-host.invalid:8333").exists("k")
    assert err.value.kind == "refused"


def test_a_stubbed_client_is_never_probed(monkeypatch):
    from botocore.awsrequest import AWSResponse

    def nowhere(*_a, **_k):
        raise AssertionError("probed")

    monkeypatch.setattr(s3_module, "_nothing_listens", nowhere)
    store = _store(f"http://127.0.0.1:{free_port()}")  # nothing there: every request answered by the stub
    raw = type("Raw", (), {"stream": lambda self, **_: iter([b""]), "read": lambda self, *_: b""})()
    store.client.meta.events.register("before-send.s3", lambda request, **_: AWSResponse(request.url, 200, {}, raw))
    assert store.exists("k")


def test_a_proxied_endpoint_is_left_to_the_request(monkeypatch):
    monkeypatch.setenv("HTTP_PROXY", "http://127.0.0.1:3128")
    assert s3_module._nothing_listens(f"http://10.255.255.1:{free_port()}", 0.5) is None
