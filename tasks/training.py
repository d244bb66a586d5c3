"""The SFT warm start and the training stage (ESSA or F-GRPO), with checkpoints synced to storage
(essaflow/stages/training.py).

The training itself is `essaflow.training.run.train_method`, the same function the CLI jobs call: a retried `train`
starts in a fresh directory and resumes from the newest checkpoint this run stored (the retry may run on another
machine). These tasks add the Prefect side: retries, the progress artifact.
"""

from __future__ import annotations

from typing import Any

from prefect import task

from essaflow.config import DataConfig, ModelConfig, PipelineConfig, SFTConfig
from essaflow.methods import method_of
from essaflow.refs import AdapterRef, DatasetRef, RunRef
from essaflow.stages.training import planned_steps, progress_note, train_stage, warm_start_stage
from tasks.failures import masked_errors
from tasks.progress import StageProgress
from tasks.retry import retry_policy
from tasks.run import record_stage


@task(name="warm_start", task_run_name="warm_start", **retry_policy(), on_completion=[record_stage])
@masked_errors
def warm_start(
    data: DataConfig, model: ModelConfig, sft: SFTConfig, adapter_uri: str | None, dataset: DatasetRef, run: RunRef
) -> AdapterRef:
    """LoRA SFT on the SFT split (ESSA-v3 sec. 3.2), stored once per (model, SFT config, SFT data) hash; the
    adapter at adapter_uri instead when one is given. data: the prompt formatting SFT trains with."""
    return warm_start_stage(data, model, sft, adapter_uri, dataset, run)


@task(name="train", task_run_name="train", **retry_policy(backoff_s=5), on_completion=[record_stage])
@masked_errors
def train_adapter(config: PipelineConfig, dataset: DatasetRef, sft: AdapterRef, run: RunRef) -> AdapterRef:
    """ESSA or F-GRPO from the SFT adapter (essaflow.training.run.train_method); checkpoints go to storage as
    written, the progress to a Prefect progress artifact.

    The whole pipeline config: the trainers take it (each reads its method's section and the sections its scorer
    or rollouts use, the method's `trajectory`)."""
    if not method_of(config).trains:  # method none: the SFT adapter is the result
        return train_stage(config, dataset, sft, run)
    total = planned_steps(config)
    progress = StageProgress("train", total)

    def on_row(row: dict[str, Any]) -> None:
        progress.update(*progress_note(row))

    tuned = train_stage(config, dataset, sft, run, on_row)
    progress.update(total, "done")
    return tuned
