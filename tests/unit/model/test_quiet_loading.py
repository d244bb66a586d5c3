"""A quiet terminal (issue 43, item 8): loading a model draws no "Loading weights" bar (other transformers bars stay),
and saving an adapter whose base moved says nothing and writes what it always wrote."""

import warnings

import pytest
from transformers import AutoModelForCausalLM
from transformers.utils import logging as hf_logging

from essaflow.config import ModelConfig
from essaflow.model.loading import attach_lora, load_base_model, resolve_model_path, save_adapter


def test_loading_a_model_draws_no_weight_bar_and_other_bars_stay(capfd):
    if not hf_logging.is_progress_bar_enabled():
        pytest.skip("transformers' bars are off in this environment (HF_HUB_DISABLE_PROGRESS_BARS)")
    load_base_model(ModelConfig(name_or_path="builtin:tiny"))
    AutoModelForCausalLM.from_pretrained(resolve_model_path("builtin:tiny"))  # loaded directly (judging/, grpo/)
    assert "Loading weights" not in capfd.readouterr().err
    assert list(hf_logging.tqdm(range(3), desc="Downloading")) == [0, 1, 2]
    assert list(hf_logging.tqdm(range(3), desc="Loading weights")) == [0, 1, 2]  # still iterates, silently
    err = capfd.readouterr().err
    assert "Downloading" in err and "Loading weights" not in err


def test_an_adapter_whose_base_path_is_gone_saves_silently_and_the_same_bytes(tmp_path):
    cfg = ModelConfig(name_or_path="builtin:tiny")
    model = attach_lora(load_base_model(cfg), cfg)
    model.save_pretrained(tmp_path / "peft", safe_serialization=True)  # peft's own "auto", the base where it was
    model.peft_config["default"].base_model_name_or_path = str(tmp_path / "moved-away")  # a cache from elsewhere
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # peft: "Could not find a config file in ... will assume ..."
        save_adapter(model, tmp_path / "ours")
    weights = "adapter_model.safetensors"
    assert (tmp_path / "ours" / weights).read_bytes() == (tmp_path / "peft" / weights).read_bytes()
