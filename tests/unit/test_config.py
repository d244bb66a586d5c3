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
        ("essa.workers.cpus=1.5", "essa.workers.cpus"),
        ("essa.workers.gpus=2.5", "essa.workers.gpus"),
        ("grpo.workers.cpus=0", "grpo.workers.cpus"),
        ("essa.workers.placement_strategy=RANDOM", "essa.workers.placement_strategy"),
        ("grpo.workers.max_restarts=-2", "grpo.workers.max_restarts"),
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
    from essaflow.compare import CompareConfig, load_compare_config

    presets = sorted(CONFIGS.glob("*.yaml"))
    assert presets, "configs/ holds presets"
    for preset in presets:
        if preset.name.startswith("compare-"):  # a comparison: a task and its methods (docs/compare.md)
            assert isinstance(load_compare_config(preset), CompareConfig)
        else:
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
    overrides = ["ray_address=10.0.0.5:6379", "essa.workers.gpus=0.25", "grpo.workers.placement_strategy=SPREAD"]
    cfg = load_config(None, overrides)
    assert cfg.ray_address == "10.0.0.5:6379" and cfg.essa.workers.gpus == 0.25
    assert cfg.grpo.workers.placement_strategy == "SPREAD" and cfg.grpo.workers.max_restarts == 2
    assert PipelineConfig().essa.workers.gpus is None  # auto: whole GPUs when the cluster has them


def test_old_worker_keys_still_load_with_one_deprecation_line_each(caplog):
    old = ["essa.workers=3", "essa.worker_cpus=0.5", "grpo.max_failures=5", "grpo.placement_strategy=SPREAD"]
    with caplog.at_level("WARNING", logger="essaflow.config"):
        cfg = load_config(None, old)
    assert (cfg.essa.workers.count, cfg.essa.workers.cpus) == (3, 0.5)
    assert (cfg.grpo.workers.max_restarts, cfg.grpo.workers.placement_strategy) == (5, "SPREAD")
    lines = [r.getMessage() for r in caplog.records]
    assert "config: essa.worker_cpus is deprecated, write essa.workers.cpus" in lines and len(lines) == 4
    with pytest.raises(ConfigError, match="essa.worker_cpus and essa.workers.cpus both given"):
        load_config(None, ["essa.worker_cpus=0.5", "essa.workers.cpus=1"])


def test_each_method_keeps_its_own_worker_defaults():
    cfg = load_config(None, ["essa.workers.count=2", "grpo.workers.count=2"])
    assert cfg.essa.workers.placement_strategy == "SPREAD" and cfg.essa.workers.max_restarts == 3
    assert cfg.grpo.workers.placement_strategy == "PACK" and cfg.grpo.workers.max_restarts == 2
    with pytest.raises(ConfigError, match="grpo.*workers.gpus"):
        load_config(None, ["grpo.workers.gpus=1"])


def test_trajectory_marks_select_what_a_resume_depends_on():
    from essaflow.config import method_trajectory

    essa = method_trajectory(load_config(None, ["method=essa"]))
    assert {"essa.sigma0", "essa.seed", "essa.fitness", "sampling.max_new_tokens", "eval.reward"} <= set(essa)
    assert not {"essa.generations", "essa.workers.count", "essa.eval_every", "essa.sync"} & set(essa)
    assert not any(k.startswith("grpo.") for k in essa)
    grpo = method_trajectory(load_config(None, ["method=fgrpo"]))
    assert {"grpo.gamma", "grpo.lr", "grpo.loss", "grpo.seed"} <= set(grpo)
    assert not {"grpo.steps", "grpo.workers.count", "grpo.checkpoint_every"} & set(grpo)
