"""Once an S3 endpoint answered in this process, a refused connection there is a server restarting and is retried
for the whole retry budget (tests/unit/storage/test_s3_first_contact.py: where nothing ever listened, the first
request fails at once). A server: http.server on 127.0.0.1, answering 200 to any HEAD."""

from __future__ import annotations

import http.server
import threading
import time

import pytest

from essaflow.storage import S3Store, StorageError
from essaflow.storage import s3 as s3_module

pytestmark = pytest.mark.integration


@pytest.fixture(autouse=True)
def fresh_process(monkeypatch):
    """No endpoint reached yet, as in a new process."""
    monkeypatch.setattr(s3_module, "_REACHED", set())
    for name in ("ESSAFLOW_S3_ENDPOINT_URL", "AWS_ENDPOINT_URL_S3", "AWS_ENDPOINT_URL", "HTTP_PROXY", "http_proxy"):
        monkeypatch.delenv(name, raising=False)


def _store(url: str, **kw) -> S3Store:
    return S3Store("bkt", "p", endpoint_url=url, access_key="a", secret_key="b", **kw)


class _Answers(http.server.BaseHTTPRequestHandler):
    """Any request: 200 and no body (a bucket and every object exist)."""

    def do_HEAD(self):  # noqa: N802 - http.server's name
        self.send_response(200)
        self.send_header("Content-Length", "0")
        self.end_headers()

    def log_message(self, *_):
        pass


def test_a_refused_connection_once_the_endpoint_answered_is_retried_as_a_restart():
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Answers)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    url = f"http://127.0.0.1:{server.server_address[1]}"
    store = _store(url, retry_timeout=0.5, max_attempts=1)
    assert store.exists("k") and url in s3_module._REACHED  # it answered in this process
    server.shutdown()
    server.server_close()  # the server goes away: restarting
    start = time.monotonic()
    with pytest.raises(StorageError, match=f"S3 endpoint {url} is unreachable \\(EndpointConnectionError\\)") as err:
        store.exists("k")
    assert err.value.kind == "unreachable" and err.value.transient
    assert time.monotonic() - start >= 0.5  # retried for its whole budget
