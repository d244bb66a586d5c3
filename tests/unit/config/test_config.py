"""Configs reject bad values before any compute, naming the field."""

import re
from pathlib import Path

import pytest
import yaml

from essaflow.config import ConfigError, PipelineConfig, load_config

CONFIGS = Path(__file__).resolve().parents[3] / "configs"


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


def _leaves(tree, path=()):
    """(dotted path, value) of every value a YAML file sets itself (its `extends` aside)."""
    if isinstance(tree, dict):
        for key, value in tree.items():
            if key != "extends":
                yield from _leaves(value, (*path, key))
    else:
        yield path, tree


def _at(tree, path):
    for key in path:
        tree = tree[key]
    return tree


def test_every_preset_loads_holding_every_value_its_file_sets():
    """Each value a preset writes reaches the loaded config unchanged (no key dropped, renamed or defaulted over),
    a preset that extends another keeps the rest of its base, and the config survives the JSON round trip Prefect
    and checkpoints make."""
    from essaflow.compare import load_compare_config

    presets = sorted(CONFIGS.glob("*.yaml"))
    assert len(presets) >= 7, "configs/ holds the tiny, paper and comparison presets"
    for preset in presets:
        raw = yaml.safe_load(preset.read_text())
        if preset.name.startswith("compare-"):  # a comparison: a task and its methods (docs/compare.md)
            cfg = load_compare_config(preset)
            raw["methods"] = [{"set": {}, **m} for m in raw["methods"]]  # `set` defaults to nothing
        else:
            cfg = load_config(preset)
            assert PipelineConfig.model_validate(cfg.model_dump(mode="json")) == cfg, preset.name
        loaded = cfg.model_dump(mode="json")
        own = dict(_leaves(raw))
        for path, value in own.items():
            assert _at(loaded, path) == value, f"{preset.name}: {'.'.join(path)}"
        if "extends" in raw:
            base_file = yaml.safe_load((CONFIGS / raw["extends"]).read_text())
            base = load_config(CONFIGS / raw["extends"]).model_dump(mode="json")
            for path, _ in _leaves(base_file):
                if not any(path[: len(mine)] == mine or mine[: len(path)] == path for mine in own):
                    assert _at(loaded, path) == _at(base, path), f"{preset.name} lost {'.'.join(path)} of its base"


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


def test_gone_keys_are_refused_naming_the_key_that_replaces_each():
    for given, said in (
        ("essa.workers=3", "essa: workers is gone: write essa.workers.count"),
        ("essa.worker_cpus=0.5", "essa: worker_cpus is gone: write essa.workers.cpus"),
        ("essa.backend=local", "essa: backend is gone: write essa.workers.ray (false: score in this process"),
        ("grpo.max_failures=5", "grpo: max_failures is gone: write grpo.workers.max_restarts"),
        ("grpo.placement_strategy=SPREAD", "grpo: placement_strategy is gone: write grpo.workers.placement_strategy"),
        ("grpo.ray_for_single_worker=true", "grpo: ray_for_single_worker is gone: write grpo.workers.ray (true: one"),
    ):
        with pytest.raises(ConfigError, match=re.escape(said)):
            load_config(None, [given])


def test_one_switch_says_whether_a_method_trains_on_ray_or_in_this_process():
    assert load_config(None, []).essa.on_ray and not load_config(None, ["essa.workers.ray=false"]).essa.on_ray
    grpo = [load_config(None, ["method=fgrpo", *o]).grpo for o in ([], ["grpo.workers.ray=true"])]
    assert [g.on_ray for g in grpo] == [False, True]  # one rank: in process unless asked for Ray
    two = ["method=fgrpo", "grpo.workers.count=2", "grpo.prompts_per_step=32"]
    assert load_config(None, two).grpo.on_ray
    with pytest.raises(ConfigError, match="workers.ray=false trains in this process, which holds one rank"):
        load_config(None, [*two, "grpo.workers.ray=false"])


def test_each_method_keeps_its_own_worker_defaults():
    cfg = load_config(None, ["essa.workers.count=2", "grpo.workers.count=2"])
    assert cfg.essa.workers.placement_strategy == "SPREAD" and cfg.essa.workers.max_restarts == 3
    assert cfg.grpo.workers.placement_strategy == "PACK" and cfg.grpo.workers.max_restarts == 2
    with pytest.raises(ConfigError, match="grpo.*workers.gpus"):
        load_config(None, ["grpo.workers.gpus=1"])


def test_trajectory_marks_select_what_a_resume_depends_on():
    from essaflow.methods import method_of

    def method_trajectory(cfg):
        return method_of(cfg).trajectory(cfg)

    essa = method_trajectory(load_config(None, ["method=essa"]))
    assert {"essa.sigma0", "essa.seed", "essa.fitness", "sampling.max_new_tokens", "eval.reward"} <= set(essa)
    assert not {"essa.generations", "essa.workers.count", "essa.eval_every", "essa.sync"} & set(essa)
    assert not any(k.startswith("grpo.") for k in essa)
    grpo = method_trajectory(load_config(None, ["method=fgrpo"]))
    assert {"grpo.gamma", "grpo.lr", "grpo.loss", "grpo.seed"} <= set(grpo)
    assert not {"grpo.steps", "grpo.workers.count", "grpo.checkpoint_every"} & set(grpo)


def _write(path: Path, text: str) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    return path


def test_extends_merges_the_base_under_the_preset_and_the_preset_wins(tmp_path):
    _write(tmp_path / "base.yaml", "name: base\nseed: 3\nessa: {population: 16, sigma0: 0.2}\neval: {ks: [1, 2]}\n")
    child = _write(tmp_path / "child.yaml", "extends: base.yaml\nessa: {population: 24}\neval: {ks: [1]}\n")
    cfg = load_config(child)
    assert (cfg.name, cfg.seed) == ("base", 3)  # the base's keys the preset leaves alone
    assert (cfg.essa.population, cfg.essa.sigma0) == (24, 0.2)  # a section merges key by key, the preset wins
    assert cfg.eval.ks == [1]  # a list replaces, it is not appended to


def test_extends_is_relative_to_the_extending_file_and_chains(tmp_path):
    _write(tmp_path / "root.yaml", "seed: 5\nessa: {population: 12}\n")
    _write(tmp_path / "bases" / "mid.yaml", "extends: ../root.yaml\nessa: {sigma0: 0.4}\n")
    child = _write(tmp_path / "presets" / "child.yaml", "extends: ../bases/mid.yaml\nname: child\n")
    cfg = load_config(child, ["essa.population=20"])  # overrides apply on the resolved tree
    assert (cfg.name, cfg.seed, cfg.essa.sigma0, cfg.essa.population) == ("child", 5, 0.4, 20)


def test_extends_cycle_is_refused_naming_the_files(tmp_path):
    _write(tmp_path / "a.yaml", "extends: b.yaml\n")
    _write(tmp_path / "b.yaml", "extends: a.yaml\n")
    with pytest.raises(ConfigError, match="extends cycle") as err:
        load_config(tmp_path / "a.yaml")
    assert f"{tmp_path / 'a.yaml'} -> {tmp_path / 'b.yaml'} -> {tmp_path / 'a.yaml'}" in str(err.value)
    _write(tmp_path / "self.yaml", "extends: self.yaml\n")
    with pytest.raises(ConfigError, match="extends cycle"):
        load_config(tmp_path / "self.yaml")


def test_extends_of_a_missing_file_names_it_and_the_file_that_asked(tmp_path):
    child = _write(tmp_path / "child.yaml", "extends: nowhere.yaml\n")
    with pytest.raises(ConfigError) as err:
        load_config(child)
    assert str(tmp_path / "nowhere.yaml") in str(err.value) and str(child) in str(err.value)
    _write(tmp_path / "bad.yaml", "extends: [a.yaml, b.yaml]\n")
    with pytest.raises(ConfigError, match="must name one YAML file"):
        load_config(tmp_path / "bad.yaml")


def test_compare_task_extends_a_preset_relative_to_the_compare_file(tmp_path):
    from essaflow.compare import load_compare_config

    _write(tmp_path / "presets" / "task.yaml", "method: essa\nseed: 4\nessa: {population: 8, sigma0: 0.25}\n")
    compare = _write(
        tmp_path / "compare.yaml",
        "methods: [{name: essa, method: essa}]\nseeds: [0]\n"
        "task: {extends: presets/task.yaml, method: none, essa: {population: 6}}\n",
    )
    cfg = load_compare_config(compare)
    assert (cfg.task.seed, cfg.task.essa.population, cfg.task.essa.sigma0) == (4, 6, 0.25)
    _write(tmp_path / "loop.yaml", "methods: [{name: essa, method: essa}]\ntask: {extends: loop.yaml}\n")
    with pytest.raises(ConfigError, match="extends cycle"):
        load_compare_config(tmp_path / "loop.yaml")


def test_the_tiny_presets_share_one_base_and_one_sft_start_per_registered_name():
    presets = {f: load_config(CONFIGS / f) for f in ("tiny.yaml", "tiny-essa.yaml", "tiny-fgrpo.yaml")}
    base = presets["tiny.yaml"]
    for cfg in presets.values():
        assert (cfg.data, cfg.sampling, cfg.eval, cfg.sft) == (base.data, base.sampling, base.eval, base.sft)
    starts: dict[str, set[str]] = {}  # registered name -> the SFT starts (LoRA settings) registering under it
    for cfg in presets.values():
        starts.setdefault(cfg.name, set()).add(cfg.model.model_dump_json())
    assert all(len(s) == 1 for s in starts.values()), starts
    assert len(starts) == 2  # tiny-fgrpo adapts Q/K/V/O only, under a name of its own


def test_sharding_auto_shards_full_parameters_on_several_ranks_and_lora_only_when_asked():
    from essaflow.grpo.config import resolved_sharding

    def sharding(*sets: str) -> str:
        return resolved_sharding(load_config(None, list(sets)).grpo)

    assert sharding("grpo.parameters=full", "grpo.workers.count=2") == "fsdp"
    assert sharding("grpo.parameters=full", "grpo.workers.count=1") == "ddp"
    assert sharding("grpo.workers.count=2") == "ddp"
    assert sharding("grpo.parameters=full", "grpo.workers.count=2", "grpo.sharding=ddp") == "ddp"
    assert sharding("grpo.workers.count=2", "grpo.sharding=fsdp") == "fsdp"  # LoRA on fsdp when asked for
