"""The main pipeline: data -> baseline pass@k -> SFT warm start -> its pass@k -> ESSA or F-GRPO -> pass@k -> the
champion on the same problems -> the promotion gate and MLflow registration.

Each stage is a task that takes its own config sections and the references earlier stages returned, writes its
artifact to storage and returns a small reference; a failed stage is retried (training resumes from its last
checkpoint), and the same dataset config is a cache hit. A flow retry keeps the run
id, and `resume` continues a failed run, so both pick up the run's newest checkpoint. A run whose data snapshot,
config and base model equal those of the pipeline's last completed run ends after the dataset stage in a Completed
state named Skipped (essaflow/runs/skip.py), unless `force`.
"""

from __future__ import annotations

from prefect import flow
from prefect.states import Completed

from essaflow.config import PipelineConfig
from essaflow.refs import PipelineResult
from flows.parameters import ESSAPipelineConfig, FGRPOPipelineConfig, without_uri_passwords
from tasks.champion import evaluate_champion
from tasks.data import prepare_dataset, record_dataset
from tasks.evaluation import evaluate_pass_at_k, evaluate_start_point, evaluate_tuned_adapter
from tasks.inputs import check_run_inputs, skip_run
from tasks.model import build_base_model
from tasks.register import register
from tasks.run import close_run, mark_failed, open_run
from tasks.training import train_adapter, warm_start

PIPELINE_STAGES = (
    "open_run", "prepare_dataset", "check_inputs", "build_base_model", "evaluate-base", "warm_start",
    "evaluate-sft_start", "train",
    "evaluate-tuned", "evaluate-champion", "register",
)  # fmt: skip
"""The stages that report to the progress counter (close_run reports the run itself)."""


@flow(name="finetune", on_failure=[mark_failed], on_crashed=[mark_failed])
def finetune(
    config: PipelineConfig = PipelineConfig(), resume: str | None = None, force: bool = False
) -> PipelineResult:
    """Fine-tune a LoRA adapter with ESSA or F-GRPO, evaluate pass@k before and after, register it in MLflow.

    Args:
        config: The pipeline config.
        resume: Continue a failed run from its newest checkpoint: its run id, or "last" (the newest failed run of
            this pipeline). Refused if the config differs in a field the run's trajectory depends on.
        force: Train even when the data snapshot, config and base model equal the last completed run's.
    """
    config = without_uri_passwords(config)  # none in what Prefect stores, the run's record or MLflow
    run = open_run(config, resume, len(PIPELINE_STAGES))  # the run record: the whole config; storage, MLflow first
    dataset = prepare_dataset(config.data, run.storage_uri, config.eval.data, config.model)  # model: token filter
    record_dataset(run, dataset)  # the snapshot read, as the MLflow run's dataset input
    checked = check_run_inputs(config, dataset, run, may_skip=not (force or resume))
    if checked.skip_reason:
        skipped = skip_run(run, checked)
        return Completed(name="Skipped", message=skipped.reason, data=skipped)
    base = build_base_model(config.model)
    before = evaluate_pass_at_k(config.data, config.model, config.sampling, config.eval, dataset, None, "base", run)
    sft = warm_start(config.data, config.model, config.sft, config.adapter_uri, dataset, run)
    # SFT's part apart from the method's: the start under the same protocol (the base's report when untrained)
    start = evaluate_start_point(config.data, config.model, config.sampling, config.eval, dataset, sft, before, run)
    tuned = train_adapter(config, dataset, sft, run)  # the trainers take the pipeline config (method_trajectory's)
    after = evaluate_tuned_adapter(config.data, config.model, config.sampling, config.eval, dataset, tuned, start, run)
    # the gate's baseline: the champion on these problems under this protocol (its stored counts when they match)
    champion = evaluate_champion(config.gate, config.eval, config.sampling, dataset, run)
    model = register(config, dataset, base, tuned, before, after, champion, run)
    return close_run(run, dataset, base, sft, tuned, before, after, model, start)


# One flow per deployment (prefect.yaml), so each form holds only its method's settings and its preset's values;
# the same flow name, so every run of the pipeline is a run of `finetune`. `.fn` runs the body, not a subflow.


@flow(name="finetune", on_failure=[mark_failed], on_crashed=[mark_failed])
def finetune_essa(
    config: ESSAPipelineConfig = ESSAPipelineConfig(), resume: str | None = None, force: bool = False
) -> PipelineResult:
    """The finetune pipeline with ESSA: SFT warm start, then a search over the SVD-LoRA singular values.

    Args:
        config: configs/tiny-essa.yaml; what you change overrides it, as `essaflow run --set` does.
        resume: Continue a failed run from its newest checkpoint: its run id, or "last" (the newest failed run).
        force: Train even when nothing is new since the last completed run (same data, config and base model).
    """
    return finetune.fn(config.pipeline(), resume, force)


@flow(name="finetune", on_failure=[mark_failed], on_crashed=[mark_failed])
def finetune_fgrpo(
    config: FGRPOPipelineConfig = FGRPOPipelineConfig(), resume: str | None = None, force: bool = False
) -> PipelineResult:
    """The finetune pipeline with F-GRPO: SFT warm start, then focal-weighted GRPO.

    Args:
        config: configs/tiny-fgrpo.yaml; what you change overrides it, as `essaflow run --set` does.
        resume: Continue a failed run from its newest checkpoint: its run id, or "last" (the newest failed run).
        force: Train even when nothing is new since the last completed run (same data, config and base model).
    """
    return finetune.fn(config.pipeline(), resume, force)


if __name__ == "__main__":
    print(finetune().model_dump_json(indent=2))
