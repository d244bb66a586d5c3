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
