"""data.synthetic.task picks the built-in task: each builds problems with its own fields and its reward follows it
under eval.reward=auto, while the arithmetic default keeps its problems, splits and dataset key."""

from __future__ import annotations

import hashlib

import pytest

from essaflow.config import ConfigError, DataConfig, load_config
from essaflow.data import load_problems, source_fingerprint, split_problems
from essaflow.data.synthetic import synthetic_problems


def _digest(problems) -> str:
    return hashlib.sha256("".join(p.content_hash() for p in problems).encode()).hexdigest()[:16]


def test_the_arithmetic_default_keeps_its_problems_splits_and_dataset_key():
    for cfg in (DataConfig(), DataConfig(synthetic={"task": "arithmetic"}), load_config("configs/tiny.yaml").data):
        problems = load_problems(cfg)
        assert problems == synthetic_problems(6000)
        assert _digest(problems) == "45ca1d998d954e8b"
        assert split_problems(problems, 256, 0.4, 0.05).fingerprint()[:16] == "995c7b21c0536f4a"
        assert source_fingerprint(cfg) == "17c2f67a1957316b"
    # another task's knobs are not part of arithmetic's identity
    assert source_fingerprint(DataConfig(synthetic={"countdown": {"count": 4}})) == "17c2f67a1957316b"


@pytest.mark.parametrize(
    ("task", "fields", "reward"),
    [("countdown", {"numbers", "target"}, "countdown"), ("programs", {"tests"}, "code_tests")],
)
def test_each_task_builds_problems_with_its_fields_and_reward(task, fields, reward):
    cfg = DataConfig(synthetic={"task": task, "num_problems": 200})
    problems = load_problems(cfg)
    assert len(problems) == 200 and all(set(p.fields) == fields for p in problems)
    assert len({p.prompt for p in problems}) == 200
    assert source_fingerprint(cfg) not in (source_fingerprint(DataConfig()), source_fingerprint(DataConfig(
        synthetic={"task": "countdown" if task == "programs" else "programs", "num_problems": 200})))  # fmt: skip
    knob = {"countdown": {"count": 4}, "programs": {"max_steps": 1}}[task]
    changed = DataConfig(synthetic={"task": task, "num_problems": 200, task: knob})
    assert source_fingerprint(changed) != source_fingerprint(cfg) and load_problems(changed) != problems
    pipeline = load_config(None, ["data.synthetic.task=" + task])
    assert pipeline.eval.reward == reward  # eval.reward=auto follows the task


def test_countdown_knobs_reach_the_generator_and_bad_ones_are_refused():
    cfg = DataConfig(synthetic={"task": "countdown", "num_problems": 100, "countdown": {"count": 4, "high": 9}})
    assert all(len(p.fields["numbers"]) == 4 and max(p.fields["numbers"]) <= 9 for p in load_problems(cfg))
    for bad in ("data.synthetic.countdown.low=30", "data.synthetic.programs.examples=10", "data.synthetic.task=chess"):
        with pytest.raises(ConfigError):
            load_config(None, [bad])


def test_check_config_names_the_tiny_model_that_fits_the_task():
    from essaflow.checks.preflight import check_inputs

    def problems(*overrides):
        cfg = load_config(None, list(overrides))
        return check_inputs(cfg.model, cfg.data).problems

    assert problems("data.synthetic.task=countdown", "model.name_or_path=builtin:tiny-countdown") == []
    [problem] = problems("data.synthetic.task=programs", "data.synthetic.num_problems=200")
    assert "builtin:tiny is pretrained on arithmetic" in problem and "use builtin:tiny-programs" in problem
