"""LoRA supervised warm start: prompt -> answer, loss on answer tokens only (ESSA-v3 sec. 3.2 'Initialization')."""

from __future__ import annotations

import logging
import random
import time
from collections.abc import Callable
from dataclasses import dataclass

import torch
from peft import PeftModel
from pydantic import Field
from transformers import PreTrainedTokenizerBase

from essaflow.config_base import StrictConfig
from essaflow.data.schema import Problem
from essaflow.tiny_model import answer_only_batch

log = logging.getLogger(__name__)


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


@dataclass
class SFTResult:
    steps: int
    final_loss: float
    wall_s: float
    losses: list[float]


def train_sft(
    model: PeftModel,
    tokenizer: PreTrainedTokenizerBase,
    problems: list[Problem],
    cfg: SFTConfig,
    on_step: Callable[[int, float], None] | None = None,
) -> SFTResult:
    """Train only the LoRA parameters with AdamW on shuffled minibatches of the SFT split."""
    if not problems:
        raise ValueError("SFT split is empty: raise data.sft_fraction or supply more problems")
    torch.manual_seed(cfg.seed)
    rng = random.Random(cfg.seed)
    params = [p for p in model.parameters() if p.requires_grad]
    device = params[0].device
    opt = torch.optim.AdamW(params, lr=cfg.lr, weight_decay=cfg.weight_decay)
    model.train()
    losses: list[float] = []
    start = time.perf_counter()
    order: list[Problem] = []
    for step in range(cfg.steps):
        if len(order) < cfg.batch_size:
            order = problems[:]
            rng.shuffle(order)
        batch, order = order[: cfg.batch_size], order[cfg.batch_size :]
        inputs = answer_only_batch(tokenizer, [p.prompt for p in batch], [p.answer for p in batch])
        loss = model(**{k: v.to(device) for k, v in inputs.items()}).loss
        opt.zero_grad()
        loss.backward()
        torch.nn.utils.clip_grad_norm_(params, 1.0)
        opt.step()
        losses.append(loss.item())
        if on_step is not None:
            on_step(step, losses[-1])
    model.eval()
    wall = time.perf_counter() - start
    log.info("SFT %d steps in %.1fs, final loss %.3f", cfg.steps, wall, losses[-1])
    return SFTResult(steps=cfg.steps, final_loss=losses[-1], wall_s=round(wall, 2), losses=losses)
