"""Nothing new, nothing run: the run's inputs checked against the last completed run's, and a run that skips.

The library decides (essaflow/runs/skip.py) and ends a skipped run (essaflow/runs/closing.py): MLflow run FINISHED
with `essaflow.outcome=skipped` and the reason, the lease given back. These tasks add the log line and the markdown
artifact in the Prefect UI. The flow then ends in a Completed state named Skipped.
"""

from __future__ import annotations

from prefect import get_run_logger, task
from prefect.artifacts import create_markdown_artifact

from essaflow.config import PipelineConfig
from essaflow.refs import DatasetRef, RunInputs, RunRef, SkippedRun
from essaflow.runs.closing import close_skipped_run
from essaflow.runs.journal import Journal
from essaflow.runs.skip import compare_inputs
from essaflow.runs.summary import skipped_markdown
from tasks.failures import masked_errors
from tasks.retry import retry_policy
from tasks.run import record_stage


@task(name="check_inputs", task_run_name="check_inputs", **retry_policy(backoff_s=1), on_completion=[record_stage])
@masked_errors
def check_run_inputs(config: PipelineConfig, dataset: DatasetRef, run: RunRef, may_skip: bool) -> RunInputs:
    """The run's inputs as MLflow tags; with `may_skip` (not forced, not a resume), whether the last completed run
    of the pipeline had the same ones."""
    checked = compare_inputs(config, dataset, run, may_skip)
    if checked.skip_reason:
        get_run_logger().info("skipping: %s", checked.skip_reason)
    return checked


@task(name="skip_run", task_run_name="skip_run", **retry_policy(backoff_s=1))
@masked_errors
def skip_run(run: RunRef, checked: RunInputs) -> SkippedRun:
    """End a run with nothing new: MLflow run FINISHED and tagged skipped with the reason, a Prefect artifact."""
    journal = Journal(str(run.flow_run_id))
    skipped = close_skipped_run(run, checked, journal.read())
    create_markdown_artifact(skipped_markdown(run, checked, skipped.reason), key="finetune-skipped",
                             description=run.run_id)  # fmt: skip
    journal.remove()
    return skipped
