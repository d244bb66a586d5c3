"""Retention of the artifact store: keep the last runs of each pipeline and what registered versions need, delete
the rest's checkpoints and caches (docs/retention.md). This package never imports prefect."""

from essaflow.retention.config import RetentionConfig
from essaflow.retention.plan import GCPlan, PrefixEntry, plan_gc
from essaflow.retention.references import VersionRefs, registered_references, tracked_runs
from essaflow.retention.sweep import sweep

__all__ = [
    "PrefixEntry",
    "GCPlan",
    "RetentionConfig",
    "VersionRefs",
    "plan_gc",
    "registered_references",
    "sweep",
    "tracked_runs",
]
