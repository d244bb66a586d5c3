"""Held-out greedy gains of a short training run per seed, from the preset's shipped SFT start
(tests/support/shipped_starts.py): the measurement the task learning tests (tests/learning) assert on."""

from __future__ import annotations

from pathlib import Path
from statistics import mean

from essaflow.config import load_config
from essaflow.data.prepare import prepare_splits
from essaflow.judging.model_eval import evaluate_adapter
from essaflow.methods import method_of
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
    method, gains = method_of(cfg), []
    label, train, section = method.label(cfg), method.trainer(), method.section
    for seed in SEEDS:
        seeded = load_config(CONFIGS / preset, [*overrides, f"{section}.seed={seed}"])
        result = train(seeded, splits, start, out / f"seed{seed}")
        policy = result.output_dir
        after = evaluate_adapter(cfg.model, policy, splits.eval, greedy_only, cfg.sampling, fmt).greedy
        print(f"{label}, seed {seed}: held-out greedy {before:.4f} -> {after:.4f}")
        gains.append(after - before)
    print(f"{label}, greedy gains over seeds {SEEDS}: {[round(g, 4) for g in gains]}, mean {mean(gains):+.4f}")
    return gains
