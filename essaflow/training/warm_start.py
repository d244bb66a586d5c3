"""Shared stage logic every method starts from: dataset splits and the SFT LoRA warm start.

The SFT adapter is a pure function of (model config, SFT config, SFT split), so it is cached by that hash:
ESSA and F-GRPO runs on the same task start from the identical adapter, and a rerun costs nothing.
"""

from __future__ import annotations

import hashlib
import json
import logging
from pathlib import Path

import torch
from peft import PeftModel
from transformers import PreTrainedTokenizerBase

from essaflow.config import DataConfig, EvalConfig, ModelConfig, SamplingConfig, SFTConfig
from essaflow.data import Splits
from essaflow.data.config import HeldOutSourceConfig
from essaflow.data.prepare import PreparedData, prepare_data
from essaflow.data.schema import Problem
from essaflow.generation.prompt_format import PromptFormat
from essaflow.generation.sampling import TransformersGenerator, VLLMGenerator, resolve_backend
from essaflow.judging.evaluation import EvalReport, evaluate
from essaflow.model.config import check_supported
from essaflow.model.loading import (
    attach_lora,
    load_base_model,
    load_model_with_adapter,
    load_tokenizer,
    model_identity,
    resolve_device,
    resolve_model_path,
    save_adapter,
)
from essaflow.model.quantization import quantize_base
from essaflow.storage.atomic_dir import atomic_dir, committed_manifest
from essaflow.storage.cache_dir import cache_root
from essaflow.training.sft import train_sft

log = logging.getLogger(__name__)


def read_run_data(
    cfg: DataConfig, held_out: HeldOutSourceConfig | None = None, model: ModelConfig | None = None
) -> PreparedData:
    """Read, validate, filter and split the problems named by the data config and the held-out source (eval.data);
    model: whose tokenizer data.max_prompt_tokens counts with."""
    tokenizer = load_tokenizer(model) if cfg.max_prompt_tokens is not None and model is not None else None
    return prepare_data(cfg, held_out, tokenizer)


def prepare_splits(
    cfg: DataConfig, held_out: HeldOutSourceConfig | None = None, model: ModelConfig | None = None
) -> Splits:
    """The splits of `read_run_data`."""
    return read_run_data(cfg, held_out, model).splits


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


def evaluate_adapter(
    model_cfg: ModelConfig,
    adapter_dir: Path | None,
    problems: list[Problem],
    eval_cfg: EvalConfig,
    sampling: SamplingConfig,
    fmt: PromptFormat | None = None,
) -> EvalReport:
    """pass@k of base (+ adapter) on problems, with the sampling.backend engine.

    fmt: how prompts are rendered (data.prompt_format() of the run; None: the defaults), as in SFT and training.

    The transformers backend runs on a base quantised as model.quantization says (essaflow.model.quantization); vLLM
    serves the full-precision base with the adapter as a LoRA request (one engine per process and checkpoint, so
    the evaluations before and after training share it; its own quantisation is out of scope here).
    """
    if resolve_backend(sampling.backend) == "vllm":
        if model_cfg.quantization != "none":
            log.warning("model.quantization=%s is not applied by the vLLM backend", model_cfg.quantization)
        generator = VLLMGenerator(
            resolve_model_path(model_cfg.name_or_path), model_cfg.dtype, sampling.vllm, fmt,
            str(adapter_dir) if adapter_dir else None, model_cfg.lora_rank, load_tokenizer(model_cfg),
        )  # fmt: skip
        return evaluate(generator, problems, eval_cfg, sampling)
    model, tok = load_model_with_adapter(model_cfg, adapter_dir)
    return evaluate_model(model, tok, problems, eval_cfg, sampling, fmt)


def evaluate_output(
    model_cfg: ModelConfig,
    output_dir: Path,
    output_kind: str,
    problems: list[Problem],
    eval_cfg: EvalConfig,
    sampling: SamplingConfig,
    fmt: PromptFormat | None = None,
) -> EvalReport:
    """pass@k of a trained policy: a LoRA adapter on the base (output_kind lora) or a full checkpoint (full)."""
    if output_kind == "lora":
        return evaluate_adapter(model_cfg, output_dir, problems, eval_cfg, sampling, fmt)
    if resolve_backend(sampling.backend) == "vllm":
        tok = load_tokenizer(model_cfg)
        generator = VLLMGenerator(str(output_dir), model_cfg.dtype, sampling.vllm, fmt, tokenizer=tok)
        return evaluate(generator, problems, eval_cfg, sampling)
    from transformers import AutoModelForCausalLM

    device = resolve_device(model_cfg.device)
    check_supported(model_cfg.quantization, device, model_cfg.dtype)
    model = AutoModelForCausalLM.from_pretrained(output_dir, dtype=getattr(torch, model_cfg.dtype)).eval()
    model = model.to(device)
    quantize_base(model, model_cfg.quantization)
    return evaluate_model(model, load_tokenizer(model_cfg), problems, eval_cfg, sampling, fmt)


def evaluate_model(
    model: PeftModel,
    tok: PreTrainedTokenizerBase,
    problems: list[Problem],
    eval_cfg: EvalConfig,
    sampling: SamplingConfig,
    fmt: PromptFormat | None = None,
) -> EvalReport:
    return evaluate(TransformersGenerator(model, tok, sampling.batch_size, fmt), problems, eval_cfg, sampling)
