"""The adapters vLLM is sent (ESSA candidates, GRPO's LoRA sync): rank padded to a served value, same function."""

import json

import pytest
import torch
from safetensors.torch import load_file

from essaflow.config import ModelConfig
from essaflow.generation.vllm_engine import lora_factors, served_lora_rank, write_lora_adapter
from essaflow.model.loading import attach_lora, load_base_model


def test_served_rank_is_the_next_one_vllm_serves():
    assert [served_lora_rank(r) for r in (1, 2, 8, 9, 33, 320)] == [1, 8, 8, 16, 64, 320]
    with pytest.raises(ValueError, match="exceeds vLLM's largest served rank 512"):
        served_lora_rank(513)


def test_a_rank_2_adapter_is_padded_to_8_with_the_same_delta(tmp_path):
    cfg = ModelConfig(lora_rank=2, lora_alpha=16, target_modules=["q_proj", "down_proj"])
    model = attach_lora(load_base_model(cfg), cfg)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if "lora_B" in name:
                p.normal_(0.0, 0.1)
    out = write_lora_adapter(model, tmp_path / "adapter")
    config = json.loads((out / "adapter_config.json").read_text())
    assert config["r"] == config["lora_alpha"] == 8 and set(config["target_modules"]) == {"q_proj", "down_proj"}
    tensors = load_file(str(out / "adapter_model.safetensors"))
    factors = lora_factors(model)
    assert len(tensors) == 2 * len(factors) == 2 * 2 * model.config.num_hidden_layers
    for name, (a, b, scaling) in factors.items():
        pa, pb = tensors[f"{name}.lora_A.weight"], tensors[f"{name}.lora_B.weight"]
        assert pa.shape == (8, a.shape[1]) and pb.shape == (b.shape[0], 8)
        assert scaling == 16 / 2
        torch.testing.assert_close(pb @ pa, scaling * b @ a)  # vLLM's scaling is lora_alpha / r = 1
