"""Bad input stops `essaflow run` before any compute, with one clear error naming the problem, leaving nothing
behind: an unknown config key, an unreachable S3 endpoint, wrong S3 credentials, an unreachable MLflow server."""

from __future__ import annotations

import json
import subprocess
import sys
import time
import uuid

import pytest
import yaml

from devstack import free_port
from tests.integration.pipeline_support import REPO, leaks, tiny
from tests.support.waiting import wait_until

pytestmark = pytest.mark.integration


def _run(cfg: dict, env: dict, tmp_path) -> subprocess.CompletedProcess:
    path = tmp_path / "config.yaml"
    path.write_text(yaml.safe_dump(cfg))
    cmd = [sys.executable, "-m", "cli.main", "run", str(path), "--no-progress"]
    return subprocess.run(cmd, cwd=REPO, env=env, capture_output=True, text=True, timeout=300)


@pytest.fixture
def case(pipeline_stack):
    """A fresh pipeline name and storage prefix, so 'nothing left behind' can be checked exactly."""
    name = f"bad-{uuid.uuid4().hex[:6]}"
    return name, f"{pipeline_stack.storage_uri}/{name}"


def _error_line(proc: subprocess.CompletedProcess) -> str:
    lines = [line for line in proc.stderr.splitlines() if line.startswith("error: ")]
    assert len(lines) == 1, proc.stderr[-3000:]
    return lines[0]


def _nothing_left(pipeline_stack, name: str, prefix: str) -> None:
    import mlflow

    store = pipeline_stack.s3.store(prefix.removeprefix(f"s3://{pipeline_stack.s3.bucket}/"))
    assert store.list("") == []
    client = mlflow.MlflowClient(pipeline_stack.mlflow.url)
    exp = client.get_experiment_by_name(name)
    assert exp is None or client.search_runs([exp.experiment_id]) == []
    assert client.search_registered_models(f"name = '{name}'") == []


def test_an_unknown_config_key_is_named(pipeline_stack, case, tmp_path):
    name, prefix = case
    proc = _run(
        {**tiny(name=name, storage_uri=prefix), "essa": {"populaton": 8}}, pipeline_stack.subprocess_env(), tmp_path
    )
    assert proc.returncode == 2
    assert "essa.populaton: unknown key" in _error_line(proc)
    _nothing_left(pipeline_stack, name, prefix)


def test_an_unreachable_s3_endpoint_is_named(pipeline_stack, case, tmp_path):
    name, prefix = case
    dead = f"http://127.0.0.1:{free_port()}"
    env = pipeline_stack.subprocess_env(ESSAFLOW_S3_ENDPOINT_URL=dead, AWS_ENDPOINT_URL_S3=dead)
    proc = _run(tiny(name=name, method="none", storage_uri=prefix), env, tmp_path)
    assert proc.returncode == 1
    line = _error_line(proc)
    assert "StorageError" in line and dead in line and "unreachable" in line
    _nothing_left(pipeline_stack, name, prefix)


def test_wrong_s3_credentials_are_named_and_not_echoed(pipeline_stack, case, tmp_path):
    name, prefix = case
    wrong = "wrong-" + uuid.uuid4().hex
    env = pipeline_stack.subprocess_env(AWS_SECRET_ACCESS_KEY=wrong)
    proc = _run(tiny(name=name, method="none", storage_uri=prefix), env, tmp_path)
    assert proc.returncode == 1
    line = _error_line(proc)
    assert "StorageError" in line and "credentials" in line.lower()
    assert leaks([wrong, *pipeline_stack.secrets], {"stdout": proc.stdout, "stderr": proc.stderr}) == []
    _nothing_left(pipeline_stack, name, prefix)


def test_an_unreachable_mlflow_server_is_named_before_any_compute(pipeline_stack, case, tmp_path):
    name, prefix = case
    dead = f"http://127.0.0.1:{free_port()}"
    proc = _run(
        tiny(name=name, method="none", storage_uri=prefix),
        pipeline_stack.subprocess_env(MLFLOW_TRACKING_URI=dead),
        tmp_path,
    )
    assert proc.returncode == 1
    line = _error_line(proc)
    assert "TrackingError" in line and dead in line and "unreachable" in line
    assert "prepare_dataset" not in proc.stderr  # failed at the preflight, before the first stage
    _nothing_left(pipeline_stack, name, prefix)


def test_a_deployment_run_refuses_a_model_directory_without_weights_at_its_start(stack_in_process, case, tmp_path):
    """The deployment's flow (no CLI preflight in front of it): open_run names the path and the missing files,
    once, no retry, no resume offered, and no other stage runs."""
    from flows.finetune import finetune_essa
    from flows.parameters import ESSAPipelineConfig
    from tasks import failures
    from tests.integration.pipeline_support import flow_run_logs, task_run_states

    name, prefix = case
    checkpoint = tmp_path / "my-model"
    checkpoint.mkdir()
    (checkpoint / "config.json").write_text('{"model_type": "llama"}')
    cfg = {k: v for k, v in tiny(name=name, storage_uri=prefix).items() if k != "grpo"}
    params = ESSAPipelineConfig(**{**cfg, "model": {"name_or_path": str(checkpoint)}})
    state = finetune_essa(params, return_state=True)
    assert state.is_failed()
    flow_run_id = str(state.state_details.flow_run_id)
    failure, _ = failures.pop(flow_run_id)
    assert failure.stage == "open_run" and failure.attempts == 1 and not failure.resumable
    assert f"{checkpoint} has config.json but no weights" in failure.error and "tokenizer files" in failure.error
    assert task_run_states(flow_run_id, {"open_run"}) == {"open_run": "Failed"}
    lines = wait_until(lambda: [json.loads(m) for m in flow_run_logs(flow_run_id) if m.startswith('{"error"')], 30,
                       "the failure's JSON line in the run's log (it reaches the server in batches)", every=0.5)
    assert len(lines) == 1 and lines[0]["stage"] == "open_run" and lines[0]["resume"] is None
    _nothing_left(stack_in_process, name, prefix)


def test_an_evaluate_run_of_a_model_the_registry_lacks_fails_at_its_first_task(stack_in_process, case):
    """The evaluate flow (a deployment's, no CLI in front of it): the model is looked up before a run opens or a
    dataset is prepared; one attempt, no other stage, the message naming the model and the registry."""
    from flows.evaluate import evaluate_model
    from flows.parameters import EvaluateParams
    from tasks import failures
    from tests.integration.pipeline_support import task_run_states

    name, prefix = case
    t0 = time.monotonic()
    state = evaluate_model(EvaluateParams(model_name=name, alias="champion", storage_uri=prefix), return_state=True)
    took = time.monotonic() - t0
    assert state.is_failed()
    flow_run_id = str(state.state_details.flow_run_id)
    failure, _ = failures.pop(flow_run_id)
    assert failure.stage == f"check-{name}-champion" and failure.attempts == 1
    assert f"models:/{name}@champion: no registered model {name!r}" in failure.error
    assert task_run_states(flow_run_id, {f"check-{name}-champion"}) == {f"check-{name}-champion": "Failed"}
    _nothing_left(stack_in_process, name, prefix)
    print(f"missing model found by the evaluate flow in {took:.1f}s")
