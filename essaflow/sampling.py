"""Generation behind one interface: `generate(prompts, n, temperature, top_p, max_new_tokens, seed)`.

The transformers backend batches everything (the tiny model runs ~50x faster at batch 512 than at batch 1),
pads on the left, uses the KV cache and stops at EOS. The vLLM backend is used when vLLM is installed and a GPU is
present; it is imported lazily so CPU machines never need it.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Literal, Protocol

import torch
from pydantic import Field
from transformers import PreTrainedModel, PreTrainedTokenizerBase

from essaflow.config_base import StrictConfig, trajectory


class SamplingConfig(StrictConfig):
    """How completions are generated."""

    backend: Literal["auto", "transformers", "vllm"] = "auto"
    """Generation backend of pass@k evaluation: vllm (the `vllm` extra and a CUDA GPU; auto picks it when both are
    there) or transformers. ESSA candidates and GRPO rollouts change the weights every call and always use
    transformers (on the model's device)."""
    temperature: float = Field(1.0, ge=0.0)
    """Sampling temperature; 0 means greedy."""
    top_p: float = trajectory(1.0, gt=0.0, le=1.0)
    """Nucleus sampling mass."""
    max_new_tokens: int = trajectory(8, ge=1)
    """Completion length cap."""
    batch_size: int = Field(512, ge=1)
    """Sequences generated per forward batch."""


@dataclass
class Rollout:
    """Token-level view of sampled completions, for RL: prompt ids (left padded) and completion ids."""

    prompt_ids: torch.Tensor  # [B, P] left padded
    prompt_mask: torch.Tensor  # [B, P]
    completion_ids: torch.Tensor  # [B, C] right padded with pad after EOS
    completion_mask: torch.Tensor  # [B, C] 1 up to and including EOS
    texts: list[str]


def mask_after_eos(completion: torch.Tensor, eos_id: int, pad_id: int) -> tuple[torch.Tensor, torch.Tensor]:
    """[B, C] generated ids -> (ids with every token after the first EOS set to pad, mask 1 up to and incl. it).

    A row without EOS (truncated at the length cap) keeps all its tokens.
    """
    is_eos = completion == eos_id
    after_eos = (is_eos.cumsum(dim=1) - is_eos.long()) > 0
    return completion.masked_fill(after_eos, pad_id), (~after_eos).long()


def to_rollout(
    tokenizer: PreTrainedTokenizerBase, enc: Mapping[str, torch.Tensor], completion: torch.Tensor
) -> Rollout:
    """The Rollout of raw generated ids: masked after the first EOS, decoded without special tokens.

    enc: the tokenizer's left-padded encoding of the prompts (input_ids, attention_mask), one row per completion.
    """
    completion, mask = mask_after_eos(completion, tokenizer.eos_token_id, tokenizer.pad_token_id)
    texts = tokenizer.batch_decode(completion, skip_special_tokens=True)
    return Rollout(enc["input_ids"], enc["attention_mask"], completion, mask, texts)


class Generator(Protocol):
    def generate(
        self,
        prompts: list[str],
        n: int = 1,
        temperature: float = 1.0,
        top_p: float = 1.0,
        max_new_tokens: int = 8,
        seed: int = 0,
    ) -> list[list[str]]:
        """n completions per prompt, in prompt order."""
        ...


class TransformersGenerator:
    """Batched HF `generate` on CPU or GPU."""

    def __init__(self, model: PreTrainedModel, tokenizer: PreTrainedTokenizerBase, batch_size: int = 512):
        self.model = model
        self.tokenizer = tokenizer
        self.batch_size = batch_size

    @torch.no_grad()
    def rollout(
        self,
        prompts: list[str],
        temperature: float = 1.0,
        top_p: float = 1.0,
        max_new_tokens: int = 8,
        seed: int = 0,
    ) -> Rollout:
        """One completion per given prompt (repeat prompts for groups), with token ids and masks."""
        tok = self.tokenizer
        device = next(self.model.parameters()).device
        torch.manual_seed(seed)
        enc = tok(prompts, return_tensors="pt", padding=True, add_special_tokens=False, padding_side="left")
        outs = []
        for start in range(0, len(prompts), self.batch_size):
            ids = enc["input_ids"][start : start + self.batch_size].to(device)
            mask = enc["attention_mask"][start : start + self.batch_size].to(device)
            sample = temperature > 0
            gen = self.model.generate(
                input_ids=ids,
                attention_mask=mask,
                do_sample=sample,
                temperature=temperature if sample else None,
                top_p=top_p if sample else None,
                top_k=0 if sample else None,
                max_new_tokens=max_new_tokens,
                pad_token_id=tok.pad_token_id,
                eos_token_id=tok.eos_token_id,
            )
            outs.append(gen[:, ids.shape[1] :].cpu())
        width = max(o.shape[1] for o in outs)
        completion = torch.cat(
            [torch.nn.functional.pad(o, (0, width - o.shape[1]), value=tok.pad_token_id) for o in outs]
        )
        return to_rollout(tok, enc, completion)

    def generate(
        self,
        prompts: list[str],
        n: int = 1,
        temperature: float = 1.0,
        top_p: float = 1.0,
        max_new_tokens: int = 8,
        seed: int = 0,
    ) -> list[list[str]]:
        expanded = [p for p in prompts for _ in range(n)]
        texts = self.rollout(expanded, temperature, top_p, max_new_tokens, seed).texts
        return [texts[i * n : (i + 1) * n] for i in range(len(prompts))]


class VLLMGenerator:
    """vLLM backend (GPU). The model directory must hold a merged checkpoint (base + merged LoRA)."""

    def __init__(self, model_dir: str, dtype: str = "bfloat16", gpu_memory_utilization: float = 0.5):
        from vllm import LLM  # imported lazily: optional GPU-only dependency

        self.llm = LLM(model=model_dir, dtype=dtype, gpu_memory_utilization=gpu_memory_utilization)

    def generate(
        self,
        prompts: list[str],
        n: int = 1,
        temperature: float = 1.0,
        top_p: float = 1.0,
        max_new_tokens: int = 8,
        seed: int = 0,
    ) -> list[list[str]]:
        from vllm import SamplingParams

        params = SamplingParams(n=n, temperature=temperature, top_p=top_p, max_tokens=max_new_tokens, seed=seed)
        return [[o.text for o in r.outputs] for r in self.llm.generate(prompts, params)]


def resolve_backend(choice: str) -> str:
    """sampling.backend -> the engine that will run: auto picks vllm when it imports and a GPU is visible.

    Asking for vllm where it cannot run is an error naming what is missing, raised before anything loads.
    """
    if choice == "transformers":
        return choice
    if vllm_available():
        return "vllm"
    if choice == "vllm":
        from essaflow.config_base import ConfigError

        raise ConfigError(
            "sampling.backend=vllm needs the vllm extra (pip install 'essaflow[vllm]') and a visible CUDA GPU; "
            f"here vllm imports: {_vllm_imports()}, CUDA: {torch.cuda.is_available()}. Use auto or transformers."
        )
    return "transformers"


def _vllm_imports() -> bool:
    try:
        import vllm  # noqa: F401
    except ImportError:
        return False
    return True


def vllm_available() -> bool:
    """True when vLLM imports and a CUDA device is visible."""
    try:
        import vllm  # noqa: F401
    except ImportError:
        return False
    return torch.cuda.is_available()
