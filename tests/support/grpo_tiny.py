"""A throwaway random tiny Llama, a LoRA start adapter with non-zero B, and a reward it can earn by chance.

Used by the GRPO trainer tests so they run in seconds without the calibrated `builtin:tiny` model.
"""

from __future__ import annotations

from pathlib import Path

import torch

from essaflow.config import PipelineConfig, load_config
from essaflow.data import Splits
from essaflow.data.prepare import prepare_splits
from essaflow.judging.rewards import REWARDS, register_reward
from essaflow.model.loading import attach_lora, load_base_model, save_adapter
from tests.support.essa_tiny import random_base

if "test_low_digit" not in REWARDS:

    @register_reward("test_low_digit")
    def _low_digit(completion: str, reference: str) -> float:
        """1 when the completion starts with a digit 0-4: a random model earns it about a third of the time."""
        del reference
        return 1.0 if completion[:1] in "01234" and completion[:1] != "" else 0.0


def make_tiny(root: Path, overrides: list[str] | None = None) -> tuple[PipelineConfig, Splits, Path]:
    """(config, splits, start adapter) for a 2-layer, 32-wide random Llama saved under root."""
    base = random_base(root)
    cfg = load_config(
        None,
        [
            f"model.name_or_path={base}",
            "model.lora_rank=4",
            "data.synthetic.num_problems=200",
            "data.eval_size=16",
            "sampling.max_new_tokens=4",
            "eval.reward=test_low_digit",
            "grpo.group_size=4",
            "grpo.prompts_per_step=8",
            "grpo.steps=2",
            "grpo.lr=0.01",
            "grpo.eval_every=0",
            "grpo.checkpoint_every=0",
            "grpo.gamma=0.5",
        ]
        + list(overrides or []),
    )
    start = root / "start"
    if not (start / "adapter_config.json").exists():
        model = attach_lora(load_base_model(cfg.model), cfg.model, seed=0)
        with torch.no_grad():  # a trained-looking adapter: B != 0, so A gets gradient too
            for name, p in model.named_parameters():
                if "lora_B" in name:
                    p.normal_(0.0, 0.1)
        save_adapter(model, start)
    return cfg, prepare_splits(cfg.data), start
