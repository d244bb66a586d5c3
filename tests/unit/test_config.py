"""Configs reject bad values before any compute, naming the field."""

from pathlib import Path

import pytest

from essaflow.config import ConfigError, PipelineConfig, load_config

CONFIGS = Path(__file__).resolve().parents[2] / "configs"


@pytest.mark.parametrize(
    "override,field",
    [
        ("eval.ks=[1,32]", "eval"),
        ("essa.population=1", "essa.population"),
        ("grpo.gamma=-0.5", "grpo.gamma"),
        ("eval.reward=nonsense", "eval.reward"),
        ("grpo.loss=ppo2", "grpo.loss"),
        ("essa.populaton=48", "essa.populaton"),
        ("data.synthetic.min_digits=4", "data.synthetic"),
        ("essa.worker_cpus=1.5", "essa.worker_cpus"),
        ("essa.worker_gpus=2.5", "essa.worker_gpus"),
        ("grpo.worker_cpus=0", "grpo.worker_cpus"),
        ("essa.placement_strategy=RANDOM", "essa.placement_strategy"),
        ("grpo.max_failures=-2", "grpo.max_failures"),
        ("model.device=tpu", "model.device"),
    ],
)
def test_bad_values_name_the_field(override, field):
    with pytest.raises(ConfigError) as err:
        load_config(None, [override])
    assert field in str(err.value)


def test_unknown_key_is_called_unknown():
    with pytest.raises(ConfigError, match="essa.populaton: unknown key"):
        load_config(None, ["essa.populaton=48"])


def test_dotted_overrides_parse_yaml_values():
    cfg = load_config(None, ["essa.population=48", "model.target_modules=[q_proj]", "grpo.loss=dapo"])
    assert cfg.essa.population == 48 and cfg.model.target_modules == ["q_proj"] and cfg.grpo.loss == "dapo"


def test_every_preset_loads():
    presets = sorted(CONFIGS.glob("*.yaml"))
    assert presets, "configs/ holds presets"
    for preset in presets:
        assert isinstance(load_config(preset), PipelineConfig)


def test_every_field_is_documented():
    def walk(model):
        for name, info in model.model_fields.items():
            assert info.description, f"{model.__name__}.{name} has no docstring"
            ann = info.annotation
            if isinstance(ann, type) and hasattr(ann, "model_fields"):
                walk(ann)

    walk(PipelineConfig)


def test_cluster_settings_parse():
    cfg = load_config(None, ["ray_address=10.0.0.5:6379", "essa.worker_gpus=0.25", "grpo.placement_strategy=SPREAD"])
    assert cfg.ray_address == "10.0.0.5:6379" and cfg.essa.worker_gpus == 0.25
    assert cfg.grpo.placement_strategy == "SPREAD" and cfg.grpo.max_failures == 2
    assert PipelineConfig().essa.worker_gpus is None  # auto: whole GPUs when the cluster has them
