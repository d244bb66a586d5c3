"""The SFT LoRA warm start every method starts from (ESSA-v3 sec. 3.2).

The SFT adapter is a pure function of (model config, SFT config, SFT split), so it is cached by that hash:
ESSA and F-GRPO runs on the same task start from the identical adapter, and a rerun costs nothing.
"""

from __future__ import annotations

import hashlib
import json
import logging
from pathlib import Path

from essaflow.config import ModelConfig, SFTConfig
from essaflow.data import Splits
from essaflow.data.schema import Problem
from essaflow.generation.prompt_format import PromptFormat
from essaflow.model.loading import attach_lora, load_base_model, load_tokenizer, model_identity, save_adapter
from essaflow.storage.atomic_dir import atomic_dir, committed_manifest
from essaflow.storage.cache_dir import cache_root
from essaflow.training.sft import train_sft

log = logging.getLogger(__name__)


def sft_key(model: ModelConfig, sft: SFTConfig, problems: list[Problem], fmt: PromptFormat | None = None) -> str:
    blob = json.dumps(
        [
            model_identity(model),
            (fmt or PromptFormat()).to_dict(),  # the chat template and system prompt change what SFT sees
            # execution details, not inputs (SFT trains on the full-precision base whatever model.quantization says)
            model.model_dump(exclude={"torch_threads", "device", "quantization"}),
            # an untrained start depends on the LoRA init alone (its seed), not on SFT data or hyperparameters
            sft.model_dump() if sft.trains else {"trains": False, "seed": sft.seed},
            [p.content_hash() for p in problems] if sft.trains else [],
        ],
        sort_keys=True,
    )
    return hashlib.sha256(blob.encode()).hexdigest()[:16]


def train_sft_adapter(
    model_cfg: ModelConfig,
    sft_cfg: SFTConfig,
    problems: list[Problem],
    out_dir: Path,
    fmt: PromptFormat | None = None,
) -> Path:
    """Train a LoRA SFT adapter and write it (safetensors + tokenizer) to out_dir atomically; with sft.enabled
    false (or steps 0) the adapter is written untrained (the start is the base itself).

    fmt: data.prompt_format() of the run (None: the defaults), the same one evaluation and training use."""
    tok = load_tokenizer(model_cfg)
    model = attach_lora(load_base_model(model_cfg), model_cfg, seed=sft_cfg.seed)
    if sft_cfg.trains:
        result = train_sft(model, tok, problems, sft_cfg, fmt=fmt)
        summary = {"steps": result.steps, "final_loss": result.final_loss, "wall_s": result.wall_s}
    else:  # no SFT step: the fresh adapter (B = 0) is the start, and base + adapter is the base itself
        summary = {"steps": 0, "final_loss": None, "wall_s": 0.0}
    with atomic_dir(out_dir) as tmp:  # manifest.json last; an older copy is kept until this one is in place
        save_adapter(model, tmp, tok)
        (tmp / "sft_result.json").write_text(json.dumps(summary))
    return out_dir


def cached_sft_adapter(model: ModelConfig, sft: SFTConfig, splits: Splits, fmt: PromptFormat) -> Path:
    """The SFT adapter of (model, SFT config, SFT split, prompt format): trained once, cached by that hash.

    fmt: data.prompt_format() of the run, the formatting evaluation and training use too."""
    target = cache_root() / "sft" / sft_key(model, sft, splits.sft, fmt)
    if committed_manifest(target) is None:
        log.info("training SFT warm start -> %s", target)
        train_sft_adapter(model, sft, splits.sft, target, fmt)
    return target


def sft_start(adapter_uri: str | None, model: ModelConfig, sft: SFTConfig, splits: Splits, fmt: PromptFormat) -> Path:
    """Where training starts: the adapter at adapter_uri when one is given, else the cached SFT adapter."""
    if adapter_uri:
        return Path(adapter_uri.removeprefix("file://"))
    return cached_sft_adapter(model, sft, splits, fmt)
