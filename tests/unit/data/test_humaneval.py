"""HumanEval as an evaluation source: the package's problems, judged by their tests in the sandbox (which runs them:
tests/integration/test_code_task_references.py)."""

from __future__ import annotations

import pytest

from essaflow.config import load_config
from essaflow.data.prepare import prepare_splits


def test_all_164_problems_are_held_out_and_judged_with_code_tests():
    cfg = load_config(None, ["data.source=humaneval", "data.eval_size=200", "method=none", "sft.enabled=false"])
    splits = prepare_splits(cfg.data)
    assert len(splits.eval) == 164 and not splits.sft and not splits.train
    assert cfg.eval.reward == "code_tests"


def test_an_evaluation_set_is_not_trained_on():
    with pytest.raises(ValueError, match="data.source=humaneval is an evaluation set .* nothing to train fgrpo"):
        load_config(None, ["data.source=humaneval", "method=fgrpo"])
    with pytest.raises(ValueError, match="data.source=humaneval is an evaluation set .* nothing to train SFT"):
        load_config(None, ["data.source=humaneval", "method=none"])
