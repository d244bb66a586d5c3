"""`essaflow grpo`: SFT warm start (cached) -> held-out eval -> GRPO / F-GRPO -> held-out eval, as one JSON dict.

Progress goes to stderr; the CLI prints the returned dict as the last stdout line. The run directory holds
`adapter/` (the trained peft adapter) and `checkpoints/<step>/`; passing an existing run_dir resumes its training.
"""

from __future__ import annotations

import hashlib
import sys
import time
from pathlib import Path
from typing import Any

from essaflow.config import PipelineConfig
from essaflow.evaluation import EvalReport
from essaflow.grpo.trainer import train_grpo
from essaflow.models import load_model_with_adapter
from essaflow.tiny_model import cache_root
from essaflow.warm_start import cached_sft_adapter, evaluate_model, prepare_splits

HEADLINE = ("greedy", "pass@1", "pass@8")


def _progress(msg: str) -> None:
    print(f"[grpo] {msg}", file=sys.stderr, flush=True)


def method_label(cfg: PipelineConfig) -> str:
    """E.g. 'GRPO', 'F-GRPO(gamma=0.5)', 'F-DAPO(gamma=1.0)'."""
    base = cfg.grpo.loss.upper()
    return base if cfg.grpo.gamma == 0 else f"F-{base}(gamma={cfg.grpo.gamma:g})"


def default_run_dir(cfg: PipelineConfig) -> Path:
    """<file store root or cache>/runs/grpo-<time>-<config hash>: a fresh directory per call."""
    root = Path(cfg.storage_uri.removeprefix("file://")) if cfg.storage_uri.startswith("file://") else cache_root()
    digest = hashlib.sha256(cfg.model_dump_json().encode()).hexdigest()[:8]
    return root / "runs" / f"grpo-{time.strftime('%Y%m%d-%H%M%S')}-{digest}"


def evaluate_trained(cfg: PipelineConfig, path: Path, problems, label: str) -> EvalReport:
    """pass@k of a trained policy: a LoRA adapter on the base, or (parameters=full) a full checkpoint."""
    if cfg.grpo.parameters == "full":
        from transformers import AutoModelForCausalLM

        from essaflow.models import load_tokenizer

        model = AutoModelForCausalLM.from_pretrained(path).eval()
        tok = load_tokenizer(cfg.model)
    else:
        model, tok = load_model_with_adapter(cfg.model, path)
    t0 = time.perf_counter()
    report = evaluate_model(model, tok, problems, cfg.eval, cfg.sampling)
    _progress(
        f"eval {label}: greedy {report.greedy:.3f}  "
        + "  ".join(f"pass@{k} {v:.3f}" for k, v in report.pass_at_k.items())
        + f"  ({time.perf_counter() - t0:.1f}s)"
    )
    return report


def _headline(report: EvalReport) -> dict[str, float | None]:
    summary = report.summary()
    return {k: summary.get(k) for k in HEADLINE}


def run_grpo_job(cfg: PipelineConfig, run_dir: Path | None = None) -> dict[str, Any]:
    """Run the whole job on cfg; returns before/after headline metrics, full pass@k curves, timings, bytes."""
    start = time.perf_counter()
    label = method_label(cfg)
    splits = prepare_splits(cfg.data)
    _progress(f"{label}: {len(splits.train)} train / {len(splits.eval)} eval problems")
    t0 = time.perf_counter()
    sft = cached_sft_adapter(cfg, splits)
    _progress(f"SFT start {sft} ({time.perf_counter() - t0:.1f}s)")
    before = evaluate_trained(cfg.model_copy(update={"grpo": cfg.grpo.model_copy(update={"parameters": "lora"})}),
                              sft, splits.eval, "SFT start")  # fmt: skip
    run_dir = (Path(run_dir) if run_dir else default_run_dir(cfg)).resolve()
    g = cfg.grpo
    every = max(1, g.steps // 20)

    def on_metrics(m: dict[str, Any]) -> None:
        if m["step"] % every == 0 or m["step"] == g.steps or "eval_greedy" in m:
            extra = f"  held-out greedy {m['eval_greedy']:.3f}" if "eval_greedy" in m else ""
            _progress(
                f"step {m['step']}/{g.steps}  reward {m['reward_mean']:.3f}  zero-var {m['zero_variance_share']:.2f}"
                f"  focal {m['focal_mean_active']:.2f}  clip {m['clip_frac_low']:.3f}/{m['clip_frac_high']:.3f}"
                f"  kl {m['kl']:.4f}  H {m['entropy']:.3f}  {m['tokens_per_s']:.0f} tok/s  {m['step_s']:.2f}s/step"
                + extra
            )

    _progress(f"training {label} for {g.steps} steps on {g.workers} worker(s) -> {run_dir}")
    result = train_grpo(cfg, splits, sft, run_dir, run_dir / "checkpoints", on_metrics=on_metrics)
    after = evaluate_trained(cfg, result.adapter_dir, splits.eval, label)
    step_times = [m["step_s"] for m in result.metrics]
    return {
        "method": label,
        "before": _headline(before),
        "after": _headline(after),
        "before_pass_at_k": before.pass_at_k,
        "after_pass_at_k": after.pass_at_k,
        "wall_s": round(time.perf_counter() - start, 2),
        "train_wall_s": result.wall_s,
        "steps": result.steps,
        "step_s_mean": round(sum(step_times) / max(len(step_times), 1), 4),
        "bytes_per_step": result.bytes_per_update,
        "trainable_bytes": result.metrics[-1]["trainable_bytes"] if result.metrics else None,
        "workers": g.workers,
        "resumed_from": result.resumed_from,
        "run_dir": str(run_dir),
        "adapter_dir": str(result.adapter_dir),
    }
