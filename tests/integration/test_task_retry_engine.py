"""The one retry policy (tasks/retry.py) as Prefect's task engine runs it, against the session's Prefect server: a
permanent error (a bad config, a missing file) is attempted once and fails with its message; a transient one is
retried until it passes. The task is the compare flow's `open_arm`, with its MLflow call replaced by a stand-in."""

from __future__ import annotations

import pytest

from essaflow import tracking
from essaflow.compare.config import Arm
from essaflow.config import ConfigError, PipelineConfig
from essaflow.refs import RunRef
from essaflow.tracking import TrackedRun
from tasks.compare import open_arm

pytestmark = pytest.mark.integration

PARENT = RunRef(
    run_id="parent", name="retry-test", storage_uri="file:///nowhere", tracking_uri="file:///nowhere",
    experiment_id="0", mlflow_run_id="mlflow-parent",
)  # fmt: skip
ARM = Arm(method="essa", seed=0, config=PipelineConfig(method="essa", name="retry-test"))


@pytest.fixture
def prefect_api(prefect_server):
    from prefect.settings import PREFECT_API_URL, temporary_settings

    with temporary_settings(updates={PREFECT_API_URL: f"{prefect_server.url}/api"}):
        yield


def _run(monkeypatch, errors: list[BaseException]) -> tuple[object, int]:
    """Run open_arm (waits of 10 ms) with MLflow's open_run raising `errors` in turn, then succeeding."""
    attempts = []

    def open_run(cfg, tracking_uri, run_id, tags):
        attempts.append(run_id)
        if len(attempts) <= len(errors):
            raise errors[len(attempts) - 1]
        return TrackedRun(tracking_uri, "0", "mlflow-child")

    monkeypatch.setattr(tracking, "start_run", open_run)
    state = open_arm.with_options(retry_delay_seconds=[0.01, 0.01], retry_jitter_factor=None)(
        PARENT, ARM, return_state=True
    )
    return state, len(attempts)


@pytest.mark.parametrize("error", [ConfigError("essa.population must be even"), FileNotFoundError("no such file")])
def test_a_permanent_error_is_attempted_once_and_fails_with_its_message(prefect_api, monkeypatch, error):
    state, attempts = _run(monkeypatch, [error] * 3)

    assert state.is_failed() and attempts == 1
    with pytest.raises(type(error), match=str(error)):
        state.result()


def test_a_transient_error_is_retried_until_it_passes(prefect_api, monkeypatch):
    state, attempts = _run(monkeypatch, [ConnectionResetError("peer reset"), TimeoutError("slow")])

    assert state.is_completed() and attempts == 3  # both retries used
    assert state.result().mlflow_run_id == "mlflow-child"


def test_a_transient_error_that_persists_fails_after_the_retries(prefect_api, monkeypatch):
    state, attempts = _run(monkeypatch, [ConnectionResetError("peer reset")] * 5)

    assert state.is_failed() and attempts == 1 + open_arm.retries
