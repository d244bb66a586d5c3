"""Evaluation reports in storage: runs/<run_id>/eval/<label>/{passk.json, samples.jsonl.gz, passk.png}."""

from __future__ import annotations

import gzip
import json
import tempfile
from pathlib import Path

from essaflow.artifacts.dirs import fetch_dir
from essaflow.evaluation import EvalReport, plot_pass_at_k
from essaflow.refs import EvalRef, RunRef
from essaflow.storage import ArtifactStore


def publish_eval(store: ArtifactStore, run: RunRef, label: str, report: EvalReport, protocol: dict) -> EvalRef:
    """Write runs/<run_id>/eval/<label>/{passk.json, samples.jsonl.gz, passk.png} as one directory artifact."""
    prefix = f"{run.run_prefix}/eval/{label}"
    with tempfile.TemporaryDirectory(prefix="essaflow-eval-") as tmp:
        d = Path(tmp)
        body = {"label": label, **json.loads(report.to_json()), "protocol": protocol}
        body.pop("correct_counts"), body.pop("problem_ids")
        (d / "passk.json").write_text(json.dumps(body, indent=2, sort_keys=True))
        lines = [
            json.dumps({"id": pid, "n": report.samples_per_problem, "correct": c})
            for pid, c in zip(report.problem_ids, report.correct_counts)
        ]
        with open(d / "samples.jsonl.gz", "wb") as raw, gzip.GzipFile(fileobj=raw, mode="wb", mtime=0) as gz:
            gz.write(("\n".join(lines) + "\n").encode())
        plot_pass_at_k({label: report}, d / "passk.png")
        store.upload_dir(d, prefix, overwrite=True)  # a retried evaluation replaces its own report
    return EvalRef(
        uri=store.url(prefix),
        label=label,
        summary=report.summary(),
        num_problems=report.num_problems,
        samples_per_problem=report.samples_per_problem,
    )


def read_eval_report(ref: EvalRef) -> EvalReport:
    """Rebuild an EvalReport (with per-problem counts) from its stored files."""
    local = fetch_dir(ref.uri)
    body = json.loads((local / "passk.json").read_text())
    with gzip.open(local / "samples.jsonl.gz", "rt") as f:
        rows = [json.loads(line) for line in f if line.strip()]
    return EvalReport(
        num_problems=body["num_problems"],
        samples_per_problem=body["samples_per_problem"],
        greedy=body["greedy"],
        pass_at_k=body["pass_at_k"],
        correct_counts=[r["correct"] for r in rows],
        problem_ids=[r["id"] for r in rows],
        wall_s=body.get("wall_s", 0.0),
        sequences_per_s=body.get("sequences_per_s", 0.0),
    )
