"""Nothing new, nothing run: the run's inputs checked against the last completed run's, and a run that skips.

The library decides (essaflow/training/nothing_new.py); these tasks record the inputs on the MLflow run, and end a
skipped run: MLflow run FINISHED with `essaflow.outcome=skipped` and the reason, a markdown artifact in the Prefect
UI, the lease given back. The flow then ends in a Completed state named Skipped.
"""

from __future__ import annotations

import time

from prefect import get_run_logger, task
from prefect.artifacts import create_markdown_artifact

from essaflow import tracking
from essaflow.config import PipelineConfig
from essaflow.refs import DatasetRef, RunInputs, RunRef, SkippedRun
from essaflow.timing import Timer
from essaflow.training import lease
from essaflow.training.nothing_new import (
    OUTCOME_TAG,
    SKIPPED,
    SKIPPED_TAG,
    input_tags,
    last_completed,
    run_inputs,
    unchanged_since,
)
from tasks.retry import retry_policy
from tasks.run import record_stage, stage_walls, tracked


@task(name="check_inputs", task_run_name="check_inputs", **retry_policy(backoff_s=1), on_completion=[record_stage])
def check_inputs(config: PipelineConfig, dataset: DatasetRef, run: RunRef, may_skip: bool) -> RunInputs:
    """The run's inputs as MLflow tags; with `may_skip` (not forced, not a resume), whether the last completed run
    of the pipeline had the same ones."""
    timer = Timer()
    with timer.part("compute"):
        inputs = run_inputs(config, dataset)
    with timer.part("tracking"):
        tracking.set_tags(tracked(run), input_tags(inputs))
        last = last_completed(run.tracking_uri, run.name) if may_skip else None
    reason = unchanged_since(inputs, last)
    if reason:
        get_run_logger().info("skipping: %s", reason)
    return RunInputs(
        inputs=inputs,
        skip_reason=reason,
        same_as=last.run_id if reason and last else None,
        stage="check_inputs",
        timings=timer.timings(),
    )


@task(name="skip_run", task_run_name="skip_run", **retry_policy(backoff_s=1))
def skip_run(run: RunRef, checked: RunInputs) -> SkippedRun:
    """End a run with nothing new: MLflow run FINISHED and tagged skipped with the reason, a Prefect artifact."""
    reason = checked.skip_reason or "nothing new"
    tracking.set_tags(tracked(run), {OUTCOME_TAG: SKIPPED, SKIPPED_TAG: reason})
    tracking.finish_run(tracked(run))
    create_markdown_artifact(
        f"# Skipped `{run.name}`: nothing new\n\n{reason}.\n\n"
        + "\n".join(f"- {k}: `{v}`" for k, v in checked.inputs.items()),
        key="finetune-skipped",
        description=run.run_id,
    )
    lease.release(run.run_id)
    walls, _ = stage_walls(run.flow_run_id)
    return SkippedRun(
        reason=reason,
        run_id=run.run_id,
        same_as=checked.same_as,
        inputs=checked.inputs,
        mlflow_run_id=run.mlflow_run_id,
        tracking_uri=tracking.safe_uri(run.tracking_uri),
        storage_uri=run.storage_uri,
        stages=walls,
        flow_s=round(time.time() - run.started_at, 2),
    )
