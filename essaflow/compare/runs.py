"""A comparison's runs: the arms' measurements read back from storage (per-problem counts, the trainers' rows),
the child MLflow runs finished, the report (tables, claims, gate verdicts, projection, figures) published to
storage and to the parent MLflow run, and the runs marked FAILED when the comparison fails (docs/compare.md).
Never imports prefect."""

from __future__ import annotations

import json
import tempfile
import time
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from essaflow import tracking
from essaflow.artifacts import check_storage, read_eval_report, storage_uri_for
from essaflow.compare import plots, report, task_table
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
from essaflow.config import PipelineConfig
from essaflow.gate.digests import protocol_digest
from essaflow.methods import METHODS, method_of
from essaflow.projection.measured import RunMetrics
from essaflow.refs import AdapterRef, EvalRef, RunRef
from essaflow.runs.journal import Journal
from essaflow.secrets import safe_uri
from essaflow.storage import open_store

COMPARE_TAG = "essaflow.compare_run"
"""On every child run: the parent's run id."""


def task_config(cfg: CompareConfig) -> PipelineConfig:
    """The shared task as a pipeline config named after the comparison (its MLflow experiment)."""
    return cfg.task.model_copy(update={"name": cfg.name})


def open_comparison_run(cfg: CompareConfig, flow_run_id: str | None, journal: Journal) -> RunRef:
    """Storage and MLflow reachable (else fail before compute), then the parent MLflow run; its run id is the flow
    run's (a fresh one outside a flow), journalled for the failure hook."""
    run_id = flow_run_id or uuid.uuid4().hex
    storage_uri = check_storage(storage_uri_for(cfg.task.storage_uri))  # ESSAFLOW_STORAGE_URI wins, as for finetune
    tracking_uri = tracking.resolve_tracking_uri(cfg.task.tracking_uri)
    tracking.check_tracking(tracking_uri)
    journal.working_on(run_id)
    tags = {
        "essaflow.kind": "compare",
        "essaflow.methods": ", ".join(f"{m.name}={m.method}" for m in cfg.methods),
        "essaflow.seeds": ",".join(map(str, cfg.seeds)),
        "essaflow.budget_s": cfg.budget_s,
        "essaflow.run_uri": f"{storage_uri.rstrip('/')}/runs/{run_id}",
        "essaflow.git_commit": tracking.git_commit(),
        "prefect.flow_run_id": flow_run_id or "",
        "mlflow.runName": f"{cfg.name}-{run_id[:8]}",
    }
    mlrun = tracking.start_run(task_config(cfg), tracking_uri, run_id, tags)
    return RunRef(
        run_id=run_id, name=cfg.name, storage_uri=storage_uri, tracking_uri=tracking_uri,
        experiment_id=mlrun.experiment_id, mlflow_run_id=mlrun.run_id, mlflow_url=mlrun.url,
        flow_run_id=flow_run_id, started_at=time.time(), stage="open_comparison",
    )  # fmt: skip


def open_arm_run(parent: RunRef, arm: Arm) -> RunRef:
    """The arm's child MLflow run (nested under the parent; a retry finds the same one) and its storage prefix."""
    run_id = f"{parent.run_id}-{arm.name}"
    c = arm.config
    tags = {
        "mlflow.parentRunId": parent.mlflow_run_id,
        "mlflow.runName": arm.name,
        COMPARE_TAG: parent.run_id,
        "essaflow.method": c.method,
        "essaflow.compare_method": arm.method,
        "essaflow.seed": arm.seed,
        **{f"essaflow.{k}": v for k, v in method_of(c).tags(c).items()},
        "essaflow.run_uri": f"{parent.storage_uri.rstrip('/')}/runs/{run_id}",
    }
    mlrun = tracking.start_run(c, parent.tracking_uri, run_id, tags)
    return parent.model_copy(
        update={"run_id": run_id, "mlflow_run_id": mlrun.run_id, "mlflow_url": mlrun.url, "stage": "open_arm"}
    )


def arm_rows(run: RunRef) -> list[dict[str, Any]]:
    """The trainer's rows of a run (its train/metrics.jsonl in storage)."""
    raw = open_store(run.storage_uri).get_bytes(f"{run.run_prefix}/train/metrics.jsonl").decode()
    return [json.loads(line) for line in raw.splitlines() if line.strip()]


def close_arm_run(run: RunRef, arm: Arm, tuned: AdapterRef, after: EvalRef, start: EvalRef) -> ArmResult:
    """The arm's measurements from storage (per-problem counts, the trainer's rows); its child MLflow run
    finished."""
    measured, rows = read_eval_report(after), arm_rows(run)
    trainable = max((r.get("trainable_bytes", 0) for r in rows), default=0)
    payload = method_of(arm.config).allreduce_bytes(arm.config, trainable)
    result = ArmResult(
        method=arm.method,
        label=tuned.training.method_label,
        seed=arm.seed,
        summary=after.summary,
        pass_curve=pass_at_k_curve(measured.correct_counts, after.samples_per_problem),
        train_wall_s=tuned.training.wall_s,
        steps=tuned.training.steps,
        usage=tuned.training.usage,
        bytes_per_update=tuned.training.bytes_per_update,
        curve=accuracy_curve(rows, start.summary["greedy"]),
        allreduce_bytes=payload,
        fitness_kind=tuned.training.fitness_kind,
        mlflow_run_id=run.mlflow_run_id,
        run_id=run.run_id,
        problem_ids=measured.problem_ids,
        correct_counts=measured.correct_counts,
        greedy_correct=measured.greedy_correct,
    )
    tracking.finish_run(tracking.tracked(run))
    return result


def projection_runs(cfg: CompareConfig, arms: list[ArmResult], parent: RunRef) -> dict[str, RunMetrics | None]:
    """The first seed's rows of the methods that stand for ESSA and for GRPO (compare.projection; by default the
    first method each latency model prices, `Method.projection`)."""
    specs = {m.name: m for m in cfg.methods}
    priced: dict[str | None, str] = {}
    for spec in cfg.methods:
        priced.setdefault(METHODS.get(spec.method).projection, spec.name)
    first_seed: dict[str, ArmResult] = {}
    for arm in arms:
        first_seed.setdefault(arm.method, arm)
    chosen = {"essa": cfg.projection.essa or priced.get("essa"),
              "grpo": cfg.projection.grpo or plain_grpo(arms) or priced.get("grpo")}  # fmt: skip
    out: dict[str, RunMetrics | None] = {"essa": None, "grpo": None}
    for key, name in chosen.items():
        if name is None:
            continue
        first = first_seed[name]
        run = parent.model_copy(update={"run_id": first.run_id})
        c = cfg.arm_config(specs[name], first.seed)
        out[key] = RunMetrics(key, arm_rows(run), method_of(c).projection_settings(c))
    return out


@dataclass(frozen=True)
class PublishedReport:
    """A comparison's report, stored and logged: what the orchestrator's UI shows and what the flow returns."""

    markdown: str
    """The report page, its figures linked where the UI can show them."""
    result: dict[str, Any]
    """The report's JSON with the parent run's ids and where the report files are."""


def publish_comparison(cfg: CompareConfig, parent: RunRef, start: EvalRef, arms: list[ArmResult]) -> PublishedReport:
    """Tables, claims, gate verdicts, projection and figures: to storage (runs/<id>/report/) and to the parent
    MLflow run (report/, and each method's mean figures as metrics); the parent run finished."""
    store = open_store(parent.storage_uri)
    sft_report = read_eval_report(start)
    sft_curve = pass_at_k_curve(sft_report.correct_counts, sft_report.samples_per_problem)
    sft = {**start.summary, **{f"pass@{k}": sft_curve[k - 1] for k in report.HEADLINE_KS if k <= len(sft_curve)}}
    found = claims(arms, sft, start.samples_per_problem)
    t = cfg.task
    evidence = gate_evidence(arms, sft_report, t.eval.ks, t.gate, protocol_digest(t.eval, t.sampling))
    verdicts = gate_verdicts(evidence, arms)
    table = task_table.task_rows(cfg.name, arms, sft_report, sft, evidence, t.gate)
    runs = projection_runs(cfg, arms, parent)
    projection = compare_projection(runs["essa"], runs["grpo"], cfg.projection.bandwidth_gbs, cfg.projection.gpus)
    body = report.as_json(cfg, sft, arms, found, verdicts, projection, evidence, table)
    prefix = f"{parent.run_prefix}/report"
    mlflow_link = f"[parent run]({parent.mlflow_url})" if parent.mlflow_url else f"run `{parent.mlflow_run_id}`"
    with tempfile.TemporaryDirectory(prefix="essaflow-report-") as tmp:
        d = Path(tmp)
        plots.plot_pass_curves(arms, sft_curve, d / "passk.png")
        plots.plot_time_to_accuracy(arms, d / "time_to_accuracy.png")
        plots.plot_bytes(arms, d / "bytes.png")
        (d / "comparison.json").write_text(json.dumps(body, indent=2))
        page = report.render(cfg, sft, arms, found, verdicts, projection, {"mlflow": mlflow_link}, table)
        (d / "report.md").write_text(page)
        store.upload_dir(d, prefix, overwrite=True)
        tracking.client(parent.tracking_uri).log_artifacts(parent.mlflow_run_id, str(d), "report")
    links = {name: figure_link(parent, store.url(f"{prefix}/{name}"), name) for name in report.FIGURES}
    markdown = report.render(cfg, sft, arms, found, verdicts, projection, {**links, "mlflow": mlflow_link}, table)
    log_parent_metrics(parent, body)
    tracking.finish_run(tracking.tracked(parent))
    result = {**body, "run_id": parent.run_id, "mlflow_run_id": parent.mlflow_run_id, "report_uri": store.url(prefix),
              "tracking_uri": safe_uri(parent.tracking_uri)}  # fmt: skip
    files = f"\nReport files: `{store.url(prefix)}` (report.md, comparison.json, PNGs).\n"
    return PublishedReport(markdown + files, result)


def figure_link(parent: RunRef, stored: str, name: str) -> str:
    """An address the Prefect UI can show: the MLflow server's artifact endpoint for an http(s) tracking server
    (no credential: safe_uri drops it), else the file's storage URL."""
    base = safe_uri(parent.tracking_uri).rstrip("/")
    if not base.startswith(("http://", "https://")):
        return stored
    return f"{base}/get-artifact?path=report%2F{name}&run_uuid={parent.mlflow_run_id}"


def log_parent_metrics(parent: RunRef, body: dict[str, Any]) -> None:
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


def fail_comparison(tracking_uri: str | None, flow_run_id: str, reason: str) -> None:
    """The parent MLflow run (its run id is the flow run's) and every child still RUNNING marked FAILED, with
    `reason` as the parent's failure tag; raises when the server is unreachable within 2 s."""
    uri = tracking.resolve_tracking_uri(tracking_uri)
    tracking.check_tracking(uri, timeout=2.0)
    tracking.fail_run(uri, flow_run_id, reason)
    c = tracking.client(uri)
    exps = [e.experiment_id for e in c.search_experiments()]
    for r in c.search_runs(exps, filter_string=f"tags.`{COMPARE_TAG}` = '{flow_run_id}'") if exps else []:
        if r.info.status == "RUNNING":
            c.set_terminated(r.info.run_id, "FAILED")
