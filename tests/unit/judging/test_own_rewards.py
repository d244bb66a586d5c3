"""Rewards of the user's own, before any is called: a reward file relative to its config, the digest that follows
its source into the protocol (an edit mid-run refused), the built-ins' two-argument form, the thresholds and
timeouts a config may give. Calling them (in processes of their own) is in tests/integration/test_own_rewards.py."""

from __future__ import annotations

import textwrap
from pathlib import Path

import pytest

from essaflow.config import load_config, parse_config
from essaflow.config_base import ConfigError
from essaflow.data.schema import Problem
from essaflow.judging.config import EvalConfig
from essaflow.judging.judge import Judge, RewardError, judge_spec
from essaflow.judging.reward_ref import resolve_reward_ref

REPO = Path(__file__).resolve().parents[3]
P = [
    Problem(id="a", prompt="2+3=", answer="5", fields={"operands": [2, 3], "op": "+"}),
    Problem(id="b", prompt="9-4=", answer="5", fields={"operands": [9, 4], "op": "-"}),
]


def write(tmp_path: Path, body: str, name: str = "my_reward.py") -> Path:
    path = tmp_path / name
    path.write_text(textwrap.dedent(body))
    return path


def test_a_relative_reward_file_is_relative_to_the_config_file(tmp_path, monkeypatch):
    sub = tmp_path / "task"
    sub.mkdir()
    write(sub, "def r(completion, problem):\n    return 1.0\n", "r.py")
    (sub / "run.yaml").write_text("eval:\n  reward: r.py:r\n")
    monkeypatch.chdir(REPO)
    cfg = load_config(sub / "run.yaml")
    assert cfg.eval.reward == f"{(sub / 'r.py').resolve()}:r"
    assert cfg.eval.reward_digest == resolve_reward_ref(cfg.eval.reward).digest


def test_the_digest_follows_the_source_and_an_edit_mid_run_is_refused(tmp_path):
    path = write(tmp_path, "def r(completion, problem):\n    return 1.0\n")
    before = EvalConfig(reward=f"{path}:r")
    path.write_text("def r(completion, problem):\n    return 0.5\n")
    after = EvalConfig(reward=f"{path}:r")
    assert before.reward_digest != after.reward_digest
    with pytest.raises(RewardError, match="changed since the run's config was read"):
        judge_spec(before)


def test_a_reward_file_that_is_not_there_is_a_config_error(tmp_path):
    with pytest.raises(ConfigError, match="no file"):
        parse_config({"eval": {"reward": f"{tmp_path}/missing.py:r"}})


def test_builtin_rewards_keep_their_two_argument_form_and_carry_a_digest():
    judge = Judge("exact_match")
    assert judge.score(["5", "4"], P).rewards == [1.0, 0.0]
    assert EvalConfig(reward="exact_match").reward_digest == resolve_reward_ref("exact_match").digest


@pytest.mark.parametrize("threshold", ["0", "-1"])
def test_a_threshold_of_zero_or_below_is_accepted_with_a_note(threshold):
    from essaflow.checks.notes import config_notes

    notes = config_notes(load_config(None, [f"eval.correct_threshold={threshold}"]))
    assert any(n.startswith(f"note: eval.correct_threshold={threshold}: ") and "every completion is correct" in n
               for n in notes), notes  # fmt: skip
    assert not any("correct_threshold" in n for n in config_notes(load_config(None, [])))


@pytest.mark.parametrize("words", ["eval.correct_threshold=.nan", "eval.reward_timeout_s=.inf",
                                   "eval.reward_timeout_s=1e12"])  # fmt: skip
def test_a_threshold_or_timeout_that_is_no_usable_number_is_refused_naming_the_field(words):
    with pytest.raises(ConfigError, match=f"{words.split('=')[0]}: Input should be"):
        load_config(None, [words])
