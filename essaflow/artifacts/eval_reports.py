"""Evaluation reports in storage: runs/<run_id>/eval/<label>/{passk.json, samples.jsonl.gz, passk.png}.

samples.jsonl.gz holds one line per problem: the correct count out of n, and up to eval.samples_saved_per_problem
completions with their reward and whether they hit the length cap, so anyone can read what the model wrote."""

from __future__ import annotations

import gzip
import json
import tempfile
from pathlib import Path
from typing import Any

from essaflow.artifacts.dirs import fetch_dir
from essaflow.generation.config import SamplingConfig
from essaflow.judging.config import EvalConfig
from essaflow.judging.evaluation import EvalReport, plot_pass_at_k
from essaflow.refs import EvalRef, RunRef
from essaflow.storage import ArtifactStore


def protocol_record(eval_cfg: EvalConfig, sampling: SamplingConfig) -> dict[str, Any]:
    """The protocol stored beside a report (passk.json's `protocol`): the eval and sampling sections."""
    return {"eval": eval_cfg.model_dump(mode="json"), "sampling": sampling.model_dump(mode="json")}


def publish_eval(store: ArtifactStore, run: RunRef, label: str, report: EvalReport, protocol: dict) -> EvalRef:
    """Write runs/<run_id>/eval/<label>/{passk.json, samples.jsonl.gz, passk.png} as one directory artifact."""
    prefix = f"{run.run_prefix}/eval/{label}"
    with tempfile.TemporaryDirectory(prefix="essaflow-eval-") as tmp:
        d = Path(tmp)
        body = {"label": label, **json.loads(report.to_json()), "protocol": protocol}
        for per_problem in ("correct_counts", "greedy_correct", "problem_ids", "samples"):
            body.pop(per_problem)
        (d / "passk.json").write_text(json.dumps(body, indent=2, sort_keys=True))
        lines = [json.dumps(row, ensure_ascii=False) for row in sample_lines(report)]
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
        truncated_share=report.truncated_share,
        judged_with=report.judged_with,
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
        truncated_share=body.get("truncated_share", 0.0),
        greedy_truncated_share=body.get("greedy_truncated_share", 0.0),
        max_new_tokens=body.get("max_new_tokens", 0),
        reward_mean=body.get("reward_mean", 0.0),
        reward_components=body.get("reward_components", {}),
        reward_errors=body.get("reward_errors", 0),
        judged_with=body.get("judged_with", {}),
        greedy_correct=[r["greedy_correct"] for r in rows] if all("greedy_correct" in r for r in rows) else [],
        samples=[
            {k: v for k, v in r.items() if k not in ("n", "correct", "greedy_correct")}
            for r in rows
            if "completions" in r
        ],
    )


def sample_lines(report: EvalReport) -> list[dict]:
    """One line per problem: id, n, correct (the counts pass@k came from), greedy_correct (0/1) where measured,
    and, where the report kept them, the prompt, reference, greedy completion and sampled completions with reward
    and truncation."""
    kept = {row["id"]: row for row in report.samples}
    greedy = report.greedy_correct if len(report.greedy_correct) == len(report.problem_ids) else None
    return [
        {"id": pid, "n": report.samples_per_problem, "correct": c,
         **({"greedy_correct": greedy[i]} if greedy is not None else {}), **kept.get(pid, {})}
        for i, (pid, c) in enumerate(zip(report.problem_ids, report.correct_counts))
    ]  # fmt: skip
