"""Retention: keep the last runs of each pipeline and what registered versions need; delete the rest's
checkpoints and caches (docs/retention.md)."""

from __future__ import annotations

from typing import Any

from prefect import flow

from essaflow.retention import RetentionConfig
from flows.parameters import without_uri_passwords
from tasks.gc import delete, plan


@flow(name="gc")
def gc(retention: RetentionConfig = RetentionConfig(), dry_run: bool = False) -> dict[str, Any]:
    """Delete old runs' checkpoints and unused caches from the artifact store.

    Args:
        retention: How many runs of each pipeline to keep, in which store, against which registry.
        dry_run: List what would go and how many bytes, delete nothing.
    """
    gc_plan = plan(without_uri_passwords(retention))
    freed = 0 if dry_run else delete(gc_plan)
    return {**gc_plan.model_dump(), "dry_run": dry_run, "bytes": gc_plan.bytes, "bytes_freed": freed}


if __name__ == "__main__":
    print(gc())
