"""LoRA supervised warm start: prompt -> target, loss on target tokens only (ESSA-v3 sec. 3.2 'Initialization').

The target is the worked solution when the source has one (sft.target=solution: GSM8K's answer text ending in
'#### 72', MATH's solution with its \\boxed{}), else the reference answer. Prompts are rendered by
`prompt_format` exactly as generation renders them, and the target closes the assistant's turn the way the chat
template does (e.g. with <|im_end|>), so the adapter learns to stop where generation stops.
"""

from __future__ import annotations

import logging
import random
import time
from collections.abc import Callable
from dataclasses import dataclass

import torch
from peft import PeftModel
from transformers import PreTrainedTokenizerBase

from essaflow.data.errors import DataError
from essaflow.data.schema import Problem
from essaflow.generation.prompt_format import PromptFormat, prompt_ids, target_ids
from essaflow.generation.sampling import model_stop_ids
from essaflow.training.config import SFTConfig

log = logging.getLogger(__name__)


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
    fmt: PromptFormat | None = None,
) -> SFTResult:
    """Train only the LoRA parameters with AdamW on shuffled minibatches of the SFT split.

    fmt: how prompts are rendered (data.prompt_format()); None = the defaults (the tokenizer's chat template
    when it has one, no system prompt)."""
    if not problems:
        raise DataError("SFT split is empty: raise data.sft_fraction or supply more problems")
    fmt = fmt or PromptFormat()
    stop = model_stop_ids(model, tokenizer)
    with_solution = sum(p.solution is not None for p in problems)
    if cfg.target == "solution" and with_solution < len(problems):
        log.info("SFT target: %d of %d problems have a worked solution; the rest train on their answer",
                 with_solution, len(problems))  # fmt: skip
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
        inputs = sft_batch(tokenizer, batch, cfg.target, fmt, stop)
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


def sft_target(problem: Problem, target: str) -> str:
    """The text SFT teaches for `problem`: its solution (sft.target=solution, when it has one) or its answer."""
    return problem.solution if target == "solution" and problem.solution else problem.answer


def sft_batch(
    tokenizer: PreTrainedTokenizerBase, problems: list[Problem], target: str, fmt: PromptFormat, stop: list[int]
) -> dict[str, torch.Tensor]:
    """Right-padded `prompt ids + target ids` with labels only on the target (-100 on prompt and padding).

    Prompt ids come from `prompt_format.prompt_ids` (the ids generation feeds), target ids from
    `prompt_format.target_ids` (the answer and the turn's end: <|im_end|> under a chat template, else EOS).
    """
    prompts = [p.prompt for p in problems]
    heads = prompt_ids(tokenizer, prompts, fmt)
    tails = [target_ids(tokenizer, p.prompt, sft_target(p, target), fmt, stop) for p in problems]
    width = max(len(h) + len(t) for h, t in zip(heads, tails))
    ids = torch.full((len(problems), width), tokenizer.pad_token_id, dtype=torch.long)
    labels = torch.full((len(problems), width), -100, dtype=torch.long)
    mask = torch.zeros((len(problems), width), dtype=torch.long)
    for i, (h, t) in enumerate(zip(heads, tails)):
        ids[i, : len(h) + len(t)] = torch.tensor(h + t)
        labels[i, len(h) : len(h) + len(t)] = torch.tensor(t)
        mask[i, : len(h) + len(t)] = 1
    return {"input_ids": ids, "attention_mask": mask, "labels": labels}
