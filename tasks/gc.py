"""The gc tasks: plan what goes (registry read first, fail closed), then delete it; a listing in the Prefect UI."""

from __future__ import annotations

from prefect import get_run_logger, task
from prefect.artifacts import create_table_artifact

from essaflow import tracking
from essaflow.artifacts import check_storage, storage_uri_for
from essaflow.retention import GCPlan, RetentionConfig, plan_gc, registered_references, sweep, tracked_runs
from essaflow.storage import open_store
from tasks.failures import masked_errors
from tasks.retry import retry_policy


@task(name="plan_gc", task_run_name="plan_gc", **retry_policy())
@masked_errors
def plan(retention: RetentionConfig) -> GCPlan:
    """What goes and what stays. The registry is read before the store is listed, and a registry that cannot be
    read fails the task: nothing is deleted without knowing what the registered versions need."""
    tracking_uri = tracking.resolve_tracking_uri(retention.tracking_uri)
    tracking.check_tracking(tracking_uri)
    versions = registered_references(tracking_uri)
    store = open_store(check_storage(storage_uri_for(retention.storage_uri)))  # nothing listening: fails at once
    result = plan_gc(store, versions, retention.keep_runs, tracked_runs(tracking_uri))
    rows = [{"action": "delete", **e.model_dump()} for e in result.delete]
    rows += [{"action": "keep", **e.model_dump()} for e in result.keep]
    create_table_artifact(rows, key="gc-plan", description=f"gc of {result.storage_uri}: {result.bytes} bytes")
    get_run_logger().info(
        "gc of %s: %d prefixes (%d bytes) to delete, %d kept; %d registered versions read",
        result.storage_uri, len(result.delete), result.bytes, len(result.keep), len(versions),
    )  # fmt: skip
    return result


@task(name="sweep", task_run_name="sweep", **retry_policy())
@masked_errors
def delete(gc_plan: GCPlan) -> int:
    """Delete what the plan lists (a retry deletes what is left); the bytes freed."""
    return sweep(open_store(gc_plan.storage_uri), gc_plan)
