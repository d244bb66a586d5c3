"""Opening a pipeline run: preflight before any compute, the run's lease and record, then its MLflow run.

Preflight: the model's checkpoint complete (bad input fails at once, no resume offered), storage and MLflow
reachable with the credentials accepted, and a joined Ray cluster large enough for the training workers. Runs of
the pipeline whose process died (stale lease, essaflow/runs/crashed.py) are marked FAILED first. The run id is the
flow run's (a flow retry keeps it), or with `resume` (a run id, or `last`) the id of the run to continue, once its
recorded config is found compatible (essaflow/runs/resume.py). The run's lease is taken (essaflow/runs/lease.py): a
run another live process holds is refused. Never imports prefect.
"""

from __future__ import annotations

import time
import uuid
from dataclasses import dataclass, field

from essaflow import tracking
from essaflow.artifacts import check_storage, storage_uri_for
from essaflow.checks.cluster import check_training_fits
from essaflow.checks.preflight import require_runnable
from essaflow.config import PipelineConfig
from essaflow.methods import method_of
from essaflow.refs import RunRef
from essaflow.runs import lease
from essaflow.runs.crashed import mark_crashed
from essaflow.runs.journal import Journal
from essaflow.runs.record import record_run
from essaflow.runs.resume import resolve_run_id
from essaflow.storage import open_store
from essaflow.timing import Timer


@dataclass(frozen=True)
class FlowRun:
    """The orchestrator's flow run a pipeline run is opened from (what the MLflow run links back to)."""

    id: str | None = None
    """Flow run id (None outside an orchestrated flow: the run gets a fresh id)."""
    name: str = ""
    flow_name: str = ""
    ui_url: str = ""
    """The flow run's page in the orchestrator's UI (tagged only when it is an http(s) address)."""


@dataclass(frozen=True)
class OpenedRun:
    """An opened pipeline run and what preflight found on the way."""

    run: RunRef
    crashed: list[str] = field(default_factory=list)
    """Run ids of the pipeline's runs whose process had died, marked FAILED now."""
    resumed: bool = False
    """The run continues a failed run (`resume`)."""
    cluster: str | None = None
    """What the training asks of a joined Ray cluster, found to fit (None: no cluster joined)."""


def run_tags(config: PipelineConfig, storage_uri: str, run_id: str, flow: FlowRun) -> dict[str, str]:
    """The MLflow run's tags: the method and its variant, where the run's artifacts are, the source commit, and
    the flow run it belongs to."""
    tags = {
        "essaflow.method": config.method,
        **{f"essaflow.{k}": v for k, v in method_of(config).tags(config).items()},
        **{f"essaflow.{k}": v for k, v in config.eval.judged_with().items()},
        "essaflow.storage_uri": storage_uri,
        "essaflow.run_uri": f"{storage_uri.rstrip('/')}/runs/{run_id}",
        "essaflow.git_commit": tracking.git_commit(),
        "prefect.flow_run_id": flow.id or "",
        "prefect.flow_run_name": flow.name,
        "prefect.flow_name": flow.flow_name,
    }
    if flow.ui_url.startswith("http"):
        tags["prefect.flow_run_url"] = flow.ui_url
    return tags


def open_pipeline_run(config: PipelineConfig, resume: str | None, flow: FlowRun, journal: Journal) -> OpenedRun:
    """Preflight, lease and record, then the MLflow run (found again on a retry or a resume). `journal` learns the
    run id as soon as the lease is held (only a lease holder may mark the run failed)."""
    timer, started_at = Timer(), time.time()
    require_runnable(config)  # the environment, the model's checkpoint, a Ray head, a hub id: before any compute
    run_id = flow.id or uuid.uuid4().hex
    with timer.part("storage"):
        storage_uri = check_storage(storage_uri_for(config.storage_uri))
    with timer.part("tracking"):
        tracking_uri = tracking.resolve_tracking_uri(config.tracking_uri)
        tracking.check_tracking(tracking_uri)
    store = open_store(storage_uri)
    with timer.part("storage"):
        crashed = mark_crashed(store, tracking_uri, config.name)
        if resume:
            run_id = resolve_run_id(resume, store, tracking_uri, config)
        lease.acquire(store, run_id)  # a second process on this run id is refused here, naming the holder
        journal.working_on(run_id)
        record_run(store, run_id, config)
    request = check_training_fits(config.cluster_request(), config.ray_address)
    with timer.part("tracking"):
        mlrun = tracking.start_run(config, tracking_uri, run_id, run_tags(config, storage_uri, run_id, flow))
    run = RunRef(
        run_id=run_id, name=config.name, storage_uri=storage_uri, tracking_uri=tracking_uri,
        experiment_id=mlrun.experiment_id, mlflow_run_id=mlrun.run_id, mlflow_url=mlrun.url, flow_run_id=flow.id,
        started_at=started_at, stage="open_run", timings=timer.timings(),
    )  # fmt: skip
    return OpenedRun(run, crashed, bool(resume), str(request) if request is not None else None)
