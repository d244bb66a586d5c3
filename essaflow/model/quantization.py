"""A quantised frozen base for inference-only scoring (`model.quantization`; ESSA-v3 sec. 4.4.2, docs/algorithms.md
sec. 6.15).

ESSA scores every candidate by inference alone, so the frozen base may run in int8 or int4 while the LoRA factors,
which ESSA rewrites per candidate, stay float32. The paper reports INT8/INT4 bases lose under 1 point
(arXiv 2507.04453, ESSA-v3 sec. 4.4.2).

Library: torchao (`torchao.quantization.quantize_`), on CPU and CUDA alike. It quantises the weights of an already
built model in place (a tensor subclass replaces `weight`), so the model is loaded, the adapter attached by peft as
usual, and only then are the base linear layers converted: the LoRA layers, SVDLoRA and the scorer do not change,
and one code path serves both devices. bitsandbytes (the QLoRA path) quantises at load time through
`BitsAndBytesConfig`, swaps the base layers for its own classes, and has CUDA kernels only; it is what
bench/gpu_check.py compares against on a GPU, not a dependency of the library.

What each choice computes:
- ``int8``: torchao `Int8DynamicActivationInt8WeightConfig`: weights int8 per output channel, activations int8 per
  token at run time, an int8 x int8 matmul (`torch._int_mm`; on CPU oneDNN). Weight-only int8
  (`Int8WeightOnlyConfig`) is as accurate here but no faster than float32 on CPU (it dequantises before the matmul),
  so it buys memory only; W8A8 is the scheme of LLM.int8 without its outlier split.
- ``int4``: torchao `Int4WeightOnlyConfig` (group size 128, the tinygemm kernel): CUDA only, and only over a bfloat16
  base (`model.dtype: bfloat16`). torchao has no int4 kernel for x86 CPUs (its CPU int4 stores int4 values in int8
  and dequantises, no kernel), so int4 on CPU is refused.

Which layers: every `nn.Linear` of the base, the LoRA-wrapped ones through their `base_layer`, except the LoRA
factors themselves (`lora_A`, `lora_B`: ESSA writes them per candidate) and `lm_head` (tied to the embeddings in
the tiny model, and the layer where rounding moves the argmax most). Embeddings stay as they are.

When is a bad setting caught: `model.device: cpu` with int4, or int4 without bfloat16, when the config is built
(`ModelConfig`); `device: auto` resolves only where the model loads (a Ray worker without a GPU share sees none),
so `check_supported` runs again in `load_model_with_adapter`, before any weight is read. Both raise a ConfigError
naming `model.quantization`.
"""

from __future__ import annotations

import logging

import torch
from torch import nn

from essaflow.model.config import check_supported

log = logging.getLogger(__name__)

INT4_GROUP_SIZE = 128
_SKIP = ("lora_A", "lora_B", "lm_head")


def _base_linear(module: nn.Module, fqn: str) -> bool:
    """The frozen base's linear layers: not the LoRA factors, not lm_head."""
    return type(module) is nn.Linear and not any(part in _SKIP for part in fqn.split("."))


def torchao_config(mode: str):
    """The torchao workflow config for a mode (see the module docstring for why these)."""
    from torchao.quantization import Int4WeightOnlyConfig, Int8DynamicActivationInt8WeightConfig

    if mode == "int8":
        return Int8DynamicActivationInt8WeightConfig()
    return Int4WeightOnlyConfig(group_size=INT4_GROUP_SIZE, int4_packing_format="tile_packed_to_4d")


def quantize_base(model: nn.Module, mode: str) -> int:
    """Quantise the base linear layers of `model` in place (LoRA factors and lm_head untouched); returns how many.

    Call after the adapter is attached: peft then wraps plain `nn.Linear` layers, and the quantised weight sits in
    each wrapper's `base_layer`.
    """
    if mode == "none":
        return 0
    device = next(model.parameters()).device
    dtype = {v: k for k, v in {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}.items()}
    check_supported(mode, device, dtype.get(next(model.parameters()).dtype, "float32"))
    from torchao.quantization import quantize_

    names = [n for n, m in model.named_modules() if _base_linear(m, n)]
    if mode == "int4":  # tinygemm packs whole groups: a layer whose input width is not a multiple stays as it is
        skipped = [n for n in names if model.get_submodule(n).in_features % INT4_GROUP_SIZE]
        if skipped:
            log.warning("int4: %d layer(s) not a multiple of %d wide stay unquantised", len(skipped), INT4_GROUP_SIZE)
    quantize_(model, torchao_config(mode), filter_fn=_base_linear)
    n = sum(is_quantized(model.get_submodule(name).weight) for name in names)
    log.info("model.quantization=%s: %d base linear layers quantised (torchao); LoRA factors and lm_head kept", mode, n)
    return n


def is_quantized(weight: torch.Tensor) -> bool:
    """True for a torchao quantised weight (its tensor subclass), False for a plain float tensor."""
    try:
        from torchao.utils import TorchAOBaseTensor
    except ImportError:
        return False
    return isinstance(weight, TorchAOBaseTensor)
