"""A URI password given to a flow (a Python caller, a deployment that does not enforce its schema) does not stay in
what Prefect stores as the flow run's parameters: the flow masks them as its first step, and still runs with the
URI. Read back from the real Prefect server's API. (A deployment's form refusing one before Prefect stores it:
tests/integration/test_pipeline_deployment.py.)"""

from __future__ import annotations

import json
import uuid

import pytest

from tests.integration.pipeline_support import client, flow_run_logs

pytestmark = pytest.mark.integration


def test_a_flow_masks_a_uri_password_in_its_stored_parameters_and_still_uses_it(stack_in_process, monkeypatch):
    from essaflow.retention import RetentionConfig
    from flows.gc import gc

    password = "pw-" + uuid.uuid4().hex
    url = stack_in_process.mlflow.url.replace("http://", f"http://gc-user:{password}@")
    monkeypatch.setenv("MLFLOW_TRACKING_URI", stack_in_process.mlflow.url)  # restored after the test
    empty = f"{stack_in_process.storage_uri}/empty-{uuid.uuid4().hex[:6]}"
    state = gc(RetentionConfig(storage_uri=empty, tracking_uri=url), dry_run=True, return_state=True)
    assert state.is_completed()  # the registry was read through the URI the caller gave
    flow_run_id = state.state_details.flow_run_id
    with client() as c:
        stored = c.read_flow_run(flow_run_id).parameters
    assert stored["retention"]["tracking_uri"] == url.replace(password, "***")
    assert password not in json.dumps(stored) and password not in "\n".join(flow_run_logs(str(flow_run_id)))
