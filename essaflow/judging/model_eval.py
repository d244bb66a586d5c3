"""pass@k of a model as stored: the base with a LoRA adapter, or a full fine-tuned checkpoint, on either engine.

The transformers backend runs on a base quantised as model.quantization says (essaflow.model.quantization); vLLM
serves the full-precision base with the adapter as a LoRA request (one engine per process and checkpoint, so the
evaluations before and after training share it; its own quantisation is out of scope here). The protocol itself
(samples, seeds, pass@k) is essaflow.judging.evaluation's.
"""

from __future__ import annotations

import logging
from pathlib import Path

import torch
from peft import PeftModel
from transformers import PreTrainedTokenizerBase

from essaflow.data.schema import Problem
from essaflow.generation.config import SamplingConfig
from essaflow.generation.prompt_format import PromptFormat
from essaflow.generation.sampling import TransformersGenerator, VLLMGenerator, resolve_backend
from essaflow.judging.config import EvalConfig
from essaflow.judging.evaluation import EvalReport, evaluate
from essaflow.model.config import ModelConfig, check_supported
from essaflow.model.devices import resolve_device
from essaflow.model.loading import load_model_with_adapter, load_tokenizer, resolve_model_path
from essaflow.model.quantization import quantize_base

log = logging.getLogger(__name__)


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
    """
    if resolve_backend(sampling.backend) == "vllm":
        if model_cfg.quantization != "none":
            log.warning("model.quantization=%s is not applied by the vLLM backend", model_cfg.quantization)
        generator = VLLMGenerator(
            resolve_model_path(model_cfg.name_or_path, model_cfg.dtype), model_cfg.dtype, sampling.vllm, fmt,
            str(adapter_dir) if adapter_dir else None, model_cfg.lora_rank, load_tokenizer(model_cfg),
            eval_cfg.shared_prompt,
        )  # fmt: skip
        return evaluate(generator, problems, eval_cfg, sampling)
    model, tok = load_model_with_adapter(model_cfg, adapter_dir)
    return evaluate_transformers(model, tok, problems, eval_cfg, sampling, fmt)


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
        generator = VLLMGenerator(
            str(output_dir), model_cfg.dtype, sampling.vllm, fmt, tokenizer=tok, shared_prompt=eval_cfg.shared_prompt
        )
        return evaluate(generator, problems, eval_cfg, sampling)
    from transformers import AutoModelForCausalLM

    device = resolve_device(model_cfg.device)
    check_supported(model_cfg.quantization, device, model_cfg.dtype)
    model = AutoModelForCausalLM.from_pretrained(output_dir, dtype=getattr(torch, model_cfg.dtype)).eval()
    model = model.to(device)
    quantize_base(model, model_cfg.quantization)
    return evaluate_transformers(model, load_tokenizer(model_cfg), problems, eval_cfg, sampling, fmt)


def evaluate_transformers(
    model: PeftModel,
    tok: PreTrainedTokenizerBase,
    problems: list[Problem],
    eval_cfg: EvalConfig,
    sampling: SamplingConfig,
    fmt: PromptFormat | None = None,
) -> EvalReport:
    """pass@k of a loaded model (a peft model, or a full checkpoint) with the transformers engine."""
    generator = TransformersGenerator(model, tok, sampling.batch_size, fmt, eval_cfg.shared_prompt)
    return evaluate(generator, problems, eval_cfg, sampling)
