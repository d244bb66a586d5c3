"""Carry out a gc plan: delete its prefixes, manifests first (essaflow.storage), and say what that freed."""

from __future__ import annotations

import logging

from essaflow.retention.plan import GCPlan
from essaflow.storage import ArtifactStore

log = logging.getLogger(__name__)


def sweep(store: ArtifactStore, plan: GCPlan) -> int:
    """Delete every prefix the plan lists; the bytes freed (what the store still held of them when deleted)."""
    freed = 0
    for entry in plan.delete:
        held = sum(store.sizes(entry.prefix).values())  # a prefix may have lost objects since the plan
        store.delete_prefix(entry.prefix)
        log.info("deleted %s (%d bytes): %s", store.url(entry.prefix), held, entry.why)
        freed += held
    return freed
