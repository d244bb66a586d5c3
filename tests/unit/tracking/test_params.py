"""What essaflow.tracking sends to MLflow never holds a credential; metric names fit MLflow's rules."""

from __future__ import annotations

import pytest

from essaflow.config import ConfigError, PipelineConfig, load_config
from essaflow.tracking import flat_params, metric_key, safe_uri, scrub


def test_params_are_the_flattened_config_without_credentials(monkeypatch):
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "topsecretvalue")
    cfg = PipelineConfig(tracking_uri="https://alice:topsecretvalue@mlflow.example.com/x?token=abc")
    params = flat_params(cfg)
    assert params["tracking_uri"] == "https://mlflow.example.com/x"
    assert params["essa.population"] == "32" and params["eval.ks"] == "[1, 2, 4, 8, 16]"
    assert "sampling.max_new_tokens" in params  # "tokens" is no credential word
    assert not any("topsecretvalue" in v for v in params.values())


def test_scrub_masks_secret_env_values_and_uri_userinfo(monkeypatch):
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "AKIAEXAMPLEKEY")
    assert scrub("key AKIAEXAMPLEKEY at s3://u:p@host/b") == "key *** at s3://***@host/b"
    assert safe_uri("http://u:p@127.0.0.1:5000/path?x=1") == "http://127.0.0.1:5000/path"


def test_metric_names_have_no_at_sign():
    assert metric_key("pass@16") == "pass_at_16"


def test_the_gate_metric_must_be_measured():
    assert load_config(None, ["gate.metric=greedy"]).gate.metric == "greedy"
    assert flat_params(load_config(None, ["gate.metric=greedy"]))["gate.metric"] == "greedy"
    with pytest.raises(ConfigError, match="gate.metric 'pass@3' is not measured"):
        load_config(None, ["gate.metric=pass@3"])
