"""essaflow.secrets: the one credential rule behind worker env, MLflow params, log scrubbing and S3 messages."""

from __future__ import annotations

import pytest

from essaflow import cluster, secrets, tracking
from essaflow.storage import S3Store


@pytest.mark.parametrize(
    ("key", "secret"),
    [
        ("AWS_SECRET_ACCESS_KEY", True),
        ("AWS_ACCESS_KEY_ID", True),
        ("PREFECT_API_KEY", True),
        ("GITHUB_AUTHTOKEN", True),
        ("DB_PASS", True),
        ("storage.s3.secret_key", True),  # dotted config keys split into words like env names
        ("model.hf-token", True),
        ("TOKENIZERS_PARALLELISM", False),
        ("sampling.max_new_tokens", False),  # "tokens" is no TOKEN word
        ("grpo.kl_beta", False),
        ("S3_BUCKET", False),
    ],
)
def test_is_secret_by_name(key, secret):
    assert secrets.is_secret(key) is secret


def test_every_user_of_the_rule_is_the_same_function():
    assert cluster.is_secret is secrets.is_secret
    assert tracking.scrub is secrets.scrub and tracking.safe_uri is secrets.safe_uri


def test_scrub_masks_url_userinfo_then_known_values():
    text = "AKIAEXAMPLE1 failed for redis://:pw@cache:6379 and s3://u:p@host/b"
    assert secrets.scrub(text, ["AKIAEXAMPLE1"]) == "*** failed for redis://***@cache:6379 and s3://***@host/b"
    assert secrets.scrub("ab", known_values=[]) == "ab"


def test_scrub_masks_values_of_secret_named_environment_variables_only(monkeypatch):
    monkeypatch.setenv("ESSAFLOW_TEST_PASSWORD", "hunter22")
    monkeypatch.setenv("ESSAFLOW_TEST_BUCKET", "plainbucket")
    monkeypatch.setenv("ESSAFLOW_TEST_TOKEN", "ab")  # too short to mask without garbling the text
    assert secrets.scrub("hunter22 plainbucket ab") == "*** plainbucket ab"


def test_urls_lose_their_credentials_and_keep_the_rest():
    assert (
        secrets.mask_url_password("postgresql://mlflow:pw@db:5432/mlflow") == "postgresql://mlflow:***@db:5432/mlflow"
    )
    assert secrets.mask_url_password("https://user@host/x") == "https://user@host/x"
    assert secrets.safe_uri("http://u:p@127.0.0.1:5000/path?x=1#f") == "http://127.0.0.1:5000/path"
    assert secrets.safe_uri("not a url") == "not a url" and secrets.safe_uri("http://h:bad/") == "http://h:bad/"
    s3 = S3Store("b", endpoint_url="http://key:secret@127.0.0.1:8333", access_key="AKID", secret_key="sk")
    assert s3.endpoint == "http://127.0.0.1:8333" and "secret" not in repr(s3)  # what S3 messages name
    aws = S3Store("b", region="eu-west-1", access_key="AKID", secret_key="sk")
    assert repr(aws) == "S3Store('s3://b', endpoint='<default AWS endpoint>')"


def test_masking_a_long_name_takes_linear_time():
    import time

    t0 = time.monotonic()
    for text in ("a" * 100_000, "a-" * 50_000, "x" * 50_000 + "://u:pw@h/"):
        assert "pw@" not in secrets.mask_passwords(text) and "pw@" not in secrets.scrub(text, [])
    assert time.monotonic() - t0 < 1


def test_a_logged_traceback_of_a_client_error_echoing_its_url_is_masked_by_the_handler_filter():
    """botocore and MLflow echo the endpoint URL, password and all: every handler's MaskSecrets masks the message and
    each message along the traceback's chain before the record is written anywhere (Prefect's API included)."""
    import io
    import logging

    url = "http://sweep-user:pw-planted-1234@127.0.0.1:9/bucket"
    out = io.StringIO()
    handler = logging.StreamHandler(out)
    handler.addFilter(secrets.MaskSecrets())
    log = logging.getLogger("essaflow.test_masking")
    log.addHandler(handler)
    try:
        try:
            raise ConnectionError(f'Could not connect to the endpoint URL: "{url}"')
        except ConnectionError as err:
            raise RuntimeError("upload failed") from err
    except RuntimeError:
        log.exception("upload to %s failed", url)
    finally:
        log.removeHandler(handler)
    text = out.getvalue()
    assert "pw-planted-1234" not in text and text.count("http://***@127.0.0.1:9/bucket") == 2
    assert "Traceback" in text and "The above exception was the direct cause" in text


def test_an_s3_error_chain_names_no_password_of_the_endpoint_url():
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]  # nothing listens once closed
    store = S3Store("b", endpoint_url=f"http://u:pw-planted-5678@127.0.0.1:{port}", access_key="AKID",
                    secret_key="sk", retry_timeout=0, max_attempts=1)  # fmt: skip
    with pytest.raises(Exception) as err:  # noqa: PT011 - the chain is what is checked
        store.exists("runs")
    chain, exc = [], err.value
    while exc is not None:
        chain.append(f"{type(exc).__name__}: {exc}")
        exc = exc.__cause__ or exc.__context__
    assert len(chain) > 1 and not any("pw-planted-5678" in c for c in chain), chain
    assert any(f"http://***@127.0.0.1:{port}" in c for c in chain)  # botocore's own message, masked in place


def test_a_masked_stream_masks_each_line_whoever_prints_it_and_in_however_many_pieces(monkeypatch):
    """MLflow ends a run with "View run ... at: <tracking URI>" on sys.stdout: the stream masks the line as it ends
    (a URI written in pieces too: its password; the user stays readable), and writes what is left of a line when
    flushed."""
    import io

    monkeypatch.setenv("ESSAFLOW_TEST_SECRET_KEY", "sk-planted-4321")
    out = io.StringIO()
    stream = secrets.MaskedStream(out)
    stream.write("🏃 View run r at: http://user:pw-planted")
    assert out.getvalue() == ""  # held until its line ends
    stream.write("-9876@127.0.0.1:5000/#/experiments/1\n")
    print("key", "sk-planted-4321", file=stream)
    stream.writelines(["bar http://:pw-planted-2468@h", " 50%"])
    stream.flush()
    link = "🏃 View run r at: http://user:***@127.0.0.1:5000/#/experiments/1\n"
    assert out.getvalue() == link + "key ***\nbar http://:***@h 50%"
    assert stream.encoding == out.encoding and stream.wrapped is out
    with pytest.raises(TypeError):
        stream.write(b"bytes")  # what a text stream says (click asks it to tell text from binary streams)


def test_masking_the_std_streams_wraps_each_once_and_moves_the_handlers_writing_to_them(monkeypatch):
    import io
    import logging
    import sys

    out, err = io.StringIO(), io.StringIO()
    monkeypatch.setattr(sys, "stdout", out)
    monkeypatch.setattr(sys, "stderr", err)
    handler = logging.StreamHandler(err)
    log = logging.getLogger("essaflow.test_std_streams")
    log.addHandler(handler)
    try:
        secrets.mask_std_streams()
        masked = sys.stdout
        secrets.mask_std_streams()
        assert sys.stdout is masked and sys.stdout.wrapped is out and sys.stderr.wrapped is err
        assert handler.stream is sys.stderr
        print("http://u:pw-planted-1357@h")
        log.warning("http://u:pw-planted-1357@h")
    finally:
        log.removeHandler(handler)
    assert out.getvalue() == "http://u:***@h\n" and err.getvalue() == "http://u:***@h\n"


def test_a_tracking_client_given_a_password_masks_the_std_streams(monkeypatch):
    """A flow a Prefect worker runs, or a Python caller, has no `essaflow` command to mask its streams."""
    import io
    import sys

    from essaflow.tracking.server import client

    monkeypatch.setattr(sys, "stdout", io.StringIO())
    monkeypatch.setattr(sys, "stderr", io.StringIO())
    client("http://127.0.0.1:9")
    assert not isinstance(sys.stdout, secrets.MaskedStream)
    client("http://u:pw@127.0.0.1:9")
    assert isinstance(sys.stdout, secrets.MaskedStream) and isinstance(sys.stderr, secrets.MaskedStream)


def test_the_password_of_a_url_in_the_environment_is_masked_wherever_it_is_printed(monkeypatch):
    """`run --set tracking_uri=...` moves the URI into MLFLOW_TRACKING_URI: its password, as written and decoded, is
    masked outside its URL too."""
    monkeypatch.setenv("MLFLOW_TRACKING_URI", "http://u:pw%40planted@127.0.0.1:5000")
    assert secrets.mask_output("auth pw@planted pw%40planted") == "auth *** ***"
    assert secrets.scrub("auth pw@planted") == "auth ***"
