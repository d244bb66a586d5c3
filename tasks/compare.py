"""The compare flow's own stages: the parent MLflow run, one child run per method and seed, the report.

Training and evaluation are the pipeline's own tasks (tasks/training.py, tasks/evaluation.py), called with each
arm's config and child run, so a compared method runs exactly as `essaflow run` would run it.
"""

from __future__ import annotations

import json
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

from prefect import get_run_logger, task
from prefect.artifacts import create_markdown_artifact, create_table_artifact
from prefect.runtime import flow_run

from essaflow import tracking
from essaflow.artifacts import check_storage, read_eval_report, storage_uri_for
from essaflow.compare import plots, report
from essaflow.compare.config import Arm, CompareConfig
from essaflow.compare.results import (
    ArmResult,
    accuracy_curve,
    claims,
    gate_evidence,
    gate_verdicts,
    pass_at_k_curve,
    plain_grpo,
)
from essaflow.compare.scaling import compare_projection
from essaflow.config import ESSAConfig, GRPOConfig, PipelineConfig
from essaflow.judging.gate import protocol_digest
from essaflow.projection.measured import RunMetrics
from essaflow.refs import AdapterRef, EvalRef, RunRef
from essaflow.storage import open_store
from essaflow.training.run import method_tags
from tasks import failures
from tasks.retry import retry_policy
from tasks.run import tracked

COMPARE_TAG = "essaflow.compare_run"  # on every child run: the parent's run id


def task_config(cfg: CompareConfig) -> PipelineConfig:
    """The shared task as a pipeline config named after the comparison (its MLflow experiment)."""
    return cfg.task.model_copy(update={"name": cfg.name})


@task(name="open_comparison", task_run_name="open_comparison", **retry_policy(retries=0))
def open_comparison(cfg: CompareConfig) -> RunRef:
    """Storage and MLflow reachable (else fail before compute), then the parent MLflow run."""
    run_id = flow_run.get_id() or uuid.uuid4().hex
    storage_uri = check_storage(storage_uri_for(cfg.task.storage_uri))  # ESSAFLOW_STORAGE_URI wins, as for finetune
    tracking_uri = tracking.resolve_tracking_uri(cfg.task.tracking_uri)
    tracking.check_tracking(tracking_uri)
    failures.RUN_IDS[str(flow_run.get_id())] = run_id
    tags = {
        "essaflow.kind": "compare",
        "essaflow.methods": ", ".join(f"{m.name}={m.method}" for m in cfg.methods),
        "essaflow.seeds": ",".join(map(str, cfg.seeds)),
        "essaflow.budget_s": cfg.budget_s,
        "essaflow.run_uri": f"{storage_uri.rstrip('/')}/runs/{run_id}",
        "essaflow.git_commit": tracking.git_commit(),
        "prefect.flow_run_id": flow_run.get_id() or "",
        "mlflow.runName": f"{cfg.name}-{run_id[:8]}",
    }
    mlrun = tracking.open_run(task_config(cfg), tracking_uri, run_id, tags)
    get_run_logger().info("comparison %s: MLflow parent run %s", run_id, mlrun.run_id)
    return RunRef(
        run_id=run_id, name=cfg.name, storage_uri=storage_uri, tracking_uri=tracking_uri,
        experiment_id=mlrun.experiment_id, mlflow_run_id=mlrun.run_id, mlflow_url=mlrun.url,
        flow_run_id=flow_run.get_id(), started_at=time.time(), stage="open_comparison",
    )  # fmt: skip


@task(name="open_arm", task_run_name="open-{arm.name}", **retry_policy(backoff_s=1))
def open_arm(parent: RunRef, arm: Arm) -> RunRef:
    """The arm's child MLflow run (nested under the parent; a retry finds the same one) and its storage prefix."""
    run_id = f"{parent.run_id}-{arm.name}"
    c = arm.config
    tags = {
        "mlflow.parentRunId": parent.mlflow_run_id,
        "mlflow.runName": arm.name,
        COMPARE_TAG: parent.run_id,
        "essaflow.method": arm.config.method,
        "essaflow.compare_method": arm.method,
        "essaflow.seed": arm.seed,
        **{f"essaflow.{k}": v for k, v in method_tags(c.method, c.essa, c.grpo).items()},
        "essaflow.run_uri": f"{parent.storage_uri.rstrip('/')}/runs/{run_id}",
    }
    mlrun = tracking.open_run(arm.config, parent.tracking_uri, run_id, tags)
    return parent.model_copy(
        update={"run_id": run_id, "mlflow_run_id": mlrun.run_id, "mlflow_url": mlrun.url, "stage": "open_arm"}
    )


def _rows(run: RunRef) -> list[dict[str, Any]]:
    raw = open_store(run.storage_uri).get_bytes(f"{run.run_prefix}/train/metrics.jsonl").decode()
    return [json.loads(line) for line in raw.splitlines() if line.strip()]


@task(name="close_arm", task_run_name="close-{arm.name}", **retry_policy(backoff_s=1))
def close_arm(run: RunRef, arm: Arm, tuned: AdapterRef, after: EvalRef, start: EvalRef) -> ArmResult:
    """The arm's measurements from storage (per-problem counts, the trainer's rows); the child run finished."""
    measured, rows = read_eval_report(after), _rows(run)
    trainable = max((r.get("trainable_bytes", 0) for r in rows), default=0)
    payload = float(trainable) * arm.config.grpo.mini_batches if arm.config.method == "fgrpo" else 0.0
    result = ArmResult(
        method=arm.method,
        label=tuned.method_label,
        seed=arm.seed,
        summary=after.summary,
        pass_curve=pass_at_k_curve(measured.correct_counts, after.samples_per_problem),
        train_wall_s=tuned.wall_s,
        steps=tuned.steps,
        usage=tuned.usage,
        bytes_per_update=tuned.bytes_per_update,
        curve=accuracy_curve(rows, start.summary["greedy"]),
        allreduce_bytes=payload,
        fitness_kind=tuned.fitness_kind,
        mlflow_run_id=run.mlflow_run_id,
        run_id=run.run_id,
        problem_ids=measured.problem_ids,
        correct_counts=measured.correct_counts,
        greedy_correct=measured.greedy_correct,
    )
    tracking.finish_run(tracked(run))
    return result


def _projection_runs(cfg: CompareConfig, arms: list[ArmResult], parent: RunRef) -> dict[str, RunMetrics | None]:
    """The first seed's rows of the methods that stand for ESSA and for GRPO (compare.projection)."""
    specs = {m.name: m for m in cfg.methods}
    essa = cfg.projection.essa or next((m.name for m in cfg.methods if m.method == "essa"), None)
    fgrpo = next((m.name for m in cfg.methods if m.method == "fgrpo"), None)
    grpo = cfg.projection.grpo or plain_grpo(arms) or fgrpo
    out: dict[str, RunMetrics | None] = {"essa": None, "grpo": None}
    for key, name in (("essa", essa), ("grpo", grpo)):
        if name is None:
            continue
        first = next(a for a in arms if a.method == name)
        run = parent.model_copy(update={"run_id": first.run_id})
        c = cfg.arm_config(specs[name], first.seed)
        out[key] = RunMetrics(key, _rows(run), _unrecorded_settings(c.method, c.essa, c.grpo))
    return out


def _unrecorded_settings(method: str, essa: ESSAConfig, grpo: GRPOConfig) -> dict[str, int]:
    """What the latency model needs that the rows do not record (essaflow/projection/measured.py)."""
    if method == "essa":
        return {"workers": essa.workers.count, "population": essa.population, "minibatch": essa.minibatch}
    return {"workers": grpo.workers.count, "mini_batches": grpo.mini_batches}


@task(name="write_report", task_run_name="write_report", **retry_policy(backoff_s=1))
def write_report(cfg: CompareConfig, parent: RunRef, start: EvalRef, arms: list[ArmResult]) -> dict[str, Any]:
    """Tables, claims, gate verdicts, projection and figures: to storage (runs/<id>/report/), to the parent MLflow
    run (report/), and as Prefect artifacts; the parent run finished. Returns the report's JSON."""
    store = open_store(parent.storage_uri)
    sft_report = read_eval_report(start)
    sft_curve = pass_at_k_curve(sft_report.correct_counts, sft_report.samples_per_problem)
    sft = {**start.summary, **{f"pass@{k}": sft_curve[k - 1] for k in report.HEADLINE_KS if k <= len(sft_curve)}}
    found = claims(arms, sft, start.samples_per_problem)
    t = cfg.task
    evidence = gate_evidence(arms, sft_report, t.promotion_metric, t.eval.ks, t.registry,
                             protocol_digest(t.eval, t.sampling))  # fmt: skip
    verdicts = gate_verdicts(evidence, arms)
    runs = _projection_runs(cfg, arms, parent)
    projection = compare_projection(runs["essa"], runs["grpo"], cfg.projection.bandwidth_gbs, cfg.projection.gpus)
    body = report.as_json(cfg, sft, arms, found, verdicts, projection, evidence)
    prefix = f"{parent.run_prefix}/report"
    with tempfile.TemporaryDirectory(prefix="essaflow-report-") as tmp:
        d = Path(tmp)
        plots.plot_pass_curves(arms, sft_curve, d / "passk.png")
        plots.plot_time_to_accuracy(arms, d / "time_to_accuracy.png")
        plots.plot_bytes(arms, d / "bytes.png")
        (d / "comparison.json").write_text(json.dumps(body, indent=2))
        mlflow_link = f"[parent run]({parent.mlflow_url})" if parent.mlflow_url else f"run `{parent.mlflow_run_id}`"
        page = report.render(cfg, sft, arms, found, verdicts, projection, {"mlflow": mlflow_link})
        (d / "report.md").write_text(page)
        store.upload_dir(d, prefix, overwrite=True)
        tracking.client(parent.tracking_uri).log_artifacts(parent.mlflow_run_id, str(d), "report")
    links = {name: _figure_link(parent, store.url(f"{prefix}/{name}"), name) for name in report.FIGURES}
    links["mlflow"] = mlflow_link
    markdown = report.render(cfg, sft, arms, found, verdicts, projection, links)
    create_markdown_artifact(
        markdown + f"\nReport files: `{store.url(prefix)}` (report.md, comparison.json, PNGs).\n",
        key="compare-report", description=f"{cfg.name}: {parent.run_id}",
    )  # fmt: skip
    create_table_artifact([a.row() for a in arms], key="compare-runs", description="every method and seed")
    _log_parent(parent, body)
    tracking.finish_run(tracked(parent))
    return {**body, "run_id": parent.run_id, "mlflow_run_id": parent.mlflow_run_id, "report_uri": store.url(prefix),
            "tracking_uri": tracking.safe_uri(parent.tracking_uri)}  # fmt: skip


def _figure_link(parent: RunRef, stored: str, name: str) -> str:
    """An address the Prefect UI can show: the MLflow server's artifact endpoint for an http(s) tracking server
    (no credential: safe_uri drops it), else the file's storage URL."""
    base = tracking.safe_uri(parent.tracking_uri).rstrip("/")
    if not base.startswith(("http://", "https://")):
        return stored
    return f"{base}/get-artifact?path=report%2F{name}&run_uuid={parent.mlflow_run_id}"


def _log_parent(parent: RunRef, body: dict[str, Any]) -> None:
    """Per method, the mean over seeds of each headline figure as parent-run metrics compare.<method>.<figure>."""
    from mlflow.entities import Metric

    now = int(time.time() * 1000)
    metrics = [
        Metric(f"compare.{method}.{tracking.metric_key(k)}", float(v["mean"]), now, 0)
        for method, t in body["methods"].items()
        for k, v in t.items()
        if isinstance(v, dict) and "mean" in v
    ]
    tracking.client(parent.tracking_uri).log_batch(parent.mlflow_run_id, metrics=metrics)


def mark_compare_failed(flow: Any, flow_run: Any, state: Any) -> None:
    """Flow hook: the parent run and any child still RUNNING become FAILED, with the failure as a tag."""
    params = flow_run.parameters or {}
    cfg = params.get("config") or {}
    task_cfg = cfg.get("task", {}) if isinstance(cfg, dict) else {}
    failure = failures.first_failure(str(flow_run.id))
    reason = f"{failure.stage}: {failure.error}" if failure else tracking.scrub(state.message or state.name)
    uri = tracking.resolve_tracking_uri(task_cfg.get("tracking_uri") if isinstance(task_cfg, dict) else None)
    try:
        tracking.check_tracking(uri, timeout=2.0)
        tracking.fail_run(uri, str(flow_run.id), reason)
        c = tracking.client(uri)
        exps = [e.experiment_id for e in c.search_experiments()]
        for r in c.search_runs(exps, filter_string=f"tags.`{COMPARE_TAG}` = '{flow_run.id}'") if exps else []:
            if r.info.status == "RUNNING":
                c.set_terminated(r.info.run_id, "FAILED")
    except Exception as e:  # the failure may be MLflow itself
        get_run_logger().warning("could not mark the MLflow runs failed: %s", tracking.scrub(str(e)))
