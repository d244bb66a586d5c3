"""Model registration: the adapter as an MLflow pyfunc model, one version per pipeline run, the promotion gate."""

from __future__ import annotations

import json

from prefect import get_run_logger, task

from essaflow import tracking
from essaflow.artifacts import fetch_dir, read_eval_report
from essaflow.config import DataConfig, EvalConfig, ModelConfig, SamplingConfig
from essaflow.refs import AdapterRef, DatasetRef, EvalRef, ModelRef, RegisteredRef, RunRef
from essaflow.timing import Timer
from essaflow.tracking.protocol import protocol_tags
from essaflow.training.run import trained_method_tags
from tasks.retry import retry_policy
from tasks.run import record_stage, tracked


@task(
    name="register",
    task_run_name="register",
    **retry_policy(retries=3),
    on_completion=[record_stage],
)
def register(
    promotion_metric: str,
    data: DataConfig,
    model: ModelConfig,
    sampling: SamplingConfig,
    eval_cfg: EvalConfig,
    dataset: DatasetRef,
    base: ModelRef,
    adapter: AdapterRef,
    before: EvalRef,
    after: EvalRef,
    run: RunRef,
) -> RegisteredRef:
    """Register the tuned adapter as `run.name` (idempotent per run); champion only if it beats the current one on
    promotion_metric. The version keeps what predict needs (model, sampling, data's prompt formatting) and the
    protocol its pass@k was measured with (data, eval, sampling)."""
    timer = Timer()
    with timer.part("storage"):
        adapter_dir = fetch_dir(adapter.uri, adapter.digest)
        reports = {before.label: read_eval_report(before), after.label: read_eval_report(after)}
    tags = {
        "method": adapter.kind,
        **trained_method_tags(adapter),
        "base_model": model.name_or_path,
        "dataset_hash": dataset.hash,
        "dataset_uri": dataset.uri,
        "adapter_uri": adapter.uri,
        "adapter_digest": adapter.digest,
        "pass_at_k": json.dumps({k: round(v, 4) for k, v in after.summary.items()}),
        "baseline_pass_at_k": json.dumps({k: round(v, 4) for k, v in before.summary.items()}),
        "eval_protocol": f"n={after.samples_per_problem} problems={after.num_problems} seed={eval_cfg.seed}",
        # what `essaflow eval --model NAME` re-evaluates on by default (essaflow.tracking.protocol)
        **protocol_tags(data, eval_cfg, sampling),
        "git_commit": tracking.git_commit(),
        "storage_run_uri": f"{run.storage_uri.rstrip('/')}/{run.run_prefix}",
        "prefect.flow_run_id": run.flow_run_id or "",
    }
    with timer.part("tracking"):
        tracking.log_comparison(tracked(run), reports)
        reg = tracking.register_adapter(
            tracked(run),
            run.run_id,
            run.name,
            adapter_dir,
            model,
            base.local_path,
            sampling,
            tags,
            promotion_metric,
            after.summary[promotion_metric],
            data=data,
        )
    get_run_logger().info("registered %s v%s: %s", reg.name, reg.version, reg.decision)
    return RegisteredRef(
        name=reg.name,
        version=reg.version,
        aliases=reg.aliases,
        decision=reg.decision,
        model_uri=reg.model_uri,
        stage="register",
        timings=timer.timings(),
    )
