"""The compare flow's own stages: the parent MLflow run, one child run per method and seed, the report.

Training and evaluation are the pipeline's own tasks (tasks/training.py, tasks/evaluation.py), called with each
arm's config and child run, so a compared method runs exactly as `essaflow run` would run it.
"""

from __future__ import annotations

from typing import Any

from prefect import get_run_logger, task
from prefect.artifacts import create_markdown_artifact, create_table_artifact
from prefect.runtime import flow_run

from essaflow.compare.config import Arm, CompareConfig
from essaflow.compare.results import ArmResult
from essaflow.compare.runs import (
    close_arm_run,
    fail_comparison,
    open_arm_run,
    open_comparison_run,
    publish_comparison,
)
from essaflow.refs import AdapterRef, EvalRef, RunRef
from essaflow.runs.journal import Journal
from essaflow.secrets import scrub
from tasks.failures import masked_errors
from tasks.retry import retry_policy


@task(name="open_comparison", task_run_name="open_comparison", **retry_policy(retries=0))
@masked_errors
def open_comparison(cfg: CompareConfig, stages: int = 0) -> RunRef:
    """Storage and MLflow reachable (else fail before compute), then the parent MLflow run. `stages`: how many
    stages the flow reports (the terminal's stage counter)."""
    journal = Journal(str(flow_run.get_id()))
    journal.plan(stages)
    parent = open_comparison_run(cfg, flow_run.get_id(), journal)
    get_run_logger().info("comparison %s: MLflow parent run %s", parent.run_id, parent.mlflow_run_id)
    return parent


@task(name="open_arm", task_run_name="open-{arm.name}", **retry_policy(backoff_s=1))
@masked_errors
def open_arm(parent: RunRef, arm: Arm) -> RunRef:
    """The arm's child MLflow run (nested under the parent; a retry finds the same one) and its storage prefix."""
    return open_arm_run(parent, arm)


@task(name="close_arm", task_run_name="close-{arm.name}", **retry_policy(backoff_s=1))
@masked_errors
def close_arm(run: RunRef, arm: Arm, tuned: AdapterRef, after: EvalRef, start: EvalRef) -> ArmResult:
    """The arm's measurements from storage (per-problem counts, the trainer's rows); the child run finished."""
    return close_arm_run(run, arm, tuned, after, start)


@task(name="write_report", task_run_name="write_report", **retry_policy(backoff_s=1))
@masked_errors
def write_report(cfg: CompareConfig, parent: RunRef, start: EvalRef, arms: list[ArmResult]) -> dict[str, Any]:
    """Tables, claims, gate verdicts, projection and figures: to storage (runs/<id>/report/), to the parent MLflow
    run (report/), and as Prefect artifacts; the parent run finished. Returns the report's JSON."""
    published = publish_comparison(cfg, parent, start, arms)
    create_markdown_artifact(published.markdown, key="compare-report", description=f"{cfg.name}: {parent.run_id}")
    create_table_artifact([a.row() for a in arms], key="compare-runs", description="every method and seed")
    Journal(str(parent.flow_run_id)).remove()
    return published.result


def mark_compare_failed(flow: Any, flow_run: Any, state: Any) -> None:
    """Flow hook: the parent run and any child still RUNNING become FAILED, with the failure as a tag."""
    params = flow_run.parameters or {}
    cfg = params.get("config") or {}
    task_cfg = cfg.get("task", {}) if isinstance(cfg, dict) else {}
    failure = Journal(str(flow_run.id)).read().first_failure()
    reason = f"{failure.stage}: {failure.error}" if failure else scrub(state.message or state.name)
    try:
        fail_comparison(task_cfg.get("tracking_uri") if isinstance(task_cfg, dict) else None, str(flow_run.id), reason)
    except Exception as e:  # the failure may be MLflow itself
        get_run_logger().warning("could not mark the MLflow runs failed: %s", scrub(str(e)))
