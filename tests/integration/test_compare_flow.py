"""The compare-methods deployment on real servers: `prefect deploy --all`, a run by a process worker on a tiny
budget (ESSA, GRPO, F-GRPO x 2 seeds from one SFT start), a parent MLflow run with a child per method and seed,
the report (markdown, JSON, PNGs) in the S3 bucket and in MLflow, the Prefect artifacts, the figure links working,
and no credential anywhere."""

from __future__ import annotations

import json
import urllib.request

import pytest

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

pytestmark = pytest.mark.integration
NAME = "compare-test"
PNG = b"\x89PNG\r\n\x1a\n"
METHODS = [
    {"name": "essa", "method": "essa", "set": {"essa.workers.count": 1}},
    {"name": "grpo", "method": "fgrpo", "set": {"grpo.gamma": 0.0}},
    {"name": "fgrpo-g1", "method": "fgrpo", "set": {"grpo.gamma": 1.0}},
]


def compare_params() -> dict:
    task = {k: v for k, v in tiny().items() if k != "name"}
    task["essa"] = {**task["essa"], "generations": 50, "eval_every": 1}  # caps: the budget ends the runs
    task["grpo"] = {**task["grpo"], "steps": 200, "eval_every": 2}
    task["eval"] = {"samples_per_problem": 8, "ks": [1, 4, 8]}
    return {"name": NAME, "task": task, "methods": METHODS, "seeds": [0, 1], "budget_s": 1.0}


@pytest.fixture(scope="module")
def compare_run(pipeline_stack, stack_in_process_module, tmp_path_factory):
    env = pipeline_stack.subprocess_env()
    ensure_pool(env)
    out = prefect_cli("--no-prompt", "deploy", "--all", env=env)
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-3000:]
    flow_run_id, took, log = run_deployment(
        "compare/compare-methods", {"config": compare_params()}, env, tmp_path_factory.mktemp("w")
    )
    print(f"compare-methods via worker: {took:.1f}s")
    return flow_run_id, log


@pytest.fixture(scope="module")
def mlflow_runs(compare_run, pipeline_stack):
    from mlflow.tracking import MlflowClient

    c = MlflowClient(pipeline_stack.mlflow.url)
    exp = c.get_experiment_by_name(NAME)
    runs = c.search_runs([exp.experiment_id], filter_string=f"tags.`essaflow.run_id` LIKE '{compare_run[0]}%'")
    parent = next(r for r in runs if r.data.tags.get("essaflow.kind") == "compare")
    children = [r for r in runs if r.data.tags.get("mlflow.parentRunId") == parent.info.run_id]
    return c, parent, children


def test_the_deployment_exists_weekly_with_the_preset_as_its_form(compare_run):
    from tests.integration.pipeline_support import client

    with client() as c:
        dep = next(d for d in c.read_deployments() if d.name == "compare-methods")
    assert [s.schedule.cron for s in dep.schedules] == ["0 4 * * 6"] and dep.work_pool_name == "essaflow-process"
    assert dep.parameters == {}  # a scheduled run takes configs/compare-tiny.yaml
    default = dep.parameter_openapi_schema["properties"]["config"]["default"]
    assert default["name"] == "compare-tiny" and default["task"]["eval"]["samples_per_problem"] == 256
    assert [m["name"] for m in default["methods"]] == ["essa", "grpo", "fgrpo-g05", "fgrpo-g1"]


def test_the_run_completes_every_method_and_seed(compare_run):
    flow_run_id, _ = compare_run
    assert flow_run_state(flow_run_id) == "Completed"
    arms = [f"{m['name']}-s{s}" for m in METHODS for s in (0, 1)]
    states = task_run_states(flow_run_id, {f"train-{a}" for a in arms} | {"write_report"})
    assert all(states.get(f"train-{a}") == "Completed" for a in arms), states
    assert states["write_report"] == "Completed"


def test_parent_run_holds_a_finished_child_per_method_and_seed(mlflow_runs):
    c, parent, children = mlflow_runs
    assert parent.info.status == "FINISHED"
    assert sorted(r.data.tags["mlflow.runName"] for r in children) == sorted(
        f"{m['name']}-s{s}" for m in METHODS for s in (0, 1)
    )
    for child in children:
        assert child.info.status == "FINISHED", child.data.tags["mlflow.runName"]
        m = child.data.metrics
        assert m["eval.tuned.pass_at_1"] <= m["eval.tuned.pass_at_8"] and m["train.summary.usage_generated_tokens"] > 0
        assert child.data.params["method"] == child.data.tags["essaflow.method"]
    labels = {r.data.tags["mlflow.runName"]: r.data.tags["essaflow.method_label"] for r in children}
    assert labels["grpo-s0"] == "GRPO" and labels["fgrpo-g1-s1"] == "F-GRPO(gamma=1)"
    essa = next(r for r in children if r.data.tags["mlflow.runName"] == "essa-s0")
    assert labels["essa-s0"].startswith("ESSA(") and essa.data.tags["essaflow.fitness_kind"] == "black-box reward"
    assert {"compare.essa.pass_at_1", "compare.grpo.greedy", "compare.fgrpo-g1.generated_tokens"} <= set(
        parent.data.metrics
    )
    files = {f.path for f in c.list_artifacts(parent.info.run_id, "report")}
    assert {f"report/{n}" for n in ("report.md", "comparison.json", "passk.png", "time_to_accuracy.png",
                                    "bytes.png")} <= files  # fmt: skip


def test_report_in_the_bucket_has_every_run_and_the_projection(compare_run, pipeline_stack):
    store = pipeline_stack.store()
    prefix = f"runs/{compare_run[0]}/report"
    store.verify(prefix)  # every file's checksum against the manifest
    for name in ("passk.png", "time_to_accuracy.png", "bytes.png"):
        assert store.get_bytes(f"{prefix}/{name}").startswith(PNG)
    body = json.loads(store.get_bytes(f"{prefix}/comparison.json"))
    assert body["n"] == 8 and len(body["runs"]) == 6
    for run in body["runs"]:
        assert {"pass@1", "pass@4", "greedy", "train_wall_s", "generated_tokens", "bytes_per_update"} <= set(run)
        assert run["steps"] > 0 and run["pass@1"] <= run["pass@4"] <= 1.0
    essa = [r for r in body["runs"] if r["method"] == "essa"]
    grpo = [r for r in body["runs"] if r["method"] == "grpo"]
    assert all(r["bytes_per_update"] == 0 and r["allreduce_bytes"] > 10_000 for r in grpo)  # one process
    assert all(0 < r["bytes_per_update"] < grpo[0]["allreduce_bytes"] / 20 for r in essa), essa  # seeds, fitness
    assert body["methods"]["grpo"]["pass@1"]["n"] == 2  # spread over the 2 seeds
    assert {c["checked"].split(" ")[0] for c in body["claims"]} == {"grpo", "fgrpo-g1", "essa"}
    paper = body["projection"]["paper"]
    assert paper["speedup_16"] == pytest.approx(2.0, abs=0.1) and paper["speedup_128"] == pytest.approx(6.0, abs=0.3)
    assert "iteration_speedup_16" in body["projection"]["run"]  # from the runs' own costs
    assert set(body["gate"]) == {m["name"] for m in METHODS}
    # the registry's paired rule, seed by seed, against the SFT start on the same 16 problems
    for method, evidence in body["gate_evidence"].items():
        shown = [f"{e['diff']:+.4f} [{e['ci_low']:+.4f}, {e['ci_high']:+.4f}] {e['verdict']}" for e in evidence]
        print(f"gate {method}: {body['gate'][method]}; per seed: {'; '.join(shown)}")
        assert len(evidence) == 2 and all(e["n_problems"] == 16 and e["champion_version"] == "sft" for e in evidence)
        assert body["gate"][method].startswith(("would promote", "would not promote", "mixed"))


def test_each_child_run_records_the_figures_the_report_shows_for_it(compare_run, mlflow_runs, pipeline_stack):
    body = json.loads(pipeline_stack.store().get_bytes(f"runs/{compare_run[0]}/report/comparison.json"))
    shown = {f"{r['method']}-s{r['seed']}": r for r in body["runs"]}
    for child in mlflow_runs[2]:
        run, logged = shown[child.data.tags["mlflow.runName"]], child.data.metrics
        assert logged["eval.tuned.greedy"] == pytest.approx(run["greedy"], abs=1e-4)
        assert logged["eval.tuned.pass_at_1"] == pytest.approx(run["pass@1"], abs=1e-4)


def test_prefect_artifacts_link_figures_the_ui_can_load(compare_run, pipeline_stack):
    artifacts = flow_run_artifacts(compare_run[0])
    assert {"compare-report", "compare-runs", "passk-sft"} <= set(artifacts)
    md = artifacts["compare-report"]
    assert "## The papers' claims on this task" in md and "projection: ESSA-v3 App. B" in md
    assert "ESSA(cma, accuracy)" in md and "F-GRPO(gamma=1)" in md  # the variants as run (library CMA-ES here)
    link = next(line for line in md.splitlines() if "passk.png" in line).split("](")[1].rstrip(")")
    assert link.startswith(pipeline_stack.mlflow.url)
    with urllib.request.urlopen(link, timeout=10) as resp:  # the MLflow server serves it to the browser
        assert resp.read().startswith(PNG)


def test_no_credential_in_logs_params_or_report(compare_run, mlflow_runs, pipeline_stack):
    flow_run_id, log = compare_run
    c, parent, children = mlflow_runs
    texts = {
        "worker log": log.read_text(),
        "flow run logs": "\n".join(flow_run_logs(flow_run_id)),
        "artifacts": json.dumps(flow_run_artifacts(flow_run_id)),
        "params/tags": json.dumps([r.data.params | r.data.tags for r in [parent, *children]]),
        "report": pipeline_stack.store().get_bytes(f"runs/{flow_run_id}/report/report.md"),
    }
    assert not leaks(pipeline_stack.secrets, texts)


def test_compare_table_reads_the_task_x_method_rows_from_the_bucket(compare_run, pipeline_stack, tmp_path):
    """`essaflow compare-table` on the report's storage prefix (S3 credentials from the environment) and on a local
    copy of comparison.json: the start and every method, each gain inside its paired interval."""
    import subprocess
    import sys
    from pathlib import Path

    uri = f"{pipeline_stack.storage_uri.rstrip('/')}/runs/{compare_run[0]}/report"
    local = tmp_path / "comparison.json"
    local.write_bytes(pipeline_stack.store().get_bytes(f"runs/{compare_run[0]}/report/comparison.json"))
    exe = str(Path(sys.executable).with_name("essaflow"))
    out = subprocess.run([exe, "compare-table", uri, str(local)], capture_output=True, text=True, timeout=120,
                         env=pipeline_stack.subprocess_env())  # fmt: skip
    assert out.returncode == 0, out.stderr[-2000:]
    rows = json.loads(out.stdout.strip().splitlines()[-1])["rows"]
    assert [r["method"] for r in rows] == 2 * ["SFT start", *[m["name"] for m in METHODS]]
    for r in rows[1:4]:
        for metric in ("greedy", "pass@1"):
            cell = r[metric]
            assert cell["ci_low"] <= cell["gain"] <= cell["ci_high"], (r["method"], cell)
        assert r["seeds"] == 2 and r["gate"].endswith("/2 seeds)")
    table = out.stdout.splitlines()
    assert table[0].startswith("| task | method | greedy (gain [95% CI])") and len(table) == 2 + 8 + 1
    assert sum(line.startswith(f"| {NAME} | F-GRPO(gamma=1) |") for line in table) == 2
