"""How a scorer turns candidates' offsets into fitnesses on each engine (`sampling.backend`, docs/engines.md).

- `TransformersScoring`: candidate by candidate on the trainer-side model. With `essa.merged_scoring` (default on)
  the scorer writes W0 + scaling B'A' into each adapted base weight and runs the plain model with the LoRA path
  switched off: the same function (up to float rounding) with two fewer matmuls per adapted layer, about 25% faster
  on CPU; the serving path of docs/algorithms.md sec. 6.10. The driver's held-out evaluation and the exported
  adapter use the LoRA path. With `model.quantization` int8/int4 the base weights are torchao tensors that cannot
  hold W0 + scaling B'A', so scoring stays on the LoRA path (docs/algorithms.md sec. 6.15).
- `VLLMScoring`: a run of candidates in one engine batch, each candidate's factors A', B' sent as its own LoRA
  adapter (rank padded to a served value, scaling folded in: the same function), prefix cache off, the same prompt
  ids, stop ids, seeds per prompt row and reward. The gray-box fitnesses stay on the trainer-side model (a
  teacher-forced forward pass, no decoding), so only `essa.fitness: accuracy` runs on it.

Every fitness is rounded to float32 (what travels in seed mode), so every transport tells the strategy the same
numbers.
"""

from __future__ import annotations

import numpy as np
import torch

from essaflow.essa.fitness import MinibatchFitness, mean_reward
from essaflow.essa.scoring_spec import ScoringSpec
from essaflow.generation.prompt_format import prompt_ids
from essaflow.usage import Usage


class TransformersScoring:
    """Offsets applied to the trainer-side model, then the fitness, one candidate at a time."""

    batched = False
    """A run of candidates is scored one by one (each with its own cost record)."""

    def __init__(self, svd, fitness: MinibatchFitness, merged: bool):
        self.svd = svd
        self.fitness = fitness
        # (LoRA layer, its base weight W0) for merged scoring: W0 + scaling * B'A' is written per candidate.
        self.base_weights = [(m, m.base_layer.weight.detach().clone()) for m, _ in svd.modules()] if merged else []

    @property
    def merged(self) -> bool:
        """Whether candidates are scored with B'A' merged into the base weights (else on the LoRA path)."""
        return bool(self.base_weights)

    def __call__(self, xs: list[np.ndarray], prompt_idx: np.ndarray, seed: int, usage: Usage) -> list[float]:
        return [self.one(x, prompt_idx, seed, usage) for x in xs]

    def one(self, offsets: np.ndarray, prompt_idx: np.ndarray, seed: int, usage: Usage) -> float:
        self.svd.apply(offsets)
        if not self.merged:
            return float(np.float32(self.fitness(prompt_idx, seed, usage)))
        with torch.no_grad():
            for module, w0 in self.base_weights:
                module.base_layer.weight.copy_(w0 + module.get_delta_weight(self.svd.adapter_name))
        with self.fitness.generator.model.disable_adapter():  # plain linear layers: the LoRA path would add B'A' again
            return float(np.float32(self.fitness(prompt_idx, seed, usage)))


class VLLMScoring:
    """A run of candidates in one vLLM batch: one LoRA adapter per candidate, the same prompts and seeds per prompt
    row for all (common random numbers, docs/algorithms.md sec. 6.6)."""

    batched = True
    merged = False  # the engine adds each candidate's B'A' itself; the trainer-side model keeps W0

    def __init__(self, spec: ScoringSpec, svd, fitness: MinibatchFitness, engine, rank: int):
        self.spec = spec
        self.svd = svd
        self.generator = fitness.generator
        self.reward = fitness.reward
        self.problems = fitness.problems
        self.engine = engine
        self.rank = rank
        """The LoRA rank adapters reach the engine with: the model's rank padded to a served value."""

    def __call__(self, xs: list[np.ndarray], prompt_idx: np.ndarray, seed: int, usage: Usage) -> list[float]:
        m, gen = self.spec.fitness_samples, self.generator
        rows = [i for i in prompt_idx for _ in range(m)]
        ids = prompt_ids(gen.tokenizer, [self.spec.prompts[i] for i in rows], gen.fmt)
        adapters = []
        for k, x in enumerate(xs):
            self.svd.apply(x)
            adapters.append(self.engine.adapter_of(gen.model, f"candidate{k}", self.rank))
        seeds = [hash((seed, j)) & 0x7FFFFFFF for j in range(len(rows))]
        try:
            outs = self.engine.generate(
                ids * len(xs), self.spec.temperature, self.spec.top_p, self.spec.max_new_tokens, gen.stop,
                seeds * len(xs), [a for a in adapters for _ in rows],
            )  # fmt: skip
        finally:
            for a in adapters:
                self.engine.forget(a)
        texts = gen.tokenizer.batch_decode([o.token_ids for o in outs], skip_special_tokens=True)
        problems = [self.problems[i] for i in rows]
        generated = sum(len(o.token_ids) for o in outs)
        usage.generated_tokens += generated
        usage.forward_tokens += sum(len(p) for p in ids) * len(xs) + generated
        n = len(rows)
        return [
            float(np.float32(mean_reward(self.reward, texts[k * n : (k + 1) * n], problems, usage)))
            for k in range(len(xs))
        ]


def vllm_scoring(spec: ScoringSpec, model_cfg, svd, fitness: MinibatchFitness) -> VLLMScoring:
    """The process's shared vLLM engine for this model, wrapped for scoring (sampling.backend=vllm)."""
    from essaflow.generation.config import VLLMConfig
    from essaflow.generation.vllm_engine import served_lora_rank, shared_engine
    from essaflow.model.loading import resolve_model_path

    path, rank = resolve_model_path(model_cfg.name_or_path, model_cfg.dtype), model_cfg.lora_rank
    engine = shared_engine(path, model_cfg.dtype, VLLMConfig(**spec.vllm), rank)
    return VLLMScoring(spec, svd, fitness, engine, served_lora_rank(rank))
