"""The GPU paths' CPU-visible logic: device and backend choice, the merged checkpoint vLLM serves, bf16 models.

The GPU itself is exercised by bench/gpu_check.py on a GPU; here nothing needs CUDA.
"""

from __future__ import annotations

import sys
import types

import pytest
import torch
from transformers import AutoModelForCausalLM

from essaflow.config import ConfigError, EvalConfig, ModelConfig, PipelineConfig, SamplingConfig, SFTConfig
from essaflow.data.synthetic import synthetic_problems
from essaflow.generation.sampling import resolve_backend, vllm_available
from essaflow.judging.model_eval import evaluate_adapter, evaluate_output
from essaflow.model.devices import resolve_device
from essaflow.model.loading import (
    attach_lora,
    export_merged,
    load_base_model,
    load_model_with_adapter,
    load_tokenizer,
    save_adapter,
)
from essaflow.training.sft import train_sft

needs_no_gpu = pytest.mark.skipif(torch.cuda.is_available(), reason="checks the behaviour without a GPU")


def test_with_a_gpu_visible_auto_picks_the_current_cuda_device_and_vllm(monkeypatch):
    """The choice a worker holding a GPU share makes, on this CPU: torch reports CUDA, device 1 current."""
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "current_device", lambda: 1)
    assert resolve_device("auto") == torch.device("cuda", 1) == resolve_device("cuda", field="grpo.device")
    assert resolve_device("cpu") == torch.device("cpu")  # asked for, the CPU even beside a GPU
    monkeypatch.setitem(sys.modules, "vllm", types.ModuleType("vllm"))  # the vllm extra installed
    assert vllm_available() and resolve_backend("auto") == "vllm" == resolve_backend("vllm")
    assert resolve_backend("transformers") == "transformers"
    monkeypatch.setitem(sys.modules, "vllm", None)  # without the extra: auto falls back, vllm is refused
    assert not vllm_available() and resolve_backend("auto") == "transformers"
    with pytest.raises(ConfigError, match=r"needs the vllm extra .*CUDA: True"):
        resolve_backend("vllm")


@pytest.mark.parametrize("evaluate", ["adapter", "full checkpoint"])
def test_evaluating_with_vllm_where_it_is_not_installed_names_the_extra_before_loading(evaluate, monkeypatch, tmp_path):
    monkeypatch.setitem(sys.modules, "vllm", None)  # `import vllm` fails, as without the extra
    model = ModelConfig(name_or_path=str(tmp_path / "no-such-model"))  # never read: the error comes first
    args = ([], EvalConfig(), SamplingConfig(backend="vllm"))
    with pytest.raises(ConfigError) as err:
        if evaluate == "adapter":
            evaluate_adapter(model, None, *args)
        else:
            evaluate_output(model, tmp_path / "no-such-checkpoint", "full", *args)
    msg = str(err.value)
    assert "sampling.backend=vllm needs the vllm extra (pip install 'essaflow[vllm]')" in msg, msg
    assert "vllm imports: False" in msg, msg


@needs_no_gpu
def test_device_choice_without_a_gpu():
    assert resolve_device("auto") == torch.device("cpu") == resolve_device("cpu")
    with pytest.raises(ConfigError, match="model.device=cuda, but torch sees no CUDA device"):
        resolve_device("cuda")
    with pytest.raises(ConfigError, match="grpo.device=cuda"):  # the error names the setting it came from
        resolve_device("cuda", field="grpo.device")
    with pytest.raises(ConfigError, match="model.device=cuda"):  # before any weights are read
        load_base_model(ModelConfig(device="cuda"))


@needs_no_gpu
def test_backend_choice_without_a_gpu(monkeypatch):
    assert not vllm_available()  # auto never picks vllm on CPU, even where the CPU build is installed
    monkeypatch.setitem(sys.modules, "vllm", None)  # `import vllm` fails, as without the extra
    assert resolve_backend("auto") == "transformers" == resolve_backend("transformers")
    with pytest.raises(ConfigError, match=r"sampling.backend=vllm needs the vllm extra .*CUDA: False"):
        resolve_backend("vllm")


def test_merged_export_is_the_adapted_model_in_plain_weights(tmp_path):
    """What vLLM loads: a plain checkpoint whose logits equal base + LoRA (up to float rounding)."""
    cfg = ModelConfig(lora_rank=4)
    model = attach_lora(load_base_model(cfg), cfg)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if "lora_B" in name:
                p.normal_(0, 0.05)
    save_adapter(model, tmp_path / "adapter", load_tokenizer(cfg))
    merged_dir = export_merged(cfg, tmp_path / "adapter", tmp_path / "merged")

    assert (merged_dir / "model.safetensors").exists() and (merged_dir / "tokenizer.json").exists()
    assert not list(merged_dir.glob("adapter_*")), "no LoRA left: a plain model"
    merged = AutoModelForCausalLM.from_pretrained(merged_dir)
    peft_model, tok = load_model_with_adapter(cfg, tmp_path / "adapter")
    batch = tok(["12+3=", "45-67="], return_tensors="pt", padding=True, add_special_tokens=False)
    with torch.no_grad():
        want, got = peft_model(**batch).logits, merged(**batch).logits
    assert torch.allclose(want, got, atol=1e-4), float((want - got).abs().max())
    plain = load_base_model(cfg)
    with torch.no_grad():
        assert not torch.allclose(plain(**batch).logits, got, atol=1e-3), "the merge changed the weights"


def test_bf16_lora_sft_learns_with_fp32_adapter_weights():
    """model.dtype=bfloat16 (the GPU setting) on CPU: LoRA weights stay float32 over the bf16 base, loss falls."""
    cfg = PipelineConfig.model_validate({"model": {"dtype": "bfloat16"}})
    model = attach_lora(load_base_model(cfg.model), cfg.model)
    tok = load_tokenizer(cfg.model)
    assert {p.dtype for n, p in model.named_parameters() if "lora_" in n} == {torch.float32}
    assert {p.dtype for n, p in model.named_parameters() if "lora_" not in n} == {torch.bfloat16}
    problems = synthetic_problems(200, seed=0)
    result = train_sft(model, tok, problems, SFTConfig(steps=30, batch_size=32, lr=3e-3))
    first, last = sum(result.losses[:5]) / 5, sum(result.losses[-5:]) / 5
    assert last < 0.9 * first, (first, last)
