"""The `model` section: which base model loads and how LoRA is attached (the loading itself is loading.py).

No torch or transformers here, so reading a config stays cheap for the processes that never load a model.
"""

from __future__ import annotations

import importlib.util
from typing import Any, Literal

from pydantic import Field, model_validator

from essaflow.config_base import ConfigError, StrictConfig, trajectory

Quantization = Literal["none", "int8", "int4"]
"""model.quantization: the frozen base's linear layers (quantization.py)."""


def check_supported(mode: str, device: Any, dtype: str) -> None:
    """Raise a ConfigError naming `model.quantization` when this (mode, device, dtype) has no kernel here."""
    if mode == "none":
        return
    device = str(device).split(":")[0]  # "cuda:1" or a torch.device: the device type
    if mode not in ("int8", "int4"):
        raise ConfigError(f"model.quantization={mode!r}: choose none, int8 or int4")
    if importlib.util.find_spec("torchao") is None:
        raise ConfigError(f"model.quantization={mode}: torchao is not installed (pip install torchao)")
    if mode == "int4":
        if device != "cuda":
            raise ConfigError(
                f"model.quantization=int4 on {device}: torchao has no int4 kernel for this device (tinygemm is "
                "CUDA only); use int8, or run the scorers on a GPU"
            )
        if dtype != "bfloat16":
            raise ConfigError(
                f"model.quantization=int4 needs model.dtype=bfloat16 (torchao's int4 tinygemm kernel), got {dtype}"
            )


class ModelConfig(StrictConfig):
    """Which base model to load and how LoRA is attached."""

    name_or_path: str = trajectory("builtin:tiny")
    """'builtin:tiny' (our embedded model, arithmetic), 'builtin:tiny-countdown' or 'builtin:tiny-programs' (one per
    synthetic task, docs/tasks.md), a local directory, a hub id, or an s3:// prefix."""
    revision: str | None = trajectory(None)
    """Hub revision to pin."""
    trust_remote_code: bool = False
    """Allow a checkpoint's own Python code to run. Off unless you trust the source."""
    dtype: Literal["float32", "bfloat16", "float16"] = trajectory("float32")
    """Weights dtype."""
    lora_rank: int = trajectory(8, ge=1)
    """LoRA rank r."""
    lora_alpha: float = trajectory(16.0, gt=0)
    """LoRA alpha (scale = alpha / r). ESSA keeps the SFT adapter's scaling (docs/algorithms.md sec. 6.9)."""
    lora_dropout: float = Field(0.0, ge=0.0, lt=1.0)
    """LoRA dropout during SFT."""
    target_modules: list[str] = trajectory(["q_proj", "k_proj", "v_proj", "o_proj"])
    """Modules LoRA adapts; ESSA uses the attention projections Q/K/V/O (ESSA-v3 sec. 3.2)."""
    torch_threads: int = Field(1, ge=1)
    """Torch intra-op threads per process: 1 avoids collapse when another process shares the cores. ESSA's Ray
    scorers take at most their Ray CPUs (essa.workers.cpus), so the driver's evaluation and SFT may use more."""
    device: Literal["auto", "cpu", "cuda"] = "auto"
    """Where models are loaded (SFT, evaluation, ESSA scorers): auto = cuda when torch sees one, else cpu. A Ray
    worker without a GPU share sees none, so CPU workers beside GPU ones stay on CPU."""
    quantization: Quantization = trajectory("none")
    """The frozen base's linear layers in ESSA's scorers and in evaluation (transformers backend): none, int8 or
    int4 (ESSA-v3 sec. 4.4.2 reports INT8/INT4 bases lose < 1 point; docs/algorithms.md sec. 6.15). torchao,
    applied after the adapter is attached; the LoRA factors and lm_head stay in model.dtype. int8: int8 weights and
    dynamically int8-quantised activations, an int8 matmul (CPU and CUDA). int4: int4 weights in groups of 128
    (tinygemm), CUDA with model.dtype bfloat16 only; refused on CPU (no int4 kernel), at config time for
    device cpu, at model load for auto. With a quantised base, scorers use the LoRA path (essa.merged_scoring is
    ignored: an int8 weight cannot hold W0 + scaling B'A'). Not applied to SFT, F-GRPO training or vLLM."""

    @model_validator(mode="after")
    def _quantization_has_a_kernel(self) -> ModelConfig:
        if self.quantization != "none" and self.device != "auto":
            check_supported(self.quantization, self.device, self.dtype)
        elif self.quantization == "int4" and self.dtype != "bfloat16":
            raise ConfigError(
                f"model.quantization=int4 needs model.dtype=bfloat16 (torchao's int4 tinygemm kernel), got {self.dtype}"
            )
        return self
