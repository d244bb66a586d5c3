"""A quantised frozen base (model.quantization, ESSA-v3 sec. 4.4.2): int8 scoring matches float32 within 1 point on
the tiny task, only the base is quantised, the LoRA factors stay float32 and searchable, bad settings fail early."""

import dataclasses
import logging

import numpy as np
import pytest
import torch

from essaflow.config import ConfigError, load_config
from essaflow.data.prepare import prepare_splits
from essaflow.essa.scorer import CandidateScorer
from essaflow.essa.scoring_spec import scoring_spec, with_problems
from essaflow.model.config import ModelConfig
from essaflow.model.loading import load_model_with_adapter
from essaflow.model.quantization import is_quantized
from essaflow.training.warm_start import cached_sft_adapter


@pytest.fixture(scope="module")
def tiny_sft():
    """builtin:tiny with a short SFT warm start (cached by hash in the session cache), the eval split as prompts.

    1024 held-out problems: a point is 10 answers, so the bound is not at the mercy of two or three flips."""
    sets = ["sft.steps=120", "data.eval_size=1024", "data.eval_fraction=0.2", "sampling.max_new_tokens=6"]
    cfg = load_config(None, sets)
    splits = prepare_splits(cfg.data)
    adapter = cached_sft_adapter(cfg.model, cfg.sft, splits, cfg.data.prompt_format())
    spec = with_problems(
        scoring_spec(cfg, splits, adapter, ship_adapter=False),
        splits.eval,
        fitness="accuracy",
        temperature=0.0,
    )
    return cfg, spec


def _int8(spec):
    return dataclasses.replace(spec, model={**spec.model, "quantization": "int8"})


def test_int8_scoring_is_within_one_point_of_float32(tiny_sft):
    _, spec = tiny_sft
    full, int8 = CandidateScorer(spec), CandidateScorer(_int8(spec))
    idx = np.arange(len(spec.prompts))
    dim = full.ready()[0]
    candidates = [np.zeros(dim, np.float32), *np.random.default_rng(0).normal(0, 0.05, (2, dim)).astype(np.float32)]
    for x in candidates:  # the SFT point and two candidates around it
        a, b = full.score(0, x, idx, 0)[1], int8.score(0, x, idx, 0)[1]
        assert 0.2 < a < 0.95, "a meaningful mix of right and wrong answers"
        assert abs(a - b) <= 0.01, f"float32 {a:.4f} vs int8 {b:.4f}"


def test_only_the_base_is_quantised_and_the_lora_factors_stay_float32(tiny_sft, caplog):
    _, spec = tiny_sft
    with caplog.at_level(logging.INFO, logger="essaflow"):
        scorer = CandidateScorer(_int8(spec))
    assert not scorer.scoring.merged and "essa.merged_scoring ignored" in caplog.text, "int8 scores on the LoRA path"
    model = scorer.generator.model
    bases = [m.base_layer for m, _ in scorer.svd.modules()]
    assert bases and all(is_quantized(b.weight) for b in bases)
    assert type(bases[0].weight).__name__ == "Int8Tensor"
    factors = [p for n, p in model.named_parameters() if "lora_" in n]
    assert factors and all(type(p) is torch.nn.Parameter and p.dtype == torch.float32 for p in factors)
    assert not is_quantized(model.get_output_embeddings().weight), "lm_head (tied to the embeddings) kept"


def test_offsets_still_move_the_quantised_model(tiny_sft):
    _, spec = tiny_sft
    scorer = CandidateScorer(dataclasses.replace(_int8(spec), fitness="answer_logprob"))
    idx = np.arange(64)
    zero = np.zeros(scorer.ready()[0], np.float32)
    at_sft = scorer.score(0, zero, idx, 0)[1]
    moved = scorer.score(0, np.random.default_rng(1).normal(0, 0.3, zero.shape).astype(np.float32), idx, 0)[1]
    assert moved != pytest.approx(at_sft, abs=1e-4), "ESSA's offsets change what the int8 model computes"
    assert scorer.score(0, zero, idx, 0)[1] == at_sft, "offsets 0 restore the SFT point exactly"


def test_evaluation_loads_a_quantised_base_and_export_does_not(tiny_sft):
    cfg, _ = tiny_sft  # the default target modules: Q/K/V/O adapted, the MLP linears plain frozen layers
    int8 = cfg.model.model_copy(update={"quantization": "int8"})
    layer = load_model_with_adapter(int8, None)[0].base_model.model.model.layers[0]
    assert is_quantized(layer.self_attn.q_proj.base_layer.weight) and is_quantized(layer.mlp.down_proj.weight)
    plain = load_model_with_adapter(int8, None, quantize=False)[0].base_model.model.model.layers[0]
    assert not is_quantized(plain.self_attn.q_proj.base_layer.weight), "export_merged's full-precision load"


@pytest.mark.parametrize(
    "overrides",
    [
        ["model.quantization=int4", "model.device=cpu", "model.dtype=bfloat16"],  # no int4 kernel on CPU
        ["model.quantization=int4"],  # float32: tinygemm needs bfloat16
        ["model.quantization=int2"],
    ],
)
def test_a_setting_without_a_kernel_is_a_config_error_naming_the_field(overrides):
    with pytest.raises(ConfigError, match=r"model\.quantization"):
        load_config(None, overrides)


@pytest.mark.skipif(torch.cuda.is_available(), reason="int4 has a kernel on CUDA")
def test_int4_on_auto_without_a_gpu_fails_at_load_before_any_weight_is_read(monkeypatch):
    cfg = ModelConfig(quantization="int4", dtype="bfloat16")  # auto: known only where the model loads
    monkeypatch.setattr("essaflow.model.loading.load_base_model", lambda *_: pytest.fail("weights read"))
    with pytest.raises(ConfigError, match=r"model\.quantization=int4 on cpu"):
        load_model_with_adapter(cfg, None)
