"""F-GRPO's settings: the GRPO family's loss, advantage and focal weight, rollouts, optimiser, Ray Train ranks.

Fields made with `trajectory(...)` decide what training computes; a checkpoint resumes only under the same values.
Worker count is not one of them: the step gives the same gradients on 1 or N ranks (`step.py`, `batch_split.py`).
"""

from __future__ import annotations

from typing import Any, ClassVar, Literal

from pydantic import Field, field_validator, model_validator

from essaflow.cluster.config import GRPOWorkersConfig
from essaflow.cluster.request import TrainingRequest
from essaflow.config_base import StrictConfig, gone_keys, trajectory

#: keys this section no longer takes, each with what replaces it (a config still writing one is refused)
GONE = {
    "ray_for_single_worker": "grpo.workers.ray (true: one rank on Ray Train too)",
    "workers": "grpo.workers.count",
    "worker_cpus": "grpo.workers.cpus",
    "placement_strategy": "grpo.workers.placement_strategy",
    "max_failures": "grpo.workers.max_restarts",
}


#: the names losses.py and advantages.py register (tests/unit/registry/test_registry.py holds the two lists equal):
#: a config naming a built-in is checked without importing those modules, which need torch
BUILTIN_LOSSES = ("grpo", "dapo", "cispo")
BUILTIN_ADVANTAGES = ("grpo", "drgrpo")


class GRPOConfig(StrictConfig):
    """GRPO family with F-GRPO's focal weight (FGRPO-v2 sec. 4, App. L)."""

    METHOD: ClassVar[str] = "fgrpo"
    """The pipeline's `method:` that trains with this section (essaflow/methods/fgrpo.py)."""

    loss: str = trajectory("grpo")
    """Policy loss by name (essaflow.grpo.losses registry): grpo, dapo, cispo (FGRPO-v2 App. B)."""
    advantage: str = trajectory("grpo")
    """Advantage estimator by name (essaflow.grpo.advantages registry): grpo, or drgrpo (no std division)."""
    gamma: float = trajectory(1.0, ge=0.0)
    """Focal exponent: advantages scaled by (1 - success_rate)^gamma (FGRPO-v2 Eq. 12-13); 0 = the base method."""
    group_size: int = trajectory(8, ge=2)
    """N: rollouts per prompt (F-GRPO main results: 8)."""
    prompts_per_step: int = trajectory(32, ge=1)
    """Prompt groups per rollout step, over all workers; must divide evenly by workers * mini_batches."""
    steps: int = Field(200, ge=1)
    """Rollout steps (each makes mini_batches optimizer steps)."""
    mini_batches: int = trajectory(1, ge=1)
    """Optimizer steps per rollout step, 1 PPO epoch (F-GRPO: 256/64 = 4); 1 = one on-policy step."""
    micro_batch_size: int = Field(0, ge=0)
    """Sequences per forward/backward on a worker, gradients accumulated (0 = the worker's whole mini-batch)."""
    lr: float = trajectory(3e-4, gt=0)
    """AdamW learning rate (F-GRPO: 1e-6 full-parameter; LoRA on the tiny model wants ~3e-4)."""
    warmup_steps: int = trajectory(0, ge=0)
    """Linear warm-up, in rollout steps, then constant (F-GRPO: 15)."""
    weight_decay: float = trajectory(0.01, ge=0)
    """AdamW weight decay (F-GRPO: 0.01)."""
    grad_clip: float = trajectory(1.0, gt=0)
    """Max global gradient norm (F-GRPO: 1.0)."""
    clip_eps_low: float | None = trajectory(None, ge=0)
    """Lower ratio clip eps; None = the loss's default (grpo 0.2, dapo 0.2, cispo 1.0 so the IS weight floor is 0)."""
    clip_eps_high: float | None = trajectory(None, ge=0)
    """Upper ratio clip eps; None = the loss's default (grpo 0.2, dapo 0.28 clip-higher, cispo 5.0: cap 6)."""
    kl_beta: float = trajectory(0.0, ge=0)
    """k3 KL coefficient to the frozen SFT start (DeepSeekMath 0.04; F-GRPO 0). >0 keeps a reference copy."""
    std_mode: Literal["population", "bessel", "none"] = trajectory("bessel")
    """Std in the group advantage: population (/N), bessel (/N-1, verl's default) or none
    (docs/algorithms.md sec. 7.1)."""
    adv_eps: float = trajectory(1e-6, ge=0)
    """eps in (R - mean) / (std + eps) (docs/algorithms.md sec. 7.1; verl's 1e-6)."""
    aggregation: Literal["token_mean", "seq_mean", "token_sum_norm"] = trajectory("token_mean")
    """token_mean (DAPO, F-GRPO App. L.2), seq_mean (DeepSeekMath), token_sum_norm (Dr.GRPO constant normaliser)."""
    dynamic_sampling: bool = trajectory(False)
    """DAPO dynamic sampling: retry zero-variance groups with other prompts (off: F-GRPO does not mention it)."""
    dynamic_sampling_rounds: int = trajectory(3, ge=1)
    """Retry rounds per step when dynamic_sampling is on; groups still uniform keep zero advantage."""
    overlong_buffer: int = trajectory(0, ge=0)
    """DAPO soft overlong punishment: last this many tokens before max_new_tokens ramp to -1 (0 = off)."""
    overlong_penalty: float = trajectory(1.0, ge=0)
    """Scale of the overlong punishment added to the reward (success rate still uses the unshaped reward)."""
    overlong_filter: bool = trajectory(False)
    """DAPO overlong filtering: truncated completions (no EOS) carry no loss."""
    temperature: float = trajectory(1.0, gt=0)
    """Rollout temperature (F-GRPO: 1.0)."""
    top_p: float = trajectory(1.0, gt=0.0, le=1.0)
    """Rollout nucleus mass (F-GRPO: 1.0)."""
    max_new_tokens: int | None = trajectory(None, ge=1)
    """Rollout completion cap; None = sampling.max_new_tokens."""
    parameters: Literal["lora", "full"] = trajectory("lora")
    """Train the LoRA adapter (from the SFT start) or all weights of the merged SFT model (F-GRPO: full)."""
    sharding: Literal["auto", "ddp", "fsdp"] = "auto"
    """How ranks hold the weights: ddp (each rank a full replica) or fsdp (FSDP2: parameters, gradients and
    optimizer state sharded over the ranks, float32 masters). auto = fsdp for parameters=full on 2 or more ranks,
    else ddp (`resolved_sharding`): LoRA stays on ddp unless fsdp is asked for, which shards the frozen base too (in
    model.dtype; the factors are the float32 masters). The loss is the same either way (docs/algorithms.md)."""
    shared_prompt: bool = True
    """Compute each group's prompt once: the rollout prefills it once and decodes its G completions from the shared
    KV cache (transformers engine; vLLM rollouts compute every prompt, reading no prefix cache: docs/engines.md), and
    the policy's log-prob forward (the reference's, the old policy's) runs it once, the G completions attending to
    its cache copied G times. The same samples and log-probs up to float rounding, so the same gradients within
    float tolerance; off: every sample carries its own copy of the prompt (the per-row path). With
    activation_checkpointing the policy's gradient forward stays per row (a recomputed layer would append to the
    cache a second time)."""
    activation_checkpointing: bool = False
    """Recompute each decoder layer's activations in backward instead of storing them (less memory, about one
    more forward of compute); the same gradients either way."""
    device: Literal["auto", "cpu", "cuda"] = "auto"
    """Where ranks compute: auto = on Ray, one whole GPU per rank (NCCL) when the cluster has GPUs, else CPU (gloo);
    in process, cuda when visible."""
    workers: GRPOWorkersConfig = GRPOWorkersConfig()
    """The Ray Train DDP ranks: count (groups are split across them; 1 -> N is this field only), CPUs each,
    placement, group restarts. GPUs follow `device`."""
    eval_every: int = Field(50, ge=0)
    """Held-out greedy accuracy every this many steps (0 = never)."""
    time_budget_s: float | None = Field(None, gt=0)
    """Stop at the first step boundary once the steps' wall time (held-out checks left out; the mean over ranks, so
    every rank stops at the same step) reaches this many seconds; `steps` stays the cap. The compare flow gives
    every method the same budget (docs/compare.md). None: run all steps."""
    checkpoint_every: int = Field(50, ge=0)
    """Checkpoint every N steps (0 = only at the end)."""
    seed: int = trajectory(0)
    """Seed of rollouts and prompt order."""

    @model_validator(mode="before")
    @classmethod
    def _no_gone_keys(cls, data: Any) -> Any:
        problem = gone_keys(data, GONE)
        if problem:
            raise ValueError(problem)
        return data

    @property
    def on_ray(self) -> bool:
        """Whether the ranks run on Ray Train (workers.ray true, or unset with 2 or more ranks), else one rank in this
        process (the same loop, world size 1)."""
        return self.workers.ray if self.workers.ray is not None else self.workers.count > 1

    def cluster_request(self) -> TrainingRequest | None:
        """The Ray Train ranks this config trains on (None: one worker in process): one whole GPU each with
        device=cuda, none with device=cpu; device=auto leaves it to the cluster (a GPU each where it has GPUs)."""
        if not self.on_ray:
            return None
        gpus = {"cuda": 1.0, "cpu": 0.0}.get(self.device)
        w = self.workers
        return TrainingRequest(w.count, w.cpus, gpus, w.placement_strategy)

    def pipeline_problem(self, sft_trains: bool, adapter_uri: str | None) -> str | None:
        """What F-GRPO asks of the rest of the pipeline: nothing (it trains from an untrained adapter too)."""
        return None

    @field_validator("loss")
    @classmethod
    def _known_loss(cls, v: str) -> str:
        if v in BUILTIN_LOSSES:
            return v
        from essaflow.grpo.losses import LOSSES  # a plug-in's name: the registry (and torch) is needed to check it

        return LOSSES.check(v)

    @field_validator("advantage")
    @classmethod
    def _known_advantage(cls, v: str) -> str:
        if v in BUILTIN_ADVANTAGES:
            return v
        from essaflow.grpo.advantages import ADVANTAGES

        return ADVANTAGES.check(v)

    @model_validator(mode="after")
    def _batch_splits_evenly(self) -> GRPOConfig:
        share = self.workers.count * self.mini_batches
        if self.prompts_per_step % share:
            raise ValueError(
                f"prompts_per_step={self.prompts_per_step} must be a multiple of workers.count * mini_batches = {share}"
            )
        if self.workers.ray is False and self.workers.count > 1:
            raise ValueError(f"workers.ray=false trains in this process, which holds one rank, not workers.count="
                             f"{self.workers.count}: set workers.count=1, or leave workers.ray unset for ranks on Ray "
                             "Train")  # fmt: skip
        if self.workers.gpus is not None:
            raise ValueError("workers.gpus: F-GRPO ranks take one whole GPU each when grpo.device resolves to cuda")
        return self


def resolved_sharding(grpo: GRPOConfig) -> Literal["ddp", "fsdp"]:
    """`grpo.sharding` with auto resolved: FSDP only pays when full parameters are spread over 2 or more ranks."""
    if grpo.sharding != "auto":
        return grpo.sharding
    return "fsdp" if grpo.parameters == "full" and grpo.workers.count >= 2 else "ddp"
