"""What one GRPO worker trains with: the policy as the ranks hold it (DDP replica or FSDP2 shard, `sharding.py`),
AdamW and its LR schedule, the frozen reference, the byte counters and, with sampling.backend=vllm, the rank's
engine. `Learner.build` makes them from the config; the step (`step.py`), the loop (`loop.py`) and the checkpoints
(`checkpoint.py`) use them.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist

from essaflow.config import PipelineConfig
from essaflow.generation.sampling import resolve_backend
from essaflow.grpo.config import resolved_sharding
from essaflow.grpo.engine import PolicyEngine
from essaflow.grpo.sharding import DataParallel, wrap
from essaflow.grpo.worker_group import CommCounter, WorkerInfo
from essaflow.judging.judge import Judge, JudgeSpec, judge_spec
from essaflow.model.loading import load_adapter, load_base_model, load_tokenizer, resolve_model_path


def build_policy(cfg: PipelineConfig, start: Path, resume: Path | None, device: torch.device) -> torch.nn.Module:
    """The trainable policy: SFT LoRA adapter (trainable) on the base, or the merged SFT model (all weights)."""
    if cfg.grpo.parameters == "lora":
        # an fsdp checkpoint holds no adapter directory: its shards load over the start's weights (restore)
        source = resume / "adapter" if resume and (resume / "adapter").is_dir() else start
        model = load_adapter(load_base_model(cfg.model), source, trainable=True)
    elif resume is not None and (resume / "model").is_dir():  # fsdp shards load into the start's weights
        from transformers import AutoModelForCausalLM

        model = AutoModelForCausalLM.from_pretrained(resume / "model", dtype=getattr(torch, cfg.model.dtype))
    else:
        model = load_adapter(load_base_model(cfg.model), start).merge_and_unload()
        for p in model.parameters():
            p.requires_grad_(True)
    model.eval()  # no dropout in RL: on-policy ratios are exactly 1
    return model.to(device)


def make_optimizer(cfg: PipelineConfig, params: list[torch.nn.Parameter]):
    """AdamW and the per-rollout-step LR schedule: linear warm-up over grpo.warmup_steps, then constant."""
    g = cfg.grpo
    optimizer = torch.optim.AdamW(params, lr=g.lr, betas=(0.9, 0.999), weight_decay=g.weight_decay)
    warm = g.warmup_steps
    scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, lambda s: min(1.0, (s + 1) / warm) if warm else 1.0)
    return optimizer, scheduler


@dataclass
class Learner:
    """What one worker trains with: the policy (as the ranks hold it), optimiser, reference model, counters."""

    cfg: PipelineConfig
    info: WorkerInfo
    tokenizer: Any
    model: torch.nn.Module
    dp: DataParallel
    params: list[torch.nn.Parameter]
    optimizer: torch.optim.Optimizer
    scheduler: Any
    ref_model: torch.nn.Module | None
    comm: CommCounter
    engine: PolicyEngine | None = None
    """The rank's vLLM engine (sampling.backend=vllm, grpo/engine.py); None: rollouts on the model's generate."""
    judge: Judge | None = None
    """The run's reward under its threshold and error policy (essaflow.judging.judge)."""

    @classmethod
    def build(
        cls, cfg: PipelineConfig, start: Path, resume: Path | None, info: WorkerInfo, judge: JudgeSpec | None = None
    ) -> Learner:
        model = build_policy(cfg, start, resume, info.device)
        ref_model = None
        if cfg.grpo.kl_beta > 0:  # the reference is the SFT start, also after a resume
            ref_model = build_policy(cfg, start, None, info.device).requires_grad_(False)
        comm, dtype = CommCounter(), getattr(torch, cfg.model.dtype)
        dp = wrap(model, resolved_sharding(cfg.grpo), info, comm, dtype, cfg.grpo.activation_checkpointing)
        params = [p for p in model.parameters() if p.requires_grad]  # fsdp: this rank's float32 shards
        optimizer, scheduler = make_optimizer(cfg, params)
        tok = load_tokenizer(cfg.model)
        engine = None
        if resolve_backend(cfg.sampling.backend) == "vllm":
            path = resolve_model_path(cfg.model.name_or_path, cfg.model.dtype)
            m = cfg.model
            engine = PolicyEngine(path, m.dtype, cfg.sampling.vllm, cfg.grpo.parameters, m.lora_rank)
            with dp.gathered():
                engine.sync(model)  # the start (or the resumed weights) before the first rollout
        judged = (judge or judge_spec(cfg.eval)).build()
        return cls(cfg, info, tok, model, dp, params, optimizer, scheduler, ref_model, comm, engine, judged)

    @property
    def trainable_bytes(self) -> int:
        """Bytes of the trainable parameters (what one all-reduce of the gradients carries)."""
        return sum(p.numel() * p.element_size() for p in self.params)

    @property
    def shared_prompt(self) -> bool:
        """Whether the policy's log-prob forwards compute each group's prompt once (grpo.shared_prompt): not under
        activation checkpointing, whose recomputed layers would append to the prompt's cache a second time."""
        g = self.cfg.grpo
        return g.shared_prompt and not g.activation_checkpointing

    @property
    def max_new_tokens(self) -> int:
        return self.cfg.grpo.max_new_tokens or self.cfg.sampling.max_new_tokens

    def barrier(self) -> None:
        """Wait for every rank (a no-op on one worker)."""
        if self.info.world_size > 1:
            dist.barrier()
