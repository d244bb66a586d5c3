"""Methods side by side: one task, one SFT start, each method x seed under the same training budget, one report.

data -> SFT warm start -> pass@k of the SFT start -> for every method and seed: train, pass@k (a child MLflow run
each) -> the report (tables, claims, gate verdicts, figures, scaling projection) on the parent run, in storage and
as Prefect artifacts (docs/compare.md).
"""

from __future__ import annotations

from typing import Any

from prefect import flow

from essaflow.compare import CompareConfig, load_compare_config
from essaflow.compare.config import Arm
from essaflow.compare.results import ArmResult
from essaflow.compare.runs import task_config
from essaflow.refs import AdapterRef, DatasetRef, EvalRef, RunRef
from flows.parameters import preset_path
from tasks.compare import close_arm, mark_compare_failed, open_arm, open_comparison, write_report
from tasks.data import prepare_dataset
from tasks.evaluation import evaluate_pass_at_k
from tasks.model import build_base_model
from tasks.training import train_adapter, warm_start

PRESET = "compare-tiny"
SHARED_STAGES = ("prepare_dataset", "build_base_model", "warm_start", "evaluate-sft")
"""The stages before the arms that report to the progress counter."""
ARM_STAGES = ("train-<arm>", "evaluate-<arm>")
"""The stages of each arm (method x seed) that report to the progress counter."""


def _preset() -> CompareConfig:
    """configs/compare-tiny.yaml (or under ESSAFLOW_PRESETS_DIR): the deployment's defaults, the form's values."""
    return load_compare_config(preset_path(PRESET))


@flow(name="compare", on_failure=[mark_compare_failed], on_crashed=[mark_compare_failed])
def compare(config: CompareConfig = _preset()) -> dict[str, Any]:
    """Compare ESSA, GRPO and F-GRPO (or any methods listed) from one SFT start on one task.

    Args:
        config: configs/compare-tiny.yaml; the methods, seeds, budget_s and the shared task.
    """
    parent = open_comparison(config, stages=len(SHARED_STAGES) + len(ARM_STAGES) * len(config.arms()))
    task = task_config(config)
    dataset = prepare_dataset(task.data, parent.storage_uri, task.eval.data, task.model)  # model: the token filter
    build_base_model(task.model)
    sft = warm_start(task.data, task.model, task.sft, task.adapter_uri, dataset, parent)
    evaluate_sft = evaluate_pass_at_k.with_options(task_run_name="evaluate-sft")
    start = evaluate_sft(task.data, task.model, task.sampling, task.eval, dataset, sft, "sft", parent)
    results = [run_arm(arm, dataset, sft, start, parent) for arm in config.arms()]
    return write_report(config, parent, start, results)


def run_arm(arm: Arm, dataset: DatasetRef, sft: AdapterRef, start: EvalRef, parent: RunRef) -> ArmResult:
    """One method with one seed, from the shared SFT start, in its own child MLflow run."""
    run = open_arm(parent, arm)
    c = arm.config
    tuned = train_adapter.with_options(task_run_name=f"train-{arm.name}")(c, dataset, sft, run)
    evaluate_arm = evaluate_pass_at_k.with_options(task_run_name=f"evaluate-{arm.name}")
    after = evaluate_arm(c.data, c.model, c.sampling, c.eval, dataset, tuned, "tuned", run)
    return close_arm(run, arm, tuned, after, start)


if __name__ == "__main__":
    import json

    print(json.dumps(compare()))
