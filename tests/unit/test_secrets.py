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
