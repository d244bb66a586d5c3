"""The training methods as registered objects: what each states, and that the pipeline config and they agree."""

from __future__ import annotations

from pathlib import Path
from typing import get_args

import pytest

from essaflow.config import PipelineConfig, load_config
from essaflow.methods import ESSA, FGRPO, METHODS, SFT_ONLY, TrainedMethodName, method_of, other_methods
from essaflow.registry import UnknownName

CONFIGS = Path(__file__).resolve().parents[3] / "configs"


def _cfg(*overrides: str):
    return load_config(None, list(overrides))


def test_every_method_the_config_accepts_is_registered_and_its_section_is_a_config_section():
    assert get_args(PipelineConfig.model_fields["method"].annotation) == tuple(METHODS)
    assert get_args(TrainedMethodName) == ("essa", "fgrpo")
    for name in METHODS:
        method = METHODS.get(name)
        assert method.name == name and (CONFIGS / method.preset).is_file()
        if method.trains:  # the section's config names the method back (PipelineConfig.trained_section)
            section = PipelineConfig.model_fields[method.section].annotation
            assert name == section.METHOD
    with pytest.raises(UnknownName, match="unknown method 'ppo'; known: \\['essa', 'fgrpo', 'none'\\]"):
        METHODS.get("ppo")


def test_each_method_reads_its_own_section_and_leaves_the_others():
    assert [m.section for m in (ESSA, FGRPO, SFT_ONLY)] == ["essa", "grpo", None]
    assert other_methods(ESSA) == [FGRPO] and other_methods(FGRPO) == [ESSA]
    assert other_methods(SFT_ONLY) == [ESSA, FGRPO]
    assert [m.command for m in (ESSA, FGRPO, SFT_ONLY)] == ["essa", "grpo", None]
    with pytest.raises(ValueError, match="method 'none' has no trainer"):
        SFT_ONLY.trainer()


@pytest.mark.parametrize(
    ("overrides", "label"),
    [
        (["method=essa", "essa.strategy=cma", "essa.fitness=accuracy"], "ESSA(cma, accuracy)"),
        (["method=fgrpo", "grpo.gamma=0"], "GRPO"),
        (["method=fgrpo", "grpo.gamma=0.5"], "F-GRPO(gamma=0.5)"),
        (["method=fgrpo", "grpo.loss=dapo"], "F-DAPO(gamma=1)"),
        (["method=none"], "SFT only"),
    ],
)
def test_the_label_names_the_variant(overrides, label):
    c = _cfg(*overrides)
    assert method_of(c).label(c) == label


def test_what_each_method_asks_of_the_cluster_and_plans():
    essa, grpo, none = _cfg("method=essa"), _cfg("method=fgrpo"), _cfg("method=none")
    assert essa.cluster_request().workers == 1 and grpo.cluster_request() is None and none.cluster_request() is None
    assert [method_of(c).planned_steps(c) for c in (essa, grpo, none)] == [60, 200, 0]
    assert ESSA.params(essa) == {"essa.fitness_kind": "black-box reward"} and FGRPO.params(grpo) == {}
    assert FGRPO.devices(grpo) == [("grpo.device", "auto")] and ESSA.devices(essa) == []
    assert FGRPO.allreduce_bytes(_cfg("method=fgrpo", "grpo.mini_batches=2", "grpo.prompts_per_step=2"), 10) == 20
    assert ESSA.allreduce_bytes(essa, 10) == 0.0
    assert ESSA.projection_settings(essa) == {"workers": 1, "population": 32, "minibatch": 128}


def test_the_progress_line_shows_each_methods_own_figures():
    row = {"fitness_mean": 0.5, "fitness_max": 0.75, "tie_share": 0.25, "sigma": 0.1}
    assert ESSA.progress(row) == "fitness 0.500/0.750 ties 0.25 sigma 0.1"
    grpo_row = {"reward_mean": 0.5, "zero_variance_share": 0.25, "focal_mean_active": 0.75, "step_s": 1.5}
    assert FGRPO.progress(grpo_row) == "reward 0.500 zero-var 0.25 focal 0.75 1.50s/step"
    assert ESSA.progress(grpo_row) == FGRPO.progress(row) == SFT_ONLY.progress(row) == ""
