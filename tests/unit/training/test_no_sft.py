"""sft.enabled: false (or sft.steps: 0): RL starts from the checkpoint itself; ESSA, which needs a trained adapter,
refuses it."""

from __future__ import annotations

import pytest
import torch

from essaflow.config import PipelineConfig, load_config
from essaflow.config_base import StrictConfig  # noqa: F401 - the config module is importable alone
from essaflow.data.schema import Problem


def _problems(n: int) -> list[Problem]:
    return [Problem(id=str(i), prompt=f"{i}+1=", answer=str(i + 1)) for i in range(n)]


@pytest.mark.parametrize("off", [["sft.enabled=false"], ["sft.steps=0"]])
def test_fgrpo_full_without_sft_trains_the_base_bit_for_bit(tmp_path, off):
    from essaflow.grpo.learner import build_policy
    from essaflow.model.loading import load_base_model
    from essaflow.training.warm_start import train_sft_adapter

    cfg = load_config(None, ["method=fgrpo", "grpo.parameters=full", "model.device=cpu", *off])
    assert not cfg.sft.trains
    start = train_sft_adapter(cfg.model, cfg.sft, [], tmp_path / "start")  # no SFT data needed
    policy = build_policy(cfg, start, None, torch.device("cpu")).state_dict()
    base = load_base_model(cfg.model).state_dict()
    assert policy.keys() == base.keys()
    assert [k for k in base if not torch.equal(policy[k], base[k])] == []
    assert all(p.requires_grad for p in build_policy(cfg, start, None, torch.device("cpu")).parameters())


def test_fgrpo_lora_without_sft_starts_from_an_untrained_adapter(tmp_path):
    from essaflow.grpo.learner import build_policy
    from essaflow.training.warm_start import train_sft_adapter

    cfg = load_config(None, ["method=fgrpo", "grpo.parameters=lora", "model.device=cpu", "sft.enabled=false"])
    start = train_sft_adapter(cfg.model, cfg.sft, [], tmp_path / "start")
    policy = build_policy(cfg, start, None, torch.device("cpu"))
    b = [p for n, p in policy.named_parameters() if "lora_B" in n]
    assert b and all(p.requires_grad and torch.count_nonzero(p) == 0 for p in b)


def test_an_untrained_start_is_keyed_by_its_init_alone():
    from essaflow.training.warm_start import sft_key

    a = load_config(None, ["sft.enabled=false", "method=fgrpo"])
    b = load_config(None, ["sft.enabled=false", "method=fgrpo", "sft.lr=0.1", "sft.steps=7"])
    trained = load_config(None, ["method=fgrpo"])
    assert sft_key(a.model, a.sft, _problems(3)) == sft_key(b.model, b.sft, _problems(5))
    assert sft_key(a.model, a.sft, _problems(3)) != sft_key(trained.model, trained.sft, _problems(3))


@pytest.mark.parametrize("off", ["sft.enabled=false", "sft.steps=0"])
def test_essa_without_sft_is_refused_with_the_reason(off):
    with pytest.raises(ValueError, match="ESSA searches the singular values of a trained LoRA adapter"):
        load_config(None, ["method=essa", off])
    given = PipelineConfig(method="essa", sft={"enabled": False}, adapter_uri="file:///adapters/mine")
    assert given.adapter_uri  # a given adapter is a trained start
