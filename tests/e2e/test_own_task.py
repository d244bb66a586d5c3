"""Your own task end to end (examples/own-task): a JSONL with fields of its own and a reward file of yours, through
`essaflow run` with ESSA on two Ray workers and then with F-GRPO. The reward's components reach MLflow, its digest
the run's tags and JSON line; editing the reward file makes the next run re-score the champion instead of reusing
its stored counts (they were judged by other bytes)."""

from __future__ import annotations

import hashlib
import shutil
from pathlib import Path

import pytest

from essaflow import tracking
from tests.e2e.test_cli_finetune import essaflow

pytestmark = pytest.mark.e2e
REPO = Path(__file__).resolve().parents[2]
SMALL = [
    "--set", "sft.steps=30", "--set", "data.eval_size=24", "--set", "eval.samples_per_problem=4",
    "--set", "eval.ks=[1,2,4]", "--no-progress",
]  # fmt: skip
ESSA = ["--set", "method=essa", "--set", "essa.workers.count=2", "--set", "essa.generations=2",
        "--set", "essa.population=4", "--set", "essa.minibatch=16", "--set", "essa.eval_every=0"]  # fmt: skip
FGRPO = ["--set", "method=fgrpo", "--set", "grpo.gamma=0.5", "--set", "grpo.steps=2", "--set", "grpo.group_size=4",
         "--set", "grpo.prompts_per_step=4", "--set", "grpo.eval_every=0"]  # fmt: skip


@pytest.fixture(scope="module")
def workdir(tmp_path_factory) -> Path:
    """A copy of the example (its config extends ../../configs/tiny.yaml, its data path is relative to here)."""
    d = tmp_path_factory.mktemp("own-task")
    shutil.copytree(REPO / "examples" / "own-task", d / "examples" / "own-task")
    (d / "configs").mkdir()
    shutil.copy(REPO / "configs" / "tiny.yaml", d / "configs" / "tiny.yaml")
    return d


def digest(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def test_essa_then_fgrpo_on_your_task_and_an_edited_reward_re_scores_the_champion(workdir):
    reward = workdir / "examples" / "own-task" / "reward.py"
    config = "examples/own-task/config.yaml"
    first, _ = essaflow(workdir, "run", config, *SMALL, *ESSA)
    assert first["judged_with"] == {"reward": "digit_credit", "reward_digest": digest(reward),
                                    "correct_threshold": "1"}  # fmt: skip
    assert first["training"]["kind"] == "essa" and first["aliases"] == ["champion"]
    assert sum(first["training"]["work_by_node"].values()) > 0
    c = tracking.client(first["tracking_uri"])
    run = c.get_run(first["mlflow_run_id"]).data
    assert run.tags["essaflow.reward"] == "digit_credit" and run.tags["essaflow.reward_digest"] == digest(reward)
    for label in ("base", "tuned"):  # both components, each within its share of the reward
        assert 0 < run.metrics[f"eval.{label}.reward.format"] <= 0.2
        assert 0 <= run.metrics[f"eval.{label}.reward.value"] <= 0.8
    # and per generation of the search, over every candidate's completions (from both Ray workers' shares)
    generations = c.get_metric_history(first["mlflow_run_id"], "train.reward.format")
    assert len(generations) >= 2 and all(0 < m.value <= 0.2 + 1e-9 for m in generations), generations
    version = c.get_model_version("own-task", first["model_version"])
    assert version.tags["reward_digest"] == digest(reward)

    # the same task, another weighting of its components: a new protocol, so the champion is judged again
    reward.write_text(reward.read_text().replace('"format": 0.2, "value": 0.8', '"format": 0.3, "value": 0.7'))
    second, _ = essaflow(workdir, "run", config, *SMALL, *FGRPO)
    assert second["judged_with"]["reward_digest"] == digest(reward) != first["judged_with"]["reward_digest"]
    assert second["training"]["kind"] == "fgrpo"
    assert second["gate"]["champion_scored"] == "re-evaluated"
    assert second["gate"]["protocol_digest"] != first["gate"]["protocol_digest"]
    metrics = c.get_run(second["mlflow_run_id"]).data.metrics
    assert "eval.champion.pass_at_1" in metrics and 0 <= metrics["eval.tuned.reward.format"] <= 0.3
    steps = c.get_metric_history(second["mlflow_run_id"], "train.reward.value")  # per F-GRPO step
    assert len(steps) >= 2 and all(0 <= m.value <= 0.7 + 1e-9 for m in steps), steps
