"""Tokenizer and model save/reload offline bit-exact; LoRA adapter round trip; tiny-model build is cached."""

import torch
from transformers import AutoModelForCausalLM, AutoTokenizer

from essaflow.config import ModelConfig
from essaflow.model.loading import (
    attach_lora,
    load_adapter,
    load_base_model,
    load_tokenizer,
    save_adapter,
    save_adapter_atomic,
)
from essaflow.model.tiny import TinyRecipe, build_char_tokenizer, tiny_base_path
from essaflow.storage.atomic_dir import committed_manifest
from essaflow.storage.manifest import MANIFEST


def test_char_tokenizer_round_trip(tmp_path):
    tok = build_char_tokenizer()
    ids = tok("123+45=", add_special_tokens=False)["input_ids"]
    assert len(ids) == 7 and tok.decode(ids) == "123+45="
    tok.save_pretrained(tmp_path)
    again = AutoTokenizer.from_pretrained(tmp_path)
    assert (
        again("987-6=", add_special_tokens=False)["input_ids"] == tok("987-6=", add_special_tokens=False)["input_ids"]
    )
    assert again.eos_token_id == tok.eos_token_id and again.pad_token_id == tok.pad_token_id


def test_model_save_reload_bit_exact(tmp_path):
    cfg = ModelConfig()
    model, tok = load_base_model(cfg), load_tokenizer(cfg)
    model.save_pretrained(tmp_path, safe_serialization=True)
    tok.save_pretrained(tmp_path)
    again = AutoModelForCausalLM.from_pretrained(tmp_path)
    batch = tok(["12+3=", "45-67="], return_tensors="pt", padding=True, add_special_tokens=False)
    with torch.no_grad():
        assert torch.equal(model(**batch).logits, again(**batch).logits)
    assert not list(tmp_path.glob("*.bin")) and not list(tmp_path.glob("*.pkl")), "safetensors only"


def test_lora_adapter_round_trip(tmp_path):
    cfg = ModelConfig(lora_rank=4)
    tok = load_tokenizer(cfg)
    model = attach_lora(load_base_model(cfg), cfg)
    with torch.no_grad():  # make B non-zero so the adapter actually changes outputs
        for name, p in model.named_parameters():
            if "lora_B" in name:
                p.normal_(0, 0.05)
    save_adapter(model, tmp_path / "adapter", tok)
    assert (tmp_path / "adapter" / "adapter_model.safetensors").exists()
    reloaded = load_adapter(load_base_model(cfg), tmp_path / "adapter")
    plain = load_base_model(cfg)
    batch = tok(["12+3="], return_tensors="pt", add_special_tokens=False)
    with torch.no_grad():
        a, b, base = model(**batch).logits, reloaded(**batch).logits, plain(**batch).logits
    assert torch.equal(a, b)
    assert not torch.allclose(a, base), "the adapter changes the model"


def test_save_adapter_atomic_replaces_a_complete_adapter_only_once_the_new_one_is_in(tmp_path):
    cfg = ModelConfig(lora_rank=4)
    tok = load_tokenizer(cfg)
    model = attach_lora(load_base_model(cfg), cfg)
    dest = save_adapter_atomic(model, tmp_path / "adapter", tok)
    first = committed_manifest(dest)
    assert {"adapter_model.safetensors", "adapter_config.json"} <= set(first["files"])
    with torch.no_grad():
        next(p for n, p in model.named_parameters() if "lora_B" in n).add_(1.0)
    save_adapter_atomic(model, dest, tok)
    second = committed_manifest(dest)
    assert second["files"]["adapter_model.safetensors"] != first["files"]["adapter_model.safetensors"]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["adapter"]  # no temp or old copy left


def test_tiny_build_is_cached_by_recipe_hash(tmp_path, monkeypatch):
    monkeypatch.setenv("ESSAFLOW_CACHE_DIR", str(tmp_path))
    recipe = TinyRecipe(pretrain_steps=3, batch_size=8, num_layers=1, hidden_size=32, intermediate_size=64)
    first = tiny_base_path(recipe)
    assert first.name == f"tiny-base-{recipe.digest()}"
    stamp = (first / "model.safetensors").stat().st_mtime_ns
    assert tiny_base_path(recipe) == first
    assert (first / "model.safetensors").stat().st_mtime_ns == stamp, "second call reuses the build"
    assert "model.safetensors" in committed_manifest(first)["files"]  # built atomically, manifest last
    (first / MANIFEST).unlink()  # a build without its manifest is incomplete: rebuilt
    assert "model.safetensors" in committed_manifest(tiny_base_path(recipe))["files"]
    assert AutoModelForCausalLM.from_pretrained(first).config.num_hidden_layers == 1
