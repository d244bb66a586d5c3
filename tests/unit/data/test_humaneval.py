"""HumanEval as an evaluation source: the package's problems, judged by their tests in the sandbox."""

from __future__ import annotations

import pytest

from essaflow.config import load_config
from essaflow.data.humaneval import humaneval_problems
from essaflow.data.prepare import prepare_splits
from essaflow.judging.judge import judge_for


def test_all_164_problems_are_held_out_and_judged_with_code_tests():
    cfg = load_config(None, ["data.source=humaneval", "data.eval_size=200", "method=none", "sft.enabled=false"])
    splits = prepare_splits(cfg.data)
    assert len(splits.eval) == 164 and not splits.sft and not splits.train
    assert cfg.eval.reward == "code_tests"


def test_canonical_solutions_pass_and_swapped_ones_fail():
    problems = humaneval_problems()[:12]
    judge = judge_for(load_config(None, ["data.source=humaneval", "method=none", "sft.enabled=false"]).eval)
    assert judge.score([p.answer for p in problems], problems).rewards == [1.0] * 12
    # a chat model's whole function in a fence, its imports left to the prompt's prelude
    fenced = [f"Here:\n```python\n{p.answer}\n```" for p in problems]
    assert judge.score(fenced, problems).rewards == [1.0] * 12
    swapped = problems[1:] + problems[:1]
    assert judge.score([p.answer for p in swapped], problems).rewards == [0.0] * 12


def test_an_evaluation_set_is_not_trained_on():
    with pytest.raises(ValueError, match="data.source=humaneval is an evaluation set .* nothing to train fgrpo"):
        load_config(None, ["data.source=humaneval", "method=fgrpo"])
    with pytest.raises(ValueError, match="data.source=humaneval is an evaluation set .* nothing to train SFT"):
        load_config(None, ["data.source=humaneval", "method=none"])
