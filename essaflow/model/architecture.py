"""A decoder's shape from its config.json, without loading a weight: what the memory plan sizes.

Covers the Llama/Qwen2 family (pre-norm decoder layers of grouped-query attention and a gated MLP, RMSNorm with a
weight only), which is what the recipes train. A checkpoint is read from its local directory or the Hugging Face
cache; a recipe's hub id that is not cached falls back to `KNOWN_CONFIGS`, so check-config plans it offline.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

#: config.json numbers of the checkpoints the recipes name (as published on the hub), so a plan needs no download
_QWEN25_7B = {
    "model_type": "qwen2",
    "vocab_size": 152064,
    "hidden_size": 3584,
    "intermediate_size": 18944,
    "num_hidden_layers": 28,
    "num_attention_heads": 28,
    "num_key_value_heads": 4,
    "tie_word_embeddings": False,
    "max_position_embeddings": 131072,
}
KNOWN_CONFIGS: dict[str, dict[str, Any]] = {
    "Qwen/Qwen2.5-7B": _QWEN25_7B,
    "Qwen/Qwen2.5-7B-Instruct": _QWEN25_7B,
    "Qwen/Qwen2.5-Math-7B": {**_QWEN25_7B, "max_position_embeddings": 4096},
    # the GGUF's own numbers, as transformers reads them (essaflow/model/gguf.py)
    "builtin:smollm2-135m-instruct": {
        "vocab_size": 49152,
        "hidden_size": 576,
        "intermediate_size": 1536,
        "num_hidden_layers": 30,
        "num_attention_heads": 9,
        "num_key_value_heads": 3,
        "head_dim": 64,
        "tie_word_embeddings": True,
        "max_position_embeddings": 8192,
    },
}


@dataclass(frozen=True)
class Architecture:
    """The numbers of config.json that decide parameter count and activation size."""

    vocab: int
    hidden: int
    layers: int
    intermediate: int
    heads: int
    kv_heads: int
    head_dim: int
    tied_embeddings: bool
    qkv_bias: bool
    """Qwen2 has biases on q, k and v (no config key says so); Llama reads `attention_bias`."""
    mlp_bias: bool
    max_positions: int

    @classmethod
    def from_config(cls, cfg: dict[str, Any]) -> Architecture:
        """From a config.json dict; a missing key is a ValueError naming it."""
        missing = [k for k in ("vocab_size", "hidden_size", "intermediate_size", "num_hidden_layers") if k not in cfg]
        if missing:
            raise ValueError(f"config.json lacks {', '.join(missing)}: not a Llama/Qwen2-style decoder")
        heads = cfg.get("num_attention_heads", 1)
        return cls(
            vocab=cfg["vocab_size"],
            hidden=cfg["hidden_size"],
            layers=cfg["num_hidden_layers"],
            intermediate=cfg["intermediate_size"],
            heads=heads,
            kv_heads=cfg.get("num_key_value_heads") or heads,
            head_dim=cfg.get("head_dim") or cfg["hidden_size"] // heads,
            tied_embeddings=bool(cfg.get("tie_word_embeddings", False)),
            qkv_bias=bool(cfg.get("attention_bias", cfg.get("model_type") == "qwen2")),
            mlp_bias=bool(cfg.get("mlp_bias", False)),
            max_positions=cfg.get("max_position_embeddings", 0),
        )

    def layer_parameters(self) -> int:
        """One decoder layer: q, k, v, o projections, the gated MLP, two RMSNorm weights."""
        h, q, kv, i = self.hidden, self.heads * self.head_dim, self.kv_heads * self.head_dim, self.intermediate
        attention = h * q + 2 * h * kv + q * h + (q + 2 * kv if self.qkv_bias else 0)
        mlp = 3 * h * i + (2 * i + h if self.mlp_bias else 0)
        return attention + mlp + 2 * h

    def outer_parameters(self) -> int:
        """Outside the layers: embeddings, the final norm, and the LM head unless it is tied to the embeddings."""
        embed = self.vocab * self.hidden
        return embed + self.hidden + (0 if self.tied_embeddings else embed)

    def parameters(self) -> int:
        return self.layers * self.layer_parameters() + self.outer_parameters()

    def projection_shapes(self) -> dict[str, tuple[int, int]]:
        """(in, out) of each linear of a layer by its module name, what LoRA's target_modules select."""
        h, q, kv, i = self.hidden, self.heads * self.head_dim, self.kv_heads * self.head_dim, self.intermediate
        return {
            "q_proj": (h, q),
            "k_proj": (h, kv),
            "v_proj": (h, kv),
            "o_proj": (q, h),
            "gate_proj": (h, i),
            "up_proj": (h, i),
            "down_proj": (i, h),
        }


def read_architecture(name_or_path: str) -> tuple[Architecture | None, str]:
    """The architecture of a checkpoint named as model.name_or_path, offline, and where its numbers came from.

    (None, why) where no config.json can be read without a download.
    """
    from essaflow.model.gguf import converted_path, is_gguf_name
    from essaflow.model.tiny import builtin_path
    from essaflow.model.tiny_recipe import BUILTIN_MODELS

    if name_or_path in BUILTIN_MODELS:
        local = builtin_path(name_or_path)
    elif is_gguf_name(name_or_path):  # its config once dequantized (nothing converted here)
        try:
            local = converted_path(name_or_path, "float32")
        except ValueError as e:
            return None, str(e)
    else:
        local = Path(name_or_path).expanduser()
    source: Path | None = local / "config.json" if (local / "config.json").is_file() else _hub_cache(name_or_path)
    if source is not None:
        return Architecture.from_config(json.loads(source.read_text())), str(source)
    if name_or_path in KNOWN_CONFIGS:
        return Architecture.from_config(KNOWN_CONFIGS[name_or_path]), f"{name_or_path}'s published config.json"
    return None, f"no config.json of {name_or_path} on this machine"


def _hub_cache(name: str) -> Path | None:
    """config.json of a hub id already in the local Hugging Face cache (nothing is downloaded)."""
    if name.startswith(("s3://", "/", ".", "~")):
        return None
    try:
        from huggingface_hub import try_to_load_from_cache

        found = try_to_load_from_cache(name, "config.json")
    except Exception:  # an id the hub library rejects is simply not cached
        return None
    return Path(found) if isinstance(found, str) else None
