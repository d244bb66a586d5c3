"""The SFT warm start's settings (the `sft` section of the pipeline config)."""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from essaflow.config_base import StrictConfig


class SFTConfig(StrictConfig):
    """LoRA supervised warm start (ESSA-v3 sec. 3.2 'Initialization')."""

    enabled: bool = True
    """Run the SFT step. false (or steps 0): RL starts from the checkpoint itself, as F-GRPO does (FGRPO-v2 App. L):
    the start is a fresh, untrained LoRA adapter (peft's init: B = 0, so base + adapter is the base, bit for bit),
    which F-GRPO with grpo.parameters=full merges into the base and trains whole, and with lora trains from there.
    ESSA refuses it: it searches the singular values of a trained adapter, and B = 0 has none (docs/algorithms.md)."""
    steps: int = Field(500, ge=0)
    """Optimizer steps (0: no SFT step, as enabled: false)."""
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

    @property
    def trains(self) -> bool:
        """Whether a warm start is trained at all (enabled, with at least one step)."""
        return self.enabled and self.steps > 0
