"""One ESSA candidate scorer: base + SFT adapter + frozen SVD bases, loaded once; fitness per candidate by inference.

What a scorer computes (docs/algorithms.md sec. 2.7, 6):
- Decoding (sec. 6.7): `essa.fitness_temperature` (default 0 = greedy), one completion per prompt, the b prompts of a
  candidate in one batched generate call. Fitness = mean reward (`eval.reward`) over the b prompts.
- Merged scoring (`essa.merged_scoring`, default on): a scorer writes W0 + scaling B'A' into each adapted base
  weight and runs the plain model with the LoRA path switched off: the same function (up to float rounding) with
  two fewer matmuls per adapted layer, about 25% faster on CPU; the serving path of docs/algorithms.md sec. 6.10. The
  driver's held-out evaluation and the exported adapter use the LoRA path. With `model.quantization` int8/int4 the
  base weights are torchao tensors that cannot hold W0 + scaling B'A', so scorers use the LoRA path whatever
  `essa.merged_scoring` says, and log it (docs/algorithms.md sec. 6.15).
- `essa.fitness: answer_probability` (an option beside the paper's accuracy, not a black-box reward: it needs the
  reference answer): the probability that decoding at `essa.fitness_temperature` T produces the reference answer +
  EOS, computed exactly by one teacher-forced forward pass over the b prompts instead of estimated by decoding.
  For exact match it is the expected reward of one completion at temperature T (T = 1: expected pass@1), so it
  has no decoding noise and far fewer ties; T < 1 sharpens it towards greedy accuracy, which it equals at T = 0
  (the reference is the argmax at every answer step). `answer_logprob` is the mean log-probability of the
  reference (the SFT objective, a surrogate rather than an expected reward), for measuring the subspace's ceiling
  the way `bench/essa_ceiling.py` does, but without gradients.
- Engine (`sampling.backend`, docs/engines.md): transformers decodes candidate by candidate as above;
  vllm scores a worker's whole share of the population in one engine batch, each candidate's factors A', B' sent
  as its own LoRA adapter (rank padded to a served value, scaling folded in: the same function), prefix cache off,
  the same prompt ids, stop ids, seeds per prompt row and reward. The gray-box fitnesses stay on the trainer-side
  model (a teacher-forced forward pass, no decoding).
"""

from __future__ import annotations

import logging
import pickle
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import torch

from essaflow import cluster
from essaflow.essa.replica import ReplicaState, Reply, StrategyReplica, encode_fitness
from essaflow.generation.prompt_format import PromptFormat, prompt_ids, target_ids
from essaflow.model.config import ModelConfig
from essaflow.training.usage import Usage, device_time

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class ScoringSpec:
    """Everything a scorer needs, sent once when it starts (counted as setup bytes, not per generation)."""

    model: dict[str, Any]
    """ModelConfig as a dict."""
    adapter_dir: str
    """The SFT adapter's directory on the driver (used in place by workers that see the same disk)."""
    alpha: float
    nonnegative: bool
    prompts: list[str]
    """The ESSA training split's prompts; per generation only indices into it travel."""
    answers: list[str]
    reward: str
    max_new_tokens: int
    temperature: float
    top_p: float = 1.0
    batch_size: int = 512
    fitness: str = "accuracy"
    """accuracy (decode, then reward) or answer_probability (teacher-forced P(reference answer))."""
    fitness_samples: int = 1
    """Completions decoded per prompt (accuracy fitness); the reward is their mean."""
    offsets: str = "additive"
    """The search parameterisation (SVDLoRA offsets: additive or relative)."""
    merged: bool = True
    """Score with B'A' merged into the base weights and the LoRA path off (same function, fewer ops)."""
    prompt_format: dict[str, Any] = field(default_factory=dict)
    """data.prompt_format() as a dict: the chat template and system prompt every prompt is rendered with."""
    adapter_files: dict[str, bytes] = field(default_factory=dict)
    """The adapter's files (relative path -> bytes: safetensors, JSON, tokenizer): a worker on a node that does not
    see adapter_dir writes them to a private temporary directory, so ESSA needs no disk shared with the driver."""
    search: dict[str, Any] | None = None
    """The essa config as a dict, from which a worker builds its replica of the strategy and the minibatch sampler
    (essa.sync=seed); None: vectors only."""
    backend: str = "transformers"
    """The resolved sampling.backend: transformers, or vllm (one engine batch per share, an adapter per candidate)."""
    vllm: dict[str, Any] = field(default_factory=dict)
    """sampling.vllm as a dict: the engine's settings when backend is vllm."""


class CandidateScorer:
    """Base + SFT adapter + SVD bases, loaded once; `score` applies offsets and measures minibatch reward."""

    def __init__(self, spec: ScoringSpec):
        from essaflow.essa.svd_lora import SVDLoRA
        from essaflow.generation.sampling import TransformersGenerator
        from essaflow.judging.rewards import get_reward
        from essaflow.model.loading import load_model_with_adapter

        self.spec = spec
        adapter_dir = spec.adapter_dir
        if not Path(adapter_dir).is_dir():  # another machine than the driver's
            if not spec.adapter_files:
                raise FileNotFoundError(cluster.unshared_path_message("ESSA worker", "SFT adapter", adapter_dir))
            self._adapter_copy = tempfile.TemporaryDirectory(prefix="essaflow-adapter-")  # removed with the worker
            adapter_dir = self._adapter_copy.name
            for name, data in spec.adapter_files.items():
                target = Path(adapter_dir) / name
                target.parent.mkdir(parents=True, exist_ok=True)
                target.write_bytes(data)
        # on model.device: auto puts a worker with a GPU share on it, one without (CUDA hidden by Ray) on CPU
        model_cfg = ModelConfig(**spec.model)
        model, tok = load_model_with_adapter(model_cfg, adapter_dir)  # base quantised per model.quantization
        merged = spec.merged and model_cfg.quantization == "none"
        if spec.merged and not merged:  # docs/algorithms.md sec. 6.15
            log.info("model.quantization=%s: scoring on the LoRA path (an int8/int4 base weight cannot hold "
                     "W0 + scaling B'A'; essa.merged_scoring ignored)", model_cfg.quantization)  # fmt: skip
        self.on_gpu = next(model.parameters()).device.type == "cuda"  # device_s: GPU wall time, else CPU time
        self.svd = SVDLoRA(model, spec.alpha, nonnegative=spec.nonnegative, offsets=spec.offsets)
        self.generator = TransformersGenerator(model, tok, spec.batch_size, PromptFormat(**spec.prompt_format))
        self.reward = get_reward(spec.reward)
        self.engine = None
        if spec.backend == "vllm" and spec.fitness == "accuracy":
            from essaflow.generation.config import VLLMConfig
            from essaflow.generation.vllm_engine import shared_engine
            from essaflow.model.loading import resolve_model_path

            path, rank = resolve_model_path(model_cfg.name_or_path), model_cfg.lora_rank
            self.engine = shared_engine(path, model_cfg.dtype, VLLMConfig(**spec.vllm), rank)
            merged = False  # the engine adds each candidate's B'A' itself; the trainer-side model keeps W0
        self._answer_ids: list[tuple[list[int], list[int]]] | None = None
        # (LoRA layer, its base weight W0) for merged scoring: W0 + scaling * B'A' is written per candidate.
        self._merge = [(m, m.base_layer.weight.detach().clone()) for m, _ in self.svd.modules()] if merged else []

    def ready(self) -> tuple[int, str]:
        """The search dimension (the driver checks it matches its own) and the Ray node this scorer runs on."""
        return self.svd.dimension, cluster.node_id()

    def score(self, index: int, offsets: np.ndarray, prompt_idx: np.ndarray, seed: int) -> tuple[int, float, bytes]:
        """Fitness of one candidate on the minibatch (all b prompts in one batched call), rounded to float32 (what
        travels in seed mode, so every transport tells the strategy the same numbers), and what it cost."""
        usage = Usage()
        with device_time(usage, self.on_gpu):
            if self.engine is not None:
                value = self._engine_fitness([offsets], prompt_idx, seed, usage)[0]
            else:
                value = self._score(offsets, prompt_idx, seed, usage)
        return index, value, usage.encode()

    def _engine_fitness(self, xs: list[np.ndarray], prompt_idx: np.ndarray, seed: int, usage: Usage) -> list[float]:
        """Fitness of several candidates in one vLLM batch: one LoRA adapter per candidate, the same prompts and
        seeds per prompt row for all (common random numbers, docs/algorithms.md sec. 6.6), float32-rounded."""
        m, gen = self.spec.fitness_samples, self.generator
        rows = [i for i in prompt_idx for _ in range(m)]
        ids = prompt_ids(gen.tokenizer, [self.spec.prompts[i] for i in rows], gen.fmt)
        adapters = []
        for k, x in enumerate(xs):
            self.svd.apply(x)
            adapters.append(self.engine.adapter_of(gen.model, f"candidate{k}", self.engine_rank))
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
        answers = [self.spec.answers[i] for i in rows]
        generated = sum(len(o.token_ids) for o in outs)
        usage.generated_tokens += generated
        usage.forward_tokens += sum(len(p) for p in ids) * len(xs) + generated
        n = len(rows)
        return [
            float(np.float32(np.mean([self.reward(t, a) for t, a in zip(texts[k * n : (k + 1) * n], answers)])))
            for k in range(len(xs))
        ]

    @property
    def engine_rank(self) -> int:
        """The LoRA rank adapters reach the engine with: the model's rank padded to a served value."""
        from essaflow.generation.vllm_engine import served_lora_rank

        return served_lora_rank(ModelConfig(**self.spec.model).lora_rank)

    def _score(self, offsets: np.ndarray, prompt_idx: np.ndarray, seed: int, usage: Usage) -> float:
        self.svd.apply(offsets)
        if not self._merge:
            return float(np.float32(self._fitness(prompt_idx, seed, usage)))
        with torch.no_grad():
            for module, w0 in self._merge:
                module.base_layer.weight.copy_(w0 + module.get_delta_weight(self.svd.adapter_name))
        with self.generator.model.disable_adapter():  # plain linear layers: the LoRA path would add B'A' again
            return float(np.float32(self._fitness(prompt_idx, seed, usage)))

    def score_share(
        self, generation: int, start: int, stop: int, others: bytes | None = None, state: ReplicaState | None = None
    ) -> Reply:
        """Seed mode: candidates start..stop-1 of `generation`, drawn by this worker's replica, and their fitness.

        The worker's first call of a generation carries the previous generation's fitness of the candidates this
        worker did not score (or, after a restart or a disagreement, the driver's `state`; see
        `essaflow.essa.replica`). Answers (start, float32 fitness bytes, replica digest, usage); the fitness is
        None when the replica does not hold `generation` (a restart the driver has not seen yet), and the driver
        then sends the state.
        """
        replica = self._sync_replica(generation, others, state)
        if not replica.holds(generation):
            return start, None, replica.digest(), b""
        x = replica.candidates.astype(np.float32)
        seed = replica.sampling_seed
        values, usage = self.score_range(x[start:stop], start, replica.prompt_idx, seed)
        replica.scored(range(start, stop), values)
        return start, encode_fitness(values), replica.digest(), usage.encode()

    def score_range(self, xs: np.ndarray, start: int, prompt_idx: np.ndarray, seed: int) -> tuple[list[float], Usage]:
        """Fitness of a run of candidates: one engine batch on vLLM, candidate by candidate on transformers."""
        usage = Usage()
        if self.engine is not None:
            with device_time(usage, self.on_gpu):
                return self._engine_fitness(list(xs), prompt_idx, seed, usage), usage
        values = []
        for i, x in enumerate(xs):
            _, value, cost = self.score(start + i, x, prompt_idx, seed)
            values.append(value)
            usage.add(Usage.decode(cost))
        return values, usage

    def _sync_replica(self, generation: int, others: bytes | None, state: ReplicaState | None) -> StrategyReplica:
        """The replica, built on first use (not at load: vectors mode never needs it), brought to `generation`."""
        if getattr(self, "_replica", None) is None:
            if self.spec.search is None:
                raise RuntimeError("essa.sync=seed needs ScoringSpec.search (the essa config) to build the replica")
            self._replica = StrategyReplica(self.spec.search, self.svd.dimension, len(self.spec.prompts))
        self._replica.advance(generation, others, state)
        return self._replica

    def _fitness(self, prompt_idx: np.ndarray, seed: int, usage: Usage) -> float:
        if self.spec.fitness in ("answer_probability", "answer_logprob"):
            return self._answer_probability(prompt_idx, usage)
        m = self.spec.fitness_samples
        r = self.generator.rollout(  # what generator.sample does, keeping the token counts
            [self.spec.prompts[i] for i in prompt_idx for _ in range(m)],
            temperature=self.spec.temperature,
            top_p=self.spec.top_p,
            max_new_tokens=self.spec.max_new_tokens,
            seed=seed,
        )
        generated = int(r.completion_mask.sum())
        usage.generated_tokens += generated
        usage.forward_tokens += int(r.prompt_mask.sum()) + generated
        answers = [self.spec.answers[i] for i in prompt_idx for _ in range(m)]
        return float(np.mean([self.reward(text, a) for text, a in zip(r.texts, answers)]))

    @torch.no_grad()
    def _answer_probability(self, prompt_idx: np.ndarray, usage: Usage | None = None) -> float:
        """Mean over the minibatch of P_T(reference answer + EOS | prompt), teacher forced, one forward pass."""
        tok = self.generator.tokenizer
        if self._answer_ids is None:  # tokenized once: per-call tokenization would cost more than the forward
            # the prompt as generation feeds it, the answer closed as SFT closes it (prompt_format)
            fmt, stop = self.generator.fmt, self.generator.stop
            enc_p = prompt_ids(tok, self.spec.prompts, fmt)
            enc_a = [target_ids(tok, p, a, fmt, stop) for p, a in zip(self.spec.prompts, self.spec.answers)]
            self._answer_ids = list(zip(enc_p, enc_a))
        rows = [self._answer_ids[i] for i in prompt_idx]
        width = max(len(p) + len(a) for p, a in rows)
        ids = torch.full((len(rows), width), tok.pad_token_id, dtype=torch.long)
        mask = torch.zeros((len(rows), width), dtype=torch.long)
        labels = torch.full((len(rows), width), -100, dtype=torch.long)
        for r, (p, a) in enumerate(rows):  # right padded: prompt, answer, EOS
            ids[r, : len(p) + len(a)] = torch.tensor(p + a)
            mask[r, : len(p) + len(a)] = 1
            labels[r, len(p) : len(p) + len(a)] = torch.tensor(a)
        model = self.generator.model
        device = next(model.parameters()).device
        if usage is not None:
            usage.forward_tokens += int(mask.sum())
        logits = model(input_ids=ids.to(device), attention_mask=mask.to(device)).logits[:, :-1].float()
        labels = labels[:, 1:].to(device)
        scored = labels != -100
        target = labels.clamp(min=0).unsqueeze(-1)
        if self.spec.fitness == "answer_logprob":  # mean log P(reference) at temperature 1: the SFT objective
            logp = torch.log_softmax(logits, dim=-1).gather(-1, target).squeeze(-1)
            return float((logp * scored).sum(dim=1).mean())
        if self.spec.temperature == 0:  # greedy: the reference is decoded iff it is the argmax at every step
            hit = (logits.argmax(dim=-1) == labels) | ~scored
            return float(hit.all(dim=1).double().mean())
        logp = torch.log_softmax(logits / self.spec.temperature, dim=-1).gather(-1, target).squeeze(-1)
        return float(torch.exp((logp * scored).sum(dim=1)).mean())


def payload_bytes(obj: Any) -> int:
    """Serialized size of a call's arguments or reply (pickle protocol 5, as Ray's serializer uses)."""
    return len(pickle.dumps(obj, protocol=5))
