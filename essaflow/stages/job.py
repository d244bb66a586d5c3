"""`essaflow essa` / `essaflow grpo`: SFT warm start (cached) -> evaluate -> train -> evaluate, as one JSON dict.

The training is `essaflow.training.run.train_method`, exactly what the pipeline's train task runs (checkpoints in
the store at `cfg.storage_uri`, under runs/<job id>/). "before" is the SFT start (ESSA-v3 sec. 4: both methods start
from the same SFT checkpoint; SFT time is excluded from training time), "after" the trained policy (a LoRA adapter,
or a full checkpoint for grpo.parameters=full), both with the same pass@k protocol and sampling seed: a paired
comparison. Progress goes to stderr; the CLI prints the returned dict as the last stdout line.
"""

from __future__ import annotations

import hashlib
import shutil
import sys
import tempfile
import time
from typing import Any

from essaflow.checks.preflight import require_reachable
from essaflow.config import PipelineConfig
from essaflow.data.prepare import prepare_data
from essaflow.generation.sampling import resolve_backend
from essaflow.judging.evaluation import EvalReport
from essaflow.judging.model_eval import evaluate_output
from essaflow.model.loading import token_cap_tokenizer
from essaflow.runs.method_tags import method_label, method_tags
from essaflow.stages.training import planned_steps
from essaflow.storage import open_store
from essaflow.storage.cache_dir import cache_root
from essaflow.trainer_io import TrainCallbacks
from essaflow.training.run import RunStorage, train_method
from essaflow.training.warm_start import sft_start

HEADLINE = ("greedy", "pass@1", "pass@8")


def _progress(msg: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {msg}", file=sys.stderr, flush=True)


def _headline(report: EvalReport) -> dict[str, float | None]:
    summary = report.summary()
    return {k: round(summary[k], 4) for k in HEADLINE if k in summary}


def _progress_line(cfg: PipelineConfig, row: dict[str, Any]) -> str | None:
    """A log line for some metric rows: every held-out evaluation, and about 20 lines per run."""
    total = planned_steps(cfg)
    done = int(row.get("step", row.get("generation", 0)))
    if "eval_greedy" not in row and done % max(1, total // 20) and done != total:
        return None
    if cfg.method == "essa" and "fitness_mean" in row:
        line = (
            f"fitness {row['fitness_mean']:.3f}/{row['fitness_max']:.3f} ties {row['tie_share']:.2f} "
            f"sigma {row['sigma']:.3g}"
        )
    elif "reward_mean" in row:
        line = (
            f"reward {row['reward_mean']:.3f} zero-var {row['zero_variance_share']:.2f} "
            f"focal {row['focal_mean_active']:.2f} {row['step_s']:.2f}s/step"
        )
    else:
        line = ""
    held_out = f" held-out greedy {row['eval_greedy']:.3f}" if "eval_greedy" in row else ""
    return f"{cfg.method} {done}/{total}: {line}{held_out}"


def run_training_job(cfg: PipelineConfig) -> dict[str, Any]:
    """The whole job on cfg (cfg.method essa or fgrpo); returns the JSON-able summary the CLI prints last."""
    start, label = time.perf_counter(), method_label(cfg.method, cfg.essa, cfg.grpo)
    require_reachable(cfg)  # a Ray head that is not there, a hub id that resolves nowhere: before any compute
    prepared = prepare_data(cfg.data, cfg.eval.data, token_cap_tokenizer(cfg.model, cfg.data))
    filtered, splits = prepared.filtered, prepared.splits
    _progress(f"{label}: {len(splits.train)} train / {len(splits.eval)} eval problems")
    fmt = cfg.data.prompt_format()
    sft = sft_start(cfg.adapter_uri, cfg.model, cfg.sft, splits, fmt)
    before = evaluate_output(cfg.model, sft, "lora", splits.eval, cfg.eval, cfg.sampling, fmt)
    _progress(f"before (SFT start {sft}): {_headline(before)}")

    def on_metrics(row: dict[str, Any]) -> None:
        if (line := _progress_line(cfg, row)) is not None:
            _progress(line)

    digest = hashlib.sha256(cfg.model_dump_json().encode()).hexdigest()[:8]
    job_id = f"{cfg.method}-{time.strftime('%Y%m%d-%H%M%S')}-{digest}"
    storage = RunStorage(open_store(cfg.storage_uri), f"runs/{job_id}")
    (cache_root() / "work").mkdir(parents=True, exist_ok=True)
    work = tempfile.mkdtemp(prefix=f"{job_id}-", dir=cache_root() / "work")
    try:
        trained = train_method(cfg, splits, sft, storage, work, TrainCallbacks(on_metrics))
        result = trained.result
        after = evaluate_output(
            cfg.model, result.output_dir, result.output_kind, splits.eval, cfg.eval, cfg.sampling, fmt
        )
    finally:
        shutil.rmtree(work, ignore_errors=True)
    _progress(f"after ({label}): {_headline(after)}")
    evals = [m for m in result.metrics if "eval_greedy" in m]
    return {
        "method": label,
        "engine": resolve_backend(cfg.sampling.backend),  # what generated: evaluation, ESSA scoring, GRPO rollouts
        "judged_with": cfg.eval.judged_with(),  # the reward (a name or your function), its digest, the threshold
        **method_tags(cfg.method, cfg.essa, cfg.grpo),
        "before": _headline(before),
        "after": _headline(after),
        "before_pass_at_k": before.pass_at_k,
        "after_pass_at_k": after.pass_at_k,
        # shares of completions that hit the length cap (warned above 10%)
        "truncated_share": {
            "before": before.truncated_share,
            "after": after.truncated_share,
            "rollouts": result.truncated_share,
        },  # fmt: skip
        "data_filtered": filtered,  # problems each data filter dropped (data.max_prompt_tokens, ...)
        "steps": result.steps,
        "train_wall_s": result.wall_s,
        "bytes_per_update": round(result.bytes_per_update),
        "training": {"sharding": result.sharding, "memory_per_rank": result.memory_per_rank},
        "usage": result.usage.as_row(),  # tokens and device-seconds of this call's training (essaflow/usage.py)
        "held_out_curve": [[m.get("generation", m.get("step")), round(m["eval_greedy"], 4)] for m in evals],
        "resumed_from": result.resumed_from,
        "output": trained.uri,
        "output_kind": result.output_kind,
        "job_wall_s": round(time.perf_counter() - start, 2),
    }
