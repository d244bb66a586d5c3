"""Metrics and plots of a pipeline run in MLflow: per generation/step rows, the training summary, pass@k reports
and the before/after comparison. Never imports prefect; `tracking/buffer.py` batches the step rows."""

from __future__ import annotations

import json
import tempfile
import time
from pathlib import Path
from typing import Any

from essaflow.judging.evaluation import EvalReport, plot_pass_at_k
from essaflow.refs import TrainingSummary
from essaflow.tracking.runs import TrackedRun, set_tags
from essaflow.tracking.server import client


def metric_key(name: str) -> str:
    """pass@4 -> pass_at_4 (MLflow names allow no '@')."""
    return name.replace("@", "_at_")


def logged_steps(run: TrackedRun, prefix: str = "train") -> dict[str, int]:
    """{metric key: newest step already logged} for the run's metrics under `prefix.` (a resumed run skips those)."""
    c = client(run.tracking_uri)
    keys = [k for k in c.get_run(run.run_id).data.metrics if k.startswith(prefix + ".")]
    return {k: max(m.step for m in c.get_metric_history(run.run_id, k)) for k in keys}


def log_step_metrics(
    run: TrackedRun, rows: list[dict[str, Any]], prefix: str = "train", logged: dict[str, int] | None = None
) -> None:
    """Numeric entries of per-generation/step dicts as metrics, stepped by their `step`/`generation` field.

    `logged` ({key: newest logged step}, see :func:`logged_steps`) drops points at or before a key's newest step,
    so steps recomputed after a retry or a resume are not logged twice; it is updated with what is logged here.
    """
    from mlflow.entities import Metric

    now = int(time.time() * 1000)
    metrics = []
    for i, row in enumerate(rows):
        step = int(row.get("step", row.get("generation", i)))
        for k, v in row.items():
            if isinstance(v, (int, float)) and not isinstance(v, bool) and k not in ("step", "generation"):
                key = f"{prefix}.{metric_key(k)}"
                if logged is not None:
                    if step <= logged.get(key, -1):
                        continue
                    logged[key] = step
                metrics.append(Metric(key, float(v), now, step))
    c = client(run.tracking_uri)
    for i in range(0, len(metrics), 1000):
        c.log_batch(run.run_id, metrics=metrics[i : i + 1000])


def log_eval(run: TrackedRun, label: str, report: EvalReport) -> None:
    """greedy and pass@k as metrics `eval.<label>.*`, the report JSON and the pass@k curve as artifacts."""
    from mlflow.entities import Metric

    now = int(time.time() * 1000)
    c = client(run.tracking_uri)
    have = c.get_run(run.run_id).data.metrics  # a resumed run evaluates again: one point per metric all the same
    metrics = [Metric(f"eval.{label}.{metric_key(k)}", float(v), now, 0) for k, v in report.metrics().items()]
    if metrics := [m for m in metrics if m.key not in have]:
        c.log_batch(run.run_id, metrics=metrics)
    body = json.loads(report.to_json())
    body.pop("samples", None)  # completions live in the stored samples.jsonl.gz, not in the tracking server
    c.log_dict(run.run_id, body, f"eval/{label}/passk.json")
    with tempfile.TemporaryDirectory() as tmp:
        png = plot_pass_at_k({label: report}, Path(tmp) / "passk.png")
        c.log_artifact(run.run_id, str(png), f"eval/{label}")


def log_comparison(run: TrackedRun, reports: dict[str, EvalReport]) -> None:
    """The pass@k table (one row per k, one column per label) and one plot with every curve."""
    c = client(run.tracking_uri)
    ks = sorted({int(k) for r in reports.values() for k in r.pass_at_k})
    table = {"k": ks, **{label: [r.pass_at_k.get(str(k)) for k in ks] for label, r in reports.items()}}
    c.log_table(run.run_id, table, "eval/passk_table.json")
    with tempfile.TemporaryDirectory() as tmp:
        png = plot_pass_at_k(reports, Path(tmp) / "passk_before_after.png")
        c.log_artifact(run.run_id, str(png), "eval")


def log_training_summary(run: TrackedRun, summary: TrainingSummary) -> None:
    """The training summary as `train.summary.*` metrics at its last step (once: a retried stage that already
    logged it logs nothing again), and how F-GRPO held the weights as the `essaflow.sharding` tag."""
    done = logged_steps(run, "train.summary")
    log_step_metrics(run, [{"step": summary.steps, **summary.metrics_row()}], "train.summary", done)
    if summary.sharding:
        set_tags(run, {"essaflow.sharding": summary.sharding})
