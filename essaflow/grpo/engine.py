"""GRPO rollouts on vLLM: an engine beside each rank, the policy synced into it after the step's optimizer updates.

With `sampling.backend: vllm` each rank owns one engine (colocated, as verl and TRL's colocate mode run it):

- Sync (`sync`): after the step's optimizer updates (so before every rollout) the policy reaches the engine. LoRA
  (grpo.parameters=lora): only the adapter tensors, written as a fresh LoRA adapter (rank padded, scaling folded:
  `vllm_engine.write_lora_adapter`); full parameters: every weight loaded into the served model (vLLM maps the HF
  names onto its fused layers), an FSDP rank gathering each weight from the shards as the engine reads it. On a GPU
  a full-parameter engine (its own, unshared) sleeps while the rank trains (vLLM sleep mode: weights offloaded, KV
  cache dropped) and wakes for the sync.
- Sampling: one vLLM request per completion, seeded by the same (seed, step, slot, sample, round) hash that keys
  the transformers engine's Gumbel noise, so a completion does not depend on its batch or worker on either engine
  (the two engines draw different, equally distributed samples).
- The check (`gap`): vLLM reports the log-probability of every token it sampled; the trainer recomputes them in
  its own forward pass (the loss always uses the trainer's). Their mean absolute gap per token is reported each
  step (`engine_logprob_gap`), and above `sampling.vllm.sync_tolerance` the step fails with StaleEngineError: the
  engine sampled from weights the trainer does not hold (a sync that did not happen), which would otherwise pass
  silently as off-policy data.
"""

from __future__ import annotations

import torch

from essaflow.generation.config import VLLMConfig
from essaflow.generation.prompt_format import PromptFormat, prompt_ids
from essaflow.generation.sampling import Rollout, encode_prompts, model_stop_ids, to_rollout
from essaflow.generation.vllm_engine import VLLMEngine, served_lora_rank, shared_engine
from essaflow.grpo.sharding import whole


class StaleEngineError(RuntimeError):
    """The engine's log-probabilities of its own samples disagree with the trainer's: it serves other weights."""


class PolicyEngine:
    """One rank's vLLM engine and the policy's latest sync into it."""

    def __init__(self, model_dir: str, dtype: str, cfg: VLLMConfig, parameters: str, lora_rank: int):
        self.cfg = cfg
        self.parameters = parameters
        self.rank = served_lora_rank(lora_rank)
        # a full-parameter engine's weights are the policy's: never shared with evaluation or another user
        self.engine = (
            VLLMEngine(model_dir, dtype, cfg, sleep_mode=torch.cuda.is_available(), lora=False) if parameters == "full"
            else shared_engine(model_dir, dtype, cfg, lora_rank)
        )  # fmt: skip
        self.adapter = None
        self.syncs = 0

    def sync(self, model: torch.nn.Module) -> None:
        """Send the policy's current weights: the LoRA tensors alone, or every parameter (full)."""
        self._wake()
        if self.parameters == "lora":
            previous, self.adapter = self.adapter, self.engine.adapter_of(model, "policy", self.rank)
            if previous is not None:
                self.engine.forget(previous)
        else:
            self.engine.load_weights(full_weights(model))
        self.syncs += 1

    def draw(
        self,
        model: torch.nn.Module,
        tokenizer,
        prompts: list[str],
        row_keys: torch.Tensor,
        temperature: float,
        top_p: float,
        max_new_tokens: int,
        fmt: PromptFormat | None = None,
    ) -> Rollout:
        """One completion per raw prompt (repeat prompts for groups), with the engine's log-prob of each token."""
        fmt = fmt or PromptFormat()
        stop = model_stop_ids(model, tokenizer)
        ids = prompt_ids(tokenizer, prompts, fmt)
        seeds = [int(k) & 0x7FFFFFFF for k in row_keys.tolist()]
        outs = self.engine.generate(ids, temperature, top_p, max_new_tokens, stop, seeds, self.adapter, logprobs=True)
        completion = torch.full((len(outs), max_new_tokens), tokenizer.pad_token_id, dtype=torch.long)
        engine_logp = torch.zeros((len(outs), max_new_tokens), dtype=torch.float32)
        for i, o in enumerate(outs):
            completion[i, : len(o.token_ids)] = torch.tensor(o.token_ids, dtype=torch.long)
            engine_logp[i, : len(o.token_ids)] = torch.tensor(o.logprobs or [0.0] * len(o.token_ids))
        rollout = to_rollout(tokenizer, encode_prompts(tokenizer, prompts, fmt), completion, stop)
        rollout.engine_logprobs = engine_logp
        return rollout

    def after_rollout(self) -> None:
        """On a GPU the engine sleeps while the rank trains (its memory goes to the optimizer)."""
        if self.engine.sleep_mode:
            self.engine.llm.sleep(level=1)

    def _wake(self) -> None:
        if self.engine.sleep_mode and self.syncs:
            self.engine.llm.wake_up()

    def check(self, gap: float) -> float:
        """The step's engine/trainer gap, or StaleEngineError when it is above sampling.vllm.sync_tolerance."""
        if gap > self.cfg.sync_tolerance:
            raise StaleEngineError(
                f"vLLM's log-probabilities of its own samples differ from the trainer's by {gap:.4f} nats per token "
                f"(sampling.vllm.sync_tolerance={self.cfg.sync_tolerance}): the engine sampled from other weights "
                "than the trainer holds (a missed policy sync)"
            )
        return gap


def full_weights(model: torch.nn.Module):
    """The model's HF-named weights, one whole tensor at a time: an FSDP shard (a DTensor) is gathered from every
    rank as it is reached (a collective: every rank iterates in the same order), so a rank never holds more than one
    gathered tensor beyond its shards."""
    for name, p in model.state_dict().items():
        yield name, whole(p).detach()


def logprob_gap(trainer_logp: torch.Tensor, engine_logp: torch.Tensor, mask: torch.Tensor) -> tuple[float, float]:
    """(sum of |trainer - engine| over the masked tokens, their count): the sync check's figure, summed."""
    diff = (trainer_logp.detach().float().cpu() - engine_logp.float()).abs() * mask.float().cpu()
    return float(diff.sum()), float(mask.sum())
