"""The SFT warm start's settings (the `sft` section of the pipeline config)."""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from essaflow.config_base import StrictConfig


class SFTConfig(StrictConfig):
    """LoRA supervised warm start (ESSA-v3 sec. 3.2 'Initialization')."""

    steps: int = Field(500, ge=1)
    """Optimizer steps."""
    batch_size: int = Field(64, ge=1)
    """Problems per step."""
    lr: float = Field(3e-3, gt=0)
    """AdamW learning rate."""
    weight_decay: float = Field(0.0, ge=0)
    """AdamW weight decay."""
    seed: int = 0
    """Seed for LoRA init and batch order."""
    target: Literal["solution", "answer"] = "solution"
    """What SFT trains on: the source's worked solution where a problem has one (else its answer), or the bare
    reference answer. Either way the reward judges only the final answer."""
