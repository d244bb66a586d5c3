"""Held-out greedy gains of a short training run per seed, from the preset's shipped SFT start
(tests/support/shipped_starts.py): the measurement the task learning tests (tests/learning) assert on."""

from __future__ import annotations

from pathlib import Path
from statistics import mean

from essaflow.config import load_config
from essaflow.data.prepare import prepare_splits
from essaflow.essa.loop import train_essa
from essaflow.grpo.loop import train_grpo
from essaflow.judging.model_eval import evaluate_adapter
from essaflow.runs.method_tags import method_label
from tests.support.shipped_starts import shipped_start

CONFIGS = Path(__file__).resolve().parents[2] / "configs"
SEEDS = (0, 1, 2)


def greedy_gains(preset: str, overrides: list[str], out: Path) -> list[float]:
    """Held-out greedy accuracy after minus before training, one per seed; prints before/after per seed."""
    cfg = load_config(CONFIGS / preset, overrides)
    splits, fmt = prepare_splits(cfg.data), cfg.data.prompt_format()
    start = shipped_start(preset, cfg, splits, out)
    greedy_only = cfg.eval.model_copy(update={"samples_per_problem": 1, "ks": [1]})
    before = evaluate_adapter(cfg.model, start, splits.eval, greedy_only, cfg.sampling, fmt).greedy
    label, gains = method_label(cfg.method, cfg.essa, cfg.grpo), []
    train, section = (train_essa, "essa") if cfg.method == "essa" else (train_grpo, "grpo")
    for seed in SEEDS:
        seeded = load_config(CONFIGS / preset, [*overrides, f"{section}.seed={seed}"])
        result = train(seeded, splits, start, out / f"seed{seed}")
        policy = result.output_dir
        after = evaluate_adapter(cfg.model, policy, splits.eval, greedy_only, cfg.sampling, fmt).greedy
        print(f"{label}, seed {seed}: held-out greedy {before:.4f} -> {after:.4f}")
        gains.append(after - before)
    print(f"{label}, greedy gains over seeds {SEEDS}: {[round(g, 4) for g in gains]}, mean {mean(gains):+.4f}")
    return gains
