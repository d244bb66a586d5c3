"""`essaflow essa` / `essaflow grpo`: the pipeline's stages in this process, without an orchestrator: the dataset,
the SFT warm start, its pass@k, the training, the tuned pass@k (the same functions the flow's tasks call,
essaflow/stages/), and the JSON line with the flow's fields for those stages (essaflow/runs/line.py).

A job opens no lease, record or MLflow run (its run has no MLflow run: the stages log nothing there); its dataset,
SFT adapter, checkpoints, result and eval reports go to the store at `cfg.storage_uri`, under runs/<job id>/ for
its own. "sft_start" is where training starts (ESSA-v3 sec. 4: both methods start from the same SFT checkpoint; SFT
time is excluded from training time), "after" the trained policy (a LoRA adapter, or a full checkpoint for
grpo.parameters=full), both with the same pass@k protocol and sampling seed: a paired comparison. No base model is
scored (`essaflow run` scores it). Progress goes to stderr; the CLI prints the returned dict as the last stdout line.
"""

from __future__ import annotations

import hashlib
import sys
import time
from typing import Any

from essaflow.checks.preflight import require_reachable
from essaflow.config import PipelineConfig
from essaflow.generation.sampling import resolve_backend
from essaflow.methods import method_of
from essaflow.refs import AdapterRef, DatasetRef, EvalRef, Ref, RunRef
from essaflow.runs.line import json_line, overhead, stage_parts
from essaflow.stages.data import publish_run_data
from essaflow.stages.evaluation import evaluate_start, evaluate_tuned
from essaflow.stages.training import planned_steps, train_stage, warm_start_stage
from essaflow.storage import open_store

JOB_STAGES = ("prepare_dataset", "warm_start", "evaluate-sft_start", "train", "evaluate-tuned")
"""The flow's stages a job runs, in order (no run opened in MLflow, no base scored, nothing registered)."""

HEADLINE = ("greedy", "pass@1", "pass@8")


def _progress(msg: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {msg}", file=sys.stderr, flush=True)


def _headline(ref: EvalRef) -> dict[str, float]:
    return {k: round(ref.summary[k], 4) for k in HEADLINE if k in ref.summary}


def _progress_line(cfg: PipelineConfig, row: dict[str, Any]) -> str | None:
    """A log line for some metric rows: every held-out evaluation, and about 20 lines per run."""
    total = planned_steps(cfg)
    done = int(row.get("step", row.get("generation", 0)))
    if "eval_greedy" not in row and done % max(1, total // 20) and done != total:
        return None
    line = method_of(cfg).progress(row)
    held_out = f" held-out greedy {row['eval_greedy']:.3f}" if "eval_greedy" in row else ""
    return f"{cfg.method} {done}/{total}: {line}{held_out}"


def job_run(cfg: PipelineConfig) -> RunRef:
    """The job's run: a fresh id (method, time, config digest) in the store at cfg.storage_uri, with no MLflow run."""
    digest = hashlib.sha256(cfg.model_dump_json().encode()).hexdigest()[:8]
    job_id = f"{cfg.method}-{time.strftime('%Y%m%d-%H%M%S')}-{digest}"
    return RunRef(run_id=job_id, name=cfg.name, storage_uri=open_store(cfg.storage_uri).uri, tracking_uri="",
                  experiment_id="", mlflow_run_id="", started_at=time.time(), stage="open_job")  # fmt: skip


def run_training_job(cfg: PipelineConfig) -> dict[str, Any]:
    """The job's stages on cfg (cfg.method essa or fgrpo); returns the JSON line the CLI prints last."""
    t0, method = time.perf_counter(), method_of(cfg)
    label = method.label(cfg)
    require_reachable(cfg)  # a Ray head that is not there, a hub id that resolves nowhere: before any compute
    run = job_run(cfg)
    dataset = publish_run_data(cfg.data, run.storage_uri, cfg.eval.data, cfg.model)
    _progress(f"{label}: {dataset.sizes['train']} train / {dataset.sizes['eval']} eval problems")
    sft = warm_start_stage(cfg.data, cfg.model, cfg.sft, cfg.adapter_uri, dataset, run)
    start = evaluate_start(cfg.data, cfg.model, cfg.sampling, cfg.eval, dataset, sft, None, run)
    _progress(f"before (SFT start {sft.uri}): {_headline(start)}")

    def on_metrics(row: dict[str, Any]) -> None:
        if (line := _progress_line(cfg, row)) is not None:
            _progress(line)

    tuned = train_stage(cfg, dataset, sft, run, on_metrics)
    after = evaluate_tuned(cfg.data, cfg.model, cfg.sampling, cfg.eval, dataset, tuned, start, run)
    _progress(f"after ({label}): {_headline(after)}")
    return job_line(cfg, run, dataset, sft, start, tuned, after, time.perf_counter() - t0)


def job_line(
    cfg: PipelineConfig, run: RunRef, dataset: DatasetRef, sft: AdapterRef, start: EvalRef, tuned: AdapterRef,
    after: EvalRef, wall: float,
) -> dict[str, Any]:  # fmt: skip
    """The job's JSON line: the fields `essaflow run` prints for the stages the job ran, from the same references
    (each stage's wall time and parts as the stage timed them; `cached`: what was found in storage by content)."""
    refs: list[Ref] = [dataset, sft, start, tuned, after]
    cached = {ref.stage for ref in refs if ref.reused}
    parts = {k: round(v, 2) for k, v in stage_parts(refs, cached).items()}
    out = {
        "state": "completed", "run_id": run.run_id, "storage_uri": run.storage_uri,
        "engine": resolve_backend(cfg.sampling.backend),  # what generated: evaluation, ESSA scoring, GRPO rollouts
        "data_filtered": dataset.filtered, "sft_start": start.summary, "after": after.summary,
        "judged_with": after.judged_with,  # the reward (a name or your function), its digest, the threshold
        "training": {"kind": tuned.kind, **tuned.training.model_dump()},
        "stages": {ref.stage: ref.timings.get("total", 0.0) for ref in refs}, "cached": sorted(cached),
        "flow_s": round(time.time() - run.started_at, 2), "wall_s": round(wall, 2), "parts": parts,
        "overhead": overhead(parts, round(wall, 2)),
    }  # fmt: skip
    return json_line(out, JOB_STAGES)
