"""The deployed pipeline on real servers: `prefect deploy --all` from prefect.yaml, finetune-essa run by a process
worker (--run-once) to completion, the champion's pyfunc loading by alias, verified artifacts in the bucket, the
dataset cache hit by a second (F-GRPO) run, the UI pointed at its own API, and no credential anywhere."""

from __future__ import annotations

import json
import urllib.request
import uuid

import pytest

from essaflow.storage import MANIFEST
from tests.integration.pipeline_support import (
    ensure_pool,
    flow_run_artifacts,
    flow_run_logs,
    flow_run_state,
    leaks,
    prefect_cli,
    run_deployment,
    task_run_states,
    tiny,
)
from tests.support.pyfunc import greedy_answers

pytestmark = pytest.mark.integration
MODEL = "pipeline-test"


def tiny_for(method: str) -> dict:
    """The test budgets for one method's deployment: its form has no section of the other method."""
    return {k: v for k, v in tiny().items() if k != {"essa": "grpo", "fgrpo": "essa"}[method]}


@pytest.fixture(scope="module")
def deployed(pipeline_stack, stack_in_process_module):
    env = pipeline_stack.subprocess_env()
    ensure_pool(env)
    out = prefect_cli("--no-prompt", "deploy", "--all", env=env)
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-3000:]
    return out.stdout


@pytest.fixture(scope="module")
def essa_run(deployed, pipeline_stack, tmp_path_factory):
    params = {"config": tiny_for("essa")}  # onto configs/tiny-essa.yaml, key by key
    return run_deployment(
        "finetune/finetune-essa", params, pipeline_stack.subprocess_env(), tmp_path_factory.mktemp("w")
    )


@pytest.fixture(scope="module")
def fgrpo_run(essa_run, pipeline_stack, tmp_path_factory):
    params = {"config": tiny_for("fgrpo")}
    return run_deployment(
        "finetune/finetune-fgrpo", params, pipeline_stack.subprocess_env(), tmp_path_factory.mktemp("w")
    )


def test_deploy_all_creates_the_three_deployments_with_schedules_and_a_form(deployed):
    from tests.integration.pipeline_support import client

    with client() as c:
        deps = {d.name: d for d in c.read_deployments()}
    assert {"finetune-essa", "finetune-fgrpo", "evaluate-champion", "gc-storage"} <= set(deps)
    crons = {n: [s.schedule.cron for s in deps[n].schedules] for n in ("finetune-essa", "finetune-fgrpo")}
    assert crons == {"finetune-essa": ["0 2 * * *"], "finetune-fgrpo": ["0 3 * * 0"]}
    assert all(d.work_pool_name == "essaflow-process" for d in deps.values())
    # the UI renders a form from this schema: typed, documented fields titled by key, enums as choices, only the
    # deployment's own method; no parameters stored, so a Quick run or the schedule runs the preset
    schema = deps["finetune-essa"].parameter_openapi_schema
    config = schema["definitions"]["ESSAPipelineConfig"]["properties"]
    assert config["method"]["enum"] == ["essa"] and "grpo" not in config and "GRPOConfig" not in schema["definitions"]
    assert config["data"]["title"] == "data" and "description" in config["gate"]
    assert schema["definitions"]["ESSAConfig"]["properties"]["population"]["type"] == "integer"
    assert schema["properties"]["config"]["default"]["essa"]["strategy"] == "es"  # configs/tiny-essa.yaml
    assert deps["finetune-essa"].parameters == {} and deps["finetune-fgrpo"].parameters == {}


def test_a_uri_password_typed_into_a_form_is_refused_before_prefect_stores_it(deployed, pipeline_stack):
    """What the UI posts for a Custom run, each deployment's URI settings: Prefect checks the parameters against
    the deployment's schema first, so the run is refused (409) and no flow run holding the password exists."""
    from prefect.client.schemas.filters import DeploymentFilter, DeploymentFilterId
    from prefect.exceptions import PrefectHTTPStatusError

    from tests.integration.pipeline_support import client

    password = "pw-" + uuid.uuid4().hex
    uri = f"http://ui-user:{password}@127.0.0.1:5000"
    typed = {
        "finetune/finetune-essa": [{"config": {"tracking_uri": uri}}, {"config": {"ray_address": uri}}],
        "evaluate/evaluate-champion": [{"params": {"tracking_uri": uri}}],
        "gc/gc-storage": [{"retention": {"tracking_uri": uri}}],
    }
    with client() as c:
        ids = []
        for name, forms in typed.items():
            deployment = c.read_deployment_by_name(name)
            ids.append(deployment.id)
            for params in forms:
                with pytest.raises(PrefectHTTPStatusError) as refused:
                    c.create_flow_run_from_deployment(deployment.id, parameters=params)
                assert refused.value.response.status_code == 409, params
                assert "does not match" in refused.value.response.text
        runs = c.read_flow_runs(deployment_filter=DeploymentFilter(id=DeploymentFilterId(any_=ids)))
    assert password not in json.dumps([r.parameters for r in runs])
    server_logs = b"".join(p.read_bytes() for p in pipeline_stack.prefect.state_dir.glob("*.log"))
    assert password.encode() not in server_logs


def test_finetune_essa_deployment_completes_on_a_process_worker(essa_run):
    flow_run_id, took, _ = essa_run
    assert flow_run_state(flow_run_id) == "Completed"
    states = task_run_states(flow_run_id, {"train", "register"})
    assert states["train"] == "Completed" and states["register"] == "Completed", states
    artifacts = flow_run_artifacts(flow_run_id)  # what the Prefect UI shows for the run
    assert {"finetune-summary", "passk-before-after", "passk-base", "passk-tuned", "train-progress"} <= set(artifacts)
    assert artifacts["train-progress"] == 100.0
    assert "MLflow run" in artifacts["finetune-summary"] and "runs/" in artifacts["finetune-summary"]
    assert "Method: ESSA(es, accuracy); fitness: black-box reward" in artifacts["finetune-summary"]  # the preset's
    print(f"finetune-essa via worker: {took:.1f}s")


def test_champion_pyfunc_loads_by_alias_and_generates(essa_run, stack_in_process_module):
    import mlflow

    flow_run_id, _, _ = essa_run
    client = mlflow.MlflowClient()
    version = client.get_model_version_by_alias(MODEL, "champion")
    assert version.tags["essaflow.run_id"] == flow_run_id
    assert version.tags["method"] == "essa" and version.tags["base_model"] == "builtin:tiny"
    assert version.tags["fitness_kind"] == "black-box reward" and version.tags["method_label"] == "ESSA(es, accuracy)"
    assert len(version.tags["dataset_hash"]) == 16 and version.tags["git_commit"]
    assert set(json.loads(version.tags["pass_at_k"])) >= {"pass@1", "pass@4"}
    run = client.get_run(version.run_id)  # the pipeline's MLflow run: params, per-generation metrics, plots
    assert run.data.params["method"] == "essa" and run.data.params["essa.population"] == "4"
    assert run.data.params["essa.fitness_kind"] == "black-box reward"
    assert run.data.tags["essaflow.fitness_kind"] == "black-box reward"
    assert [m.step for m in client.get_metric_history(run.info.run_id, "train.tie_share")] == [1, 2]
    assert [m.step for m in client.get_metric_history(run.info.run_id, "train.fitness_mean")] == [1, 2]
    assert {"eval.base.pass_at_1", "eval.tuned.pass_at_4"} <= set(run.data.metrics)
    logged = {a.path for a in client.list_artifacts(run.info.run_id, "eval")}
    assert {"eval/passk_table.json", "eval/passk_before_after.png"} <= logged
    assert run.data.tags["prefect.flow_run_id"] == flow_run_id
    model = mlflow.pyfunc.load_model(f"models:/{MODEL}@champion")
    out = model.predict(["12+7=", "40-3="])
    assert out == greedy_answers(model, ["12+7=", "40-3="])  # the evaluation generator's greedy text
    recorded = json.loads(version.tags["essaflow.data_config"])  # the run's prompt format, stored with the model
    assert model.unwrap_python_model().prompt_template == (recorded["prompt_template"] or "{prompt}")


def test_bucket_holds_dataset_checkpoints_adapter_and_eval_with_valid_checksums(essa_run, pipeline_stack):
    flow_run_id, _, _ = essa_run
    store = pipeline_stack.store()
    keys = store.list("")
    # this run's dataset: other modules of the session share the bucket prefix, with their own data settings
    data = store.get_json(f"runs/{flow_run_id}/record/run.json")["config"]["data"]
    prefixes = {"/".join(k.split("/")[:3]) for k in keys if k.startswith("datasets/")}
    datasets = sorted(p for p in prefixes if store.get_json(f"{p}/info.json")["config"] == data)
    checkpoints = sorted({"/".join(k.split("/")[:4]) for k in keys if k.startswith(f"runs/{flow_run_id}/checkpoints/")})
    assert len(datasets) == 1 and len(checkpoints) == 2  # generations 1 and 2
    run = f"runs/{flow_run_id}"
    for prefix in [*datasets, *checkpoints, f"{run}/adapter", f"{run}/eval/base", f"{run}/eval/tuned"]:
        manifest = store.verify(prefix)  # every file re-read and checked against its SHA-256
        assert manifest["files"], prefix
    assert {"train.parquet", "eval.parquet", "sft.parquet"} <= set(store.read_manifest(datasets[0])["files"])
    assert {"passk.json", "passk.png", "samples.jsonl.gz"} == set(store.read_manifest(f"{run}/eval/tuned")["files"])
    # nothing partial is visible: every object of this run belongs to a committed (manifested) artifact
    committed = {k.rsplit("/", 1)[0] for k in keys if k.endswith("/" + MANIFEST)}
    orphans = [k for k in keys if k.startswith(run) and not any(k.startswith(c + "/") for c in committed)
               and not k.startswith(f"{run}/lease/")]  # fmt: skip  # the run's lease: coordination, not an artifact
    assert not orphans, orphans[:5]


def test_a_second_run_with_the_same_data_config_hits_the_dataset_cache(fgrpo_run):
    flow_run_id, took, _ = fgrpo_run
    assert flow_run_state(flow_run_id) == "Completed"
    states = task_run_states(flow_run_id, {"prepare_dataset", "register"})
    assert states["prepare_dataset"] == "Cached", states
    print(f"finetune-fgrpo via worker: {took:.1f}s")


def test_the_prefect_ui_talks_to_its_own_api(pipeline_stack):
    url = pipeline_stack.prefect.url
    with urllib.request.urlopen(f"{url}/ui-settings", timeout=10) as r:
        settings = json.loads(r.read())
    assert settings["api_url"] == f"{url}/api"
    with urllib.request.urlopen(f"{url}/", timeout=10) as r:
        assert r.status == 200


def test_no_credential_in_logs_params_tags_or_artifacts(essa_run, fgrpo_run, pipeline_stack):
    import mlflow

    texts: dict[str, str | bytes] = {}
    for _, _, log in (essa_run, fgrpo_run):
        texts[f"worker log {log.name}"] = log.read_bytes()
    for server in (pipeline_stack.prefect, pipeline_stack.mlflow, pipeline_stack.ray):
        for log in server.state_dir.glob("*.log"):
            texts[f"server log {log.name}"] = log.read_bytes()
    for flow_run_id, _, _ in (essa_run, fgrpo_run):
        texts[f"prefect logs {flow_run_id}"] = "\n".join(flow_run_logs(flow_run_id))
    client = mlflow.MlflowClient()
    exp_ids = [e.experiment_id for e in client.search_experiments()]
    for run in client.search_runs(exp_ids):
        texts[f"mlflow run {run.info.run_id} params+tags"] = json.dumps([run.data.params, run.data.tags])
    for version in client.search_model_versions(f"name = '{MODEL}'"):
        texts[f"model version {version.version} tags"] = json.dumps(version.tags)
    store = pipeline_stack.s3.store()  # the whole bucket: pipeline artifacts and MLflow's own artifacts
    for key in store.list(""):
        texts[f"object {key}"] = store.get_bytes(key)
    assert len(texts) > 50
    assert leaks(pipeline_stack.secrets, texts) == []
