"""SVD-LoRA: the dimension formula, the floor(alpha*r)=0 guard, apply(0) exactness, the rebuild math, export."""

import warnings

import numpy as np
import pytest
import torch
from peft import PeftModel
from transformers import AutoModelForCausalLM

from essaflow.essa.svd_lora import SVDLoRA, trainable_per_factor
from essaflow.model.loading import load_model_with_adapter
from tests.support.essa_tiny import make_tiny


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    return make_tiny(tmp_path_factory.mktemp("essa-svd"))


def _logits(model, tok):
    batch = tok(["12+3=", "45-67=", "8+9="], return_tensors="pt", padding=True, add_special_tokens=False)
    with torch.no_grad():
        return model(**batch).logits


@pytest.mark.parametrize(
    ("alpha", "rank", "k"), [(1.0, 8, 8), (0.5, 8, 4), (0.3, 8, 2), (0.1, 32, 3), (0.29, 100, 29), (0.125, 8, 1)]
)
def test_trainable_per_factor_is_floor_alpha_r(alpha, rank, k):
    assert trainable_per_factor(alpha, rank) == k


def test_floor_zero_is_rejected_naming_alpha_and_rank():
    with pytest.raises(ValueError, match=r"alpha=0\.1.*r=8"):
        trainable_per_factor(0.1, 8)  # ESSA-v3 Fig. 2: r=8, alpha=0.1 rounds down to zero


@pytest.mark.parametrize("alpha", [1.0, 0.5])
def test_dimension_is_matrices_x_2_x_floor_alpha_r(tiny, alpha):
    cfg, _, adapter = tiny
    model, _ = load_model_with_adapter(cfg.model, adapter)
    svd = SVDLoRA(model, alpha)
    matrices = 2 * 7  # 2 layers x 7 linear types
    assert svd.num_matrices == matrices
    assert svd.dimension == matrices * 2 * int(alpha * cfg.model.lora_rank)
    # one contiguous slice per factor, A then B for every module, covering the vector exactly
    assert [s.start for s in svd.layout] == [i * int(alpha * 4) for i in range(2 * matrices)]
    assert svd.layout[-1].stop == svd.dimension
    assert [s.factor for s in svd.layout[:4]] == ["A", "B", "A", "B"]
    with pytest.raises(ValueError, match="alpha"):
        SVDLoRA(model, 0.2)  # floor(0.2 * 4) = 0


def test_apply_zeros_reproduces_sft_logits_exactly(tiny):
    cfg, _, adapter = tiny
    model, tok = load_model_with_adapter(cfg.model, adapter)
    sft = _logits(model, tok)
    svd = SVDLoRA(model, 1.0)
    svd.apply(np.random.default_rng(0).normal(0, 0.5, svd.dimension))
    assert not torch.allclose(_logits(model, tok), sft), "offsets change the model"
    svd.apply(np.zeros(svd.dimension))
    assert torch.equal(_logits(model, tok), sft)


def test_apply_rebuilds_u_diag_s_plus_delta_vt(tiny):
    cfg, _, adapter = tiny
    model, _ = load_model_with_adapter(cfg.model, adapter)
    svd = SVDLoRA(model, 0.5)  # top 2 of 4 singular values searched, the tail kept
    lora = {n: p for n, p in model.named_parameters() if "lora_" in n}
    before = {n: p.detach().double().clone() for n, p in lora.items()}
    delta = np.random.default_rng(1).normal(0, 0.2, svd.dimension)
    svd.apply(delta)
    name = next(n for n in lora if "layers.1.mlp.down_proj.lora_B" in n)
    part = next(s for s in svd.layout if s.module in name and s.factor == "B")
    u, s, vh = torch.linalg.svd(before[name], full_matrices=False)
    s_new = s.clone()
    s_new[:2] += torch.from_numpy(delta[part.start : part.stop])
    expected = u @ torch.diag(s_new) @ vh
    torch.testing.assert_close(lora[name].detach().double(), expected, atol=1e-6, rtol=1e-5)


def test_nonnegative_clamps_singular_values(tiny):
    cfg, _, adapter = tiny
    model, _ = load_model_with_adapter(cfg.model, adapter)
    svd = SVDLoRA(model, 1.0, nonnegative=True)
    svd.apply(np.full(svd.dimension, -100.0))  # every searched value clamps to 0: all factors vanish
    for name, p in model.named_parameters():
        if "lora_" in name:
            assert p.detach().abs().max() < 1e-5


def test_export_loads_with_plain_peft(tiny, tmp_path):
    cfg, _, adapter = tiny
    model, tok = load_model_with_adapter(cfg.model, adapter)
    svd = SVDLoRA(model, 1.0)
    offsets = np.random.default_rng(2).normal(0, 0.3, svd.dimension)
    out = svd.export_adapter(offsets, tmp_path / "adapter", tok)
    assert torch.equal(_logits(model, tok), _logits(load_model_with_adapter(cfg.model, adapter)[0], tok)), (
        "export leaves the model at the offsets it held"
    )
    svd.apply(offsets)
    tuned = _logits(model, tok)
    base = AutoModelForCausalLM.from_pretrained(cfg.model.name_or_path)
    plain = PeftModel.from_pretrained(base, str(out)).eval()  # peft only, no essaflow
    torch.testing.assert_close(_logits(plain, tok), tuned)
    assert (out / "adapter_model.safetensors").exists() and (out / "tokenizer.json").exists()


def test_export_says_nothing_when_the_base_its_adapter_names_is_gone(tiny, tmp_path):
    """An SFT adapter cached by another checkout names that checkout's base; peft looked for its config.json there
    and warned on every export (issue 43, item 8: model.loading.embedding_layers_to_save)."""
    cfg, _, adapter = tiny
    model, tok = load_model_with_adapter(cfg.model, adapter)
    svd = SVDLoRA(model, 1.0)
    model.peft_config[svd.adapter_name].base_model_name_or_path = str(tmp_path / "moved-away")
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        svd.export_adapter(np.zeros(svd.dimension), tmp_path / "adapter", tok)


def _anchor_values(svd: SVDLoRA) -> np.ndarray:
    """s0 in search-vector order, from the model itself: each LoRA factor's top singular values at the SFT point."""
    values = []
    for part in svd.layout:
        layer = svd.model.get_submodule(part.module)
        weight = (layer.lora_A if part.factor == "A" else layer.lora_B)[svd.adapter_name].weight
        values.append(torch.linalg.svdvals(weight.detach().double())[: part.stop - part.start].numpy())
    return np.concatenate(values)


def test_relative_offsets_scale_every_singular_value_by_one_plus_theta(tiny):
    cfg, _, adapter = tiny
    model, _ = load_model_with_adapter(cfg.model, adapter)
    additive, relative = SVDLoRA(model, 1.0), None
    s0 = _anchor_values(additive)  # the values the relative offsets scale
    theta = np.random.RandomState(0).uniform(-0.5, 0.5, additive.dimension)
    additive.apply(s0 * theta)  # the same point written additively
    expect = {n: p.detach().clone() for n, p in model.named_parameters() if "lora_" in n}
    additive.apply(np.zeros(additive.dimension))
    relative = SVDLoRA(model, 1.0, offsets="relative")
    relative.apply(theta)
    for n, p in model.named_parameters():
        if "lora_" in n:
            assert torch.allclose(p, expect[n], atol=1e-6), n
    relative.apply(np.full(relative.dimension, -1.0))  # theta = -1 zeroes every searched value
    factors = [p for n, p in model.named_parameters() if "lora_" in n]  # alpha 1: every value is searched
    assert len(factors) == 2 * relative.num_matrices and all(float(p.abs().max()) < 1e-5 for p in factors)
