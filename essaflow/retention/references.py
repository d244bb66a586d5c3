"""What the model registry needs kept: every registered version's run, dataset, adapter and model files.

Every version of every registered model counts (champion, challenger or neither): a version is in the registry
until someone deletes it, and `models:/NAME/VERSION` must keep working while it is. A version made by a pipeline
names its run (`essaflow.run_id`) and the artifacts it came from (the tags `dataset_uri`, `adapter_uri`,
`storage_run_uri`, `base_model`, set by essaflow/gate/version_tags.py); its `source` is the logged pyfunc model.
Any error reading the registry propagates: gc then deletes nothing (fail closed).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from essaflow.tracking import RUN_TAG
from essaflow.tracking.server import client

#: version tags that name an artifact in storage (essaflow/gate/version_tags.py writes them)
URI_TAGS = ("dataset_uri", "adapter_uri", "base_model")
RUN_URI_TAG = "storage_run_uri"
PAGE = 200


@dataclass(frozen=True)
class VersionRefs:
    """One registered version and what it references."""

    version: str
    """`NAME vN`, for the listing."""
    run_id: str | None
    """The pipeline run that registered it (its lineage: record, eval reports, adapter, metrics)."""
    uris: tuple[str, ...]
    """Artifact URIs it references (dataset, adapter, base model, its pyfunc source)."""


def registered_references(tracking_uri: str) -> list[VersionRefs]:
    """Every version in the registry at `tracking_uri` and what it references; raises if it cannot be read."""
    c = client(tracking_uri)
    out: list[VersionRefs] = []
    token = None
    while True:
        page = c.search_model_versions(max_results=PAGE, page_token=token)
        for v in page:
            tags = dict(v.tags or {})
            run_id = tags.get(RUN_TAG) or _run_id_of(tags.get(RUN_URI_TAG, ""))
            uris = [tags[t] for t in URI_TAGS if tags.get(t)] + ([v.source] if v.source else [])
            out.append(VersionRefs(f"{v.name} v{v.version}", run_id, tuple(uris)))
        token = page.token
        if not token:
            return out


def tracked_runs(tracking_uri: str) -> Callable[[str], bool]:
    """Whether the tracking server at `tracking_uri` has the MLflow run of a pipeline run (any state, deleted ones
    too). A run it does not know may be registered in another registry: gc keeps its lineage then (fail closed)."""
    from mlflow.entities import ViewType

    c = client(tracking_uri)
    experiments = [e.experiment_id for e in c.search_experiments(view_type=ViewType.ALL)]

    def known(run_id: str) -> bool:
        flt = f"tags.`{RUN_TAG}` = '{run_id}'"
        return bool(experiments and c.search_runs(experiments, flt, run_view_type=ViewType.ALL, max_results=1))

    return known


def _run_id_of(run_uri: str) -> str | None:
    """`.../runs/<run_id>` -> run_id."""
    head, _, run_id = run_uri.rstrip("/").rpartition("/")
    return run_id if head.endswith("runs") and run_id else None
