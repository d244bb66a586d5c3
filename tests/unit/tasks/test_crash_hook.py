"""The flows' failure hook (tasks/run.py::mark_failed) called as a Prefect worker calls it for a flow-run process
that died: in the worker's own process, outside any flow or task run context. It still marks the run's MLflow run
FAILED with the crash message, and logs the failure's JSON line on the flow run's logger.

A real MLflow tracking store (sqlite in the test's directory); the flow, flow run and state are the attributes the
hook reads, as Prefect hands them over."""

from __future__ import annotations

import json
import logging
import uuid
from types import SimpleNamespace

from prefect.settings import PREFECT_LOGGING_TO_API_ENABLED, temporary_settings

from essaflow import tracking
from essaflow.config import load_config
from tasks.run import mark_failed

CRASH = "Process exited with status code: -9. Process exited due to a SIGKILL signal."


def test_a_crash_hook_run_outside_any_run_context_marks_the_mlflow_run_failed(tmp_path, caplog):
    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    flow_run = SimpleNamespace(id=uuid.uuid4(), name="killed-run", parameters={"config": {"tracking_uri": uri}},
                               deployment_id=uuid.uuid4(), parent_task_run_id=None)  # fmt: skip
    opened = tracking.start_run(load_config(None, []), uri, str(flow_run.id), {})

    # the record would go to the Prefect API too; a unit test has no server to send it to
    crashed = SimpleNamespace(message=CRASH, name="Crashed")
    with temporary_settings({PREFECT_LOGGING_TO_API_ENABLED: False}), caplog.at_level(logging.ERROR):
        mark_failed(SimpleNamespace(name="finetune"), flow_run, crashed)

    run = tracking.client(uri).get_run(opened.run_id)
    assert run.info.status == "FAILED"
    assert "SIGKILL" in run.data.tags[tracking.FAILURE_TAG]
    logged = [r for r in caplog.records if r.name == "prefect.flow_runs"]
    assert len(logged) == 1, caplog.text
    assert "SIGKILL" in json.loads(logged[0].getMessage())["error"]
    assert logged[0].flow_run_id == str(flow_run.id)  # what the API handler files it under
