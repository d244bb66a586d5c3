"""Opening and closing a pipeline run: preflight checks, the MLflow run, the summary artifacts in the Prefect UI."""

from __future__ import annotations

import json
import logging
import time
import uuid
from collections import defaultdict
from typing import Any

from prefect import get_run_logger, task
from prefect.artifacts import create_markdown_artifact, create_table_artifact
from prefect.runtime import flow_run

from essaflow import tracking
from essaflow.artifacts import check_storage, storage_uri_for
from essaflow.cluster.preflight import check_training_fits
from essaflow.config import PipelineConfig
from essaflow.input_check import require_model
from essaflow.refs import AdapterRef, DatasetRef, EvalRef, ModelRef, PipelineResult, RegisteredRef, RunRef
from essaflow.storage import open_store
from essaflow.timing import Timer
from essaflow.training import lease
from essaflow.training.crashed import mark_crashed
from essaflow.training.nothing_new import OUTCOME_TAG, TRAINED
from essaflow.training.resume import record_run, resolve_run_id
from essaflow.training.run import method_tags
from tasks import failures
from tasks.progress import notify
from tasks.retry import retry_policy

PIPELINE_STAGES = 8  # open_run .. register, for the terminal's stage counter


class _QuietStageHook(logging.Filter):
    """Prefect logs two INFO lines per hook call; record_stage runs after every stage and says nothing useful."""

    def filter(self, record: logging.LogRecord) -> bool:
        return "'record_stage'" not in record.getMessage()


logging.getLogger("prefect.task_runs").addFilter(_QuietStageHook())
#: flow run id -> task run name -> (wall seconds as the task engine recorded them, final state name)
_STAGES: dict[str, dict[str, tuple[float, str]]] = defaultdict(dict)


def record_stage(task: Any, task_run: Any, state: Any) -> None:
    """Task completion hook: the stage's wall time including retries and orchestration (0 for a cache hit)."""
    start, end = task_run.start_time, task_run.end_time or state.timestamp
    wall = (end - start).total_seconds() if start and end else 0.0
    stages = _STAGES[str(task_run.flow_run_id)]
    stages[task_run.name] = (round(wall, 2), state.name)
    notify("pipeline", len(stages), PIPELINE_STAGES, task_run.name)


def tracked(run: RunRef) -> tracking.TrackedRun:
    return tracking.TrackedRun(run.tracking_uri, run.experiment_id, run.mlflow_run_id)


@task(
    name="open_run",
    task_run_name="open_run",
    **retry_policy(retries=0),
    on_completion=[record_stage],
)
def open_run(config: PipelineConfig, resume: str | None = None) -> RunRef:
    """Preflight (the model's checkpoint complete, storage and MLflow reachable, credentials accepted, a joined Ray
    cluster large enough for the training workers) before any compute, then the MLflow run.

    The whole pipeline config: it is the run's record (the MLflow params, and what a resume is checked against).

    The run id is the flow run's (a flow retry keeps it), or with `resume` (a run id, or `last` for the newest
    failed run of this pipeline) the id of the run to continue, once its recorded config is found compatible.
    The run's lease is taken (essaflow/training/lease.py): a run another live process holds is refused. RUNNING
    runs of the pipeline whose process died (stale lease) are marked FAILED first.
    No retries: an unreachable server or a rejected credential is reported at once, naming the URI.
    """
    timer = Timer()
    started_at = time.time()
    require_model(config.model)  # bad input: fails at once, no retry, no resume offered (tasks.retry.BAD_INPUT)
    run_id = flow_run.get_id() or uuid.uuid4().hex
    with timer.part("storage"):
        storage_uri = check_storage(storage_uri_for(config.storage_uri))
    with timer.part("tracking"):
        tracking_uri = tracking.resolve_tracking_uri(config.tracking_uri)
        tracking.check_tracking(tracking_uri)
    store = open_store(storage_uri)
    with timer.part("storage"):
        for crashed in mark_crashed(store, tracking_uri, config.name):
            get_run_logger().warning("run %s: its process died (heartbeat stale); marked FAILED in MLflow", crashed)
        if resume:
            run_id = resolve_run_id(resume, store, tracking_uri, config)
            get_run_logger().info("resuming run %s from its newest checkpoint", run_id)
        lease.acquire(store, run_id)  # a second process on this run id is refused here, naming the holder
        failures.RUN_IDS[str(flow_run.get_id())] = run_id  # only a lease holder may mark the run failed
        record_run(store, run_id, config)
    # joining a cluster: its nodes can hold the training workers
    request = check_training_fits(config.method, config.essa, config.grpo, config.ray_address)
    if request is not None:
        get_run_logger().info("Ray cluster can hold the training workers: %s", request)
    with timer.part("tracking"):
        tags = {
            "essaflow.method": config.method,
            **{f"essaflow.{k}": v for k, v in method_tags(config.method, config.essa, config.grpo).items()},
            "essaflow.storage_uri": storage_uri,
            "essaflow.run_uri": f"{storage_uri.rstrip('/')}/runs/{run_id}",
            "essaflow.git_commit": tracking.git_commit(),
            "prefect.flow_run_id": flow_run.get_id() or "",
            "prefect.flow_run_name": flow_run.get_name() or "",
            "prefect.flow_name": flow_run.get_flow_name() or "",
        }
        ui_url = flow_run.get_flow_run_ui_url() or ""
        if ui_url.startswith("http"):
            tags["prefect.flow_run_url"] = ui_url
        mlrun = tracking.open_run(config, tracking_uri, run_id, tags)
    get_run_logger().info(
        "run %s: storage %s, MLflow run %s at %s",
        run_id,
        storage_uri,
        mlrun.run_id,
        mlrun.url or tracking.safe_uri(tracking_uri),
    )
    return RunRef(
        run_id=run_id,
        name=config.name,
        storage_uri=storage_uri,
        tracking_uri=tracking_uri,
        experiment_id=mlrun.experiment_id,
        mlflow_run_id=mlrun.run_id,
        mlflow_url=mlrun.url,
        flow_run_id=flow_run.get_id(),
        started_at=started_at,
        stage="open_run",
        timings=timer.timings(),
    )


def stage_walls(flow_run_id: str | None) -> tuple[dict[str, float], set[str]]:
    stages = _STAGES.pop(str(flow_run_id), {})
    return {k: v[0] for k, v in stages.items()}, {k for k, v in stages.items() if v[1] == "Cached"}


def _passk_rows(before: EvalRef, after: EvalRef) -> list[dict[str, Any]]:
    return [
        {
            "metric": k,
            "before": round(before.summary[k], 4),
            "after": round(v, 4),
            "delta": round(v - before.summary[k], 4),
        }
        for k, v in after.summary.items()
        if k in before.summary
    ]


def _markdown(
    run: RunRef, dataset: DatasetRef, adapter: AdapterRef, before: EvalRef, after: EvalRef, model: RegisteredRef
) -> str:
    mlflow_link = f"[MLflow run]({run.mlflow_url})" if run.mlflow_url else f"MLflow run `{run.mlflow_run_id}`"
    rows = "\n".join(
        f"| {r['metric']} | {r['before']} | {r['after']} | {r['delta']:+} |" for r in _passk_rows(before, after)
    )
    return f"""# Fine-tune `{run.name}`: {model.name} v{model.version} ({", ".join(model.aliases)})

{mlflow_link} (tracking `{tracking.safe_uri(run.tracking_uri)}`), registered model `{model.model_uri}`.
Promotion gate: {model.decision}.

Method: {adapter.method_label or adapter.kind}{f"; fitness: {adapter.fitness_kind}" if adapter.fitness_kind else ""}.

| metric | before | after | delta |
|---|---|---|---|
{rows}

## Artifacts
- dataset `{dataset.hash}` ({dataset.sizes}): `{dataset.uri}`
{_snapshot_lines(dataset)}
- adapter ({adapter.kind}, {adapter.steps} steps): `{adapter.uri}`
- eval reports: `{before.uri}`, `{after.uri}`
- checkpoints: `{run.storage_uri.rstrip("/")}/{run.run_prefix}/checkpoints/`
"""


def _snapshot_lines(dataset: DatasetRef, shown: int = 10) -> str:
    """The data snapshot the run read, one bullet per source, its files listed (the first few) with versions."""
    lines = [f"- data snapshot `{dataset.snapshot.get('digest', '')}`; left out: {dataset.excluded}"]
    for s in dataset.snapshot.get("sources", []):
        files = list(s["files"].items())
        lines.append(f"  - {s['role']}: `{s['source']}` `{s['digest']}` ({len(files)} file(s))")
        lines += [f"    - `{uri}` `{version}`" for uri, version in files[:shown]]
        if len(files) > shown:
            lines.append(f"    - ... and {len(files) - shown} more")
    return "\n".join(lines)


def data_summary(dataset: DatasetRef) -> dict[str, Any]:
    """The run's JSON line `data`: the snapshot digest, how many files, what was left out of the splits."""
    files = sum(len(s["files"]) for s in dataset.snapshot.get("sources", []))
    return {"snapshot": dataset.snapshot.get("digest", ""), "files": files, **dataset.excluded}


@task(
    name="close_run",
    task_run_name="close_run",
    **retry_policy(backoff_s=1),
)
def close_run(
    run: RunRef,
    dataset: DatasetRef,
    base: ModelRef,
    sft: AdapterRef,
    adapter: AdapterRef,
    before: EvalRef,
    after: EvalRef,
    model: RegisteredRef,
) -> PipelineResult:
    """Summary artifacts (markdown with links, pass@k before/after table), final MLflow tags, run finished."""
    create_table_artifact(_passk_rows(before, after), key="passk-before-after", description="pass@k before and after")
    create_markdown_artifact(
        _markdown(run, dataset, adapter, before, after, model), key="finetune-summary", description=run.run_id
    )
    walls, cached = stage_walls(run.flow_run_id)
    flow_s = round(time.time() - run.started_at, 2)
    parts: dict[str, float] = {"compute": 0.0, "storage": 0.0, "tracking": 0.0}
    for ref in (run, dataset, base, sft, adapter, before, after, model):
        if ref.stage in cached:
            continue
        for k in parts:
            parts[k] += ref.timings.get(k, 0.0)
    tracking.set_tags(
        tracked(run),
        {
            "essaflow.model": model.model_uri,
            "essaflow.aliases": ",".join(model.aliases),
            "essaflow.dataset_uri": dataset.uri,
            "essaflow.adapter_uri": adapter.uri,
            **{f"essaflow.data_filtered.{name}": str(n) for name, n in dataset.filtered.items()},
            OUTCOME_TAG: TRAINED,  # what the next run's "nothing new" check compares with
        },
    )
    tracking.finish_run(tracked(run))
    lease.release(run.run_id)
    return PipelineResult(
        run_id=run.run_id,
        before=before.summary,
        after=after.summary,
        model_name=model.name,
        model_version=model.version,
        aliases=model.aliases,
        decision=model.decision,
        gate=model.gate,
        tracking_uri=tracking.safe_uri(run.tracking_uri),
        storage_uri=run.storage_uri,
        mlflow_run_id=run.mlflow_run_id,
        dataset_uri=dataset.uri,
        adapter_uri=adapter.uri,
        data_filtered=dataset.filtered,
        data=data_summary(dataset),
        training=adapter.model_dump(
            include={
                "kind",
                "method_label",
                "fitness_kind",
                "steps",
                "resumed_from",
                "work_by_node",
                "worker_failures",
                "wall_s",
                "bytes_per_update",
                "sharding",
                "memory_per_rank",
                "usage",
            }  # fmt: skip
        ),
        stages=walls,
        cached=sorted(cached),
        flow_s=flow_s,
        parts={k: round(v, 2) for k, v in parts.items()},
    )


def end_evaluation(run: RunRef) -> None:
    """An evaluation run ends: its MLflow run FINISHED, its lease given back."""
    tracking.finish_run(tracked(run))
    lease.release(run.run_id)


def mark_failed(flow: Any, flow_run: Any, state: Any) -> None:
    """Flow hook: a failed or crashed pipeline run leaves its MLflow run FAILED (with the failure as a tag), not
    RUNNING forever, and ends its log with the failure's JSON line (the CLI prints the same one)."""
    params = flow_run.parameters or {}
    cfg = params.get("config") or params.get("params") or {}
    failure = failures.first_failure(str(flow_run.id))
    run_id = failures.RUN_IDS.get(str(flow_run.id))
    stage = failure.stage if failure else "flow"
    error = failure.error if failure else tracking.scrub(state.message or state.name)
    resume = None
    if run_id and flow.name == "finetune" and (failure is None or failure.resumable):
        resume = f"essaflow run <config> --resume {run_id} (or the finetune flow with parameter resume={run_id})"
    get_run_logger().error("%s", json.dumps(failures.failure_line(error, stage, run_id, resume)))
    lease.release(run_id)  # a resume may start at once; a process that dies instead leaves it to expire
    uri = tracking.resolve_tracking_uri(cfg.get("tracking_uri") if isinstance(cfg, dict) else None)
    try:
        tracking.check_tracking(uri, timeout=2.0)
        tracking.fail_run(uri, run_id or str(flow_run.id), f"{stage}: {error}")
    except Exception as e:  # the failure may be MLflow itself; the flow's own error is what matters
        get_run_logger().warning("could not mark the MLflow run failed: %s", tracking.scrub(str(e)))
