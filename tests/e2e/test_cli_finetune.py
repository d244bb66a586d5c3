"""`essaflow run` and `essaflow eval` end to end on the embedded default: Prefect's temporary local API, a sqlite
MLflow file, file:// storage, the built-in tiny model; nothing started by the user."""

from __future__ import annotations

import gzip
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

pytestmark = pytest.mark.e2e
REPO = Path(__file__).resolve().parents[2]
TINY = {
    "name": "e2e-tiny",
    "method": "none",
    "data": {"synthetic": {"num_problems": 300}, "eval_size": 16},
    "eval": {"samples_per_problem": 4, "ks": [1, 2, 4]},
    "sampling": {"max_new_tokens": 6, "batch_size": 256},
    "sft": {"steps": 10, "batch_size": 16},
}
KEYS = {"before", "after", "model_name", "model_version", "aliases", "tracking_uri", "storage_uri", "wall_s", "stages"}


@pytest.fixture(scope="module")
def workdir(tmp_path_factory):
    d = tmp_path_factory.mktemp("e2e")
    (d / "tiny.yaml").write_text(yaml.safe_dump(TINY))
    return d


def essaflow(workdir: Path, *args: str) -> tuple[dict, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PREFECT_", "MLFLOW_", "AWS_", "ESSAFLOW_S"))}
    env.update({"PREFECT_HOME": str(workdir / "prefect-home"), "ESSAFLOW_CACHE_DIR": os.environ["ESSAFLOW_CACHE_DIR"]})
    env.pop("ESSAFLOW_STORAGE_URI", None)
    proc = subprocess.run(
        [sys.executable, "-m", "cli.main", *args], cwd=workdir, env=env, capture_output=True, text=True, timeout=600
    )
    assert proc.returncode == 0, proc.stderr[-4000:]
    return json.loads(proc.stdout.strip().splitlines()[-1]), proc.stderr


@pytest.fixture(scope="module")
def first_run(workdir) -> dict:
    """The module's first `essaflow run` (version 1, the champion): every test that needs it takes this fixture, so
    each test passes alone and the run happens once however many of them run."""
    out, _ = essaflow(workdir, "run", "tiny.yaml", "--no-progress")
    return out


def test_run_prints_the_pipeline_summary_as_its_last_json_line(workdir, first_run):
    out = first_run
    assert set(out) >= KEYS
    assert out["model_name"] == "e2e-tiny" and out["model_version"] == "1" and out["aliases"] == ["champion"]
    assert out["storage_uri"] == (workdir / ".essaflow" / "store").as_uri()
    assert out["tracking_uri"].startswith("sqlite:///") and (workdir / ".essaflow" / "mlflow.db").exists()
    assert set(out["stages"]) >= {
        "prepare_dataset",
        "evaluate-base",
        "warm_start",
        "train",
        "evaluate-tuned",
        "register",
    }
    assert set(out["before"]) == {"greedy", "pass@1", "pass@2", "pass@4"}
    assert 0 < out["overhead"]["share"] < 1
    # what training spent is in the JSON; this run is SFT only (method none): nothing trained after the warm start
    assert out["training"]["kind"] == "none" and out["training"]["usage"] == {} and out["training"]["wall_s"] == 0


def test_a_second_run_with_nothing_new_is_skipped_in_seconds_naming_the_run_it_matches(workdir, first_run):
    out, _ = essaflow(workdir, "run", "tiny.yaml", "--no-progress")
    assert out["state"] == "skipped" and out["same_as"] == first_run["run_id"] != out["run_id"]
    assert f"nothing new since run {first_run['run_id']}" in out["reason"] and out["inputs"]["data"] in out["reason"]
    assert set(out["stages"]) == {"open_run", "prepare_dataset", "check_inputs"}  # no model, no evaluation, no SFT
    assert out["flow_s"] < first_run["flow_s"] / 2, (out["flow_s"], first_run["flow_s"])
    print(f"skipped run: flow {out['flow_s']}s {out['stages']}, command {out['wall_s']}s "
          f"(trained run: flow {first_run['flow_s']}s)")  # fmt: skip


def test_a_forced_second_run_hits_the_dataset_cache_and_meets_the_promotion_gate(workdir, first_run):
    out, _ = essaflow(workdir, "run", "tiny.yaml", "--no-progress", "--force")
    # the dataset from the task cache, the SFT adapter from storage by its content key: both reported as cached
    assert out["state"] == "completed" and out["cached"] == ["prepare_dataset", "warm_start"]
    assert out["model_version"] == "2"
    # same data, same cached SFT adapter, same eval seed: an equal score does not dethrone the champion
    assert out["aliases"] == ["challenger"] and "does not beat v1" in out["decision"]


def test_eval_scores_the_champion_from_the_registry(workdir, first_run):
    out, _ = essaflow(workdir, "eval", "--model", "e2e-tiny", "--alias", "champion", "-c", "tiny.yaml")
    assert out["model"] == "e2e-tiny@champion"
    assert set(out["pass_at_k"]) == {"greedy", "pass@1", "pass@2", "pass@4"}
    assert out["report_uri"].startswith("file://")


def test_eval_without_a_config_uses_the_dataset_and_protocol_the_version_records(workdir, first_run):
    out, err = essaflow(workdir, "eval", "--model", "e2e-tiny", "--alias", "champion")
    assert "on its recorded dataset and protocol" in err
    # the run's eval protocol (n=4, ks 1,2,4), not the defaults (n=16, ks up to 16)
    assert set(out["pass_at_k"]) == {"greedy", "pass@1", "pass@2", "pass@4"}
    # the share is the one its report's rows give: every completion is kept there (n=4 = samples_saved_per_problem)
    report = Path(out["report_uri"].removeprefix("file://"))
    with gzip.open(report / "samples.jsonl.gz", "rt") as f:
        completions = [c for line in f if line.strip() for c in json.loads(line)["completions"]]
    assert len(completions) == 16 * 4
    assert out["truncated_share"] == round(sum(c["truncated"] for c in completions) / len(completions), 4)


@pytest.mark.parametrize(
    "fitness,kind", [("accuracy", "black-box reward"), ("answer_logprob", "gray-box: needs reference answers")]
)
def test_the_essa_job_json_says_which_kind_of_fitness_produced_it(workdir, fitness, kind):
    essa = {"population": 4, "generations": 2, "minibatch": 8, "eval_every": 0, "workers": {"ray": False},
            "fitness": fitness}  # fmt: skip
    (workdir / f"essa-{fitness}.yaml").write_text(yaml.safe_dump({**TINY, "method": "essa", "essa": essa}))
    out, _ = essaflow(workdir, "essa", "-c", f"essa-{fitness}.yaml")
    trained = out["training"]  # the flow's field for the train stage (essaflow/runs/line.py)
    assert trained["fitness_kind"] == kind and trained["method_label"] == f"ESSA(cma, {fitness})"
    assert trained["steps"] == 2 and set(out["sft_start"]) >= {"greedy", "pass@1"}
