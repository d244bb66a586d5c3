"""reasoning-gym as a source and a reward: problems by seed, stable splits, the task's own verifier."""

from __future__ import annotations

import pytest

from essaflow.config import load_config
from essaflow.data.config import ReasoningGymConfig
from essaflow.data.errors import DataError
from essaflow.data.prepare import prepare_splits
from essaflow.data.reasoning_gym import answer_candidates, reasoning_gym_problems
from essaflow.judging.judge import judge_for

SUMS = {"name": "chain_sum", "config": {"min_terms": 2, "max_terms": 2, "min_digits": 1, "max_digits": 2}}


def rg(*tasks, size=60):
    return ReasoningGymConfig(tasks=list(tasks) or [SUMS], size=size)


def test_problems_are_a_pure_function_of_the_settings_and_the_seed():
    a, b = reasoning_gym_problems(rg(), seed=3), reasoning_gym_problems(rg(), seed=3)
    assert [p.content_hash() for p in a] == [p.content_hash() for p in b]
    assert [p.prompt for p in a] != [p.prompt for p in reasoning_gym_problems(rg(), seed=4)]
    p = a[0]
    assert p.id == "chain_sum-0" and p.fields["rg_task"] == "chain_sum" and p.fields["rg_entry"]["question"] == p.prompt
    assert p.fields["rg_config"] == SUMS["config"] and p.answer == p.fields["rg_entry"]["answer"]


def test_a_mix_shares_the_size_by_weight_and_drops_repeated_questions():
    tiny = {"name": "basic_arithmetic", "weight": 3, "config": {"min_terms": 2, "max_terms": 2, "min_digits": 1,
            "max_digits": 1, "operators": ["+"], "allow_parentheses": False, "allow_negation": False}}  # fmt: skip
    cfg = rg(tiny, SUMS, size=400)
    assert cfg.sizes() == [300, 100]
    problems = reasoning_gym_problems(cfg, seed=0)
    adds = [p for p in problems if p.fields["rg_task"] == "basic_arithmetic"]
    assert len({p.prompt for p in problems}) == len(problems)  # no question twice
    assert len(adds) < 200  # 1-digit a + b: a few hundred spellings at most, drawn 300 times: repeats dropped


def test_the_gsm_task_brings_its_worked_solution_for_sft():
    (p,) = reasoning_gym_problems(ReasoningGymConfig(tasks=["gsm_symbolic"], size=10), seed=0)[:1]
    assert p.solution and p.solution.rstrip().endswith(p.answer)


def test_splits_stay_put_when_the_source_grows():
    small = load_config(None, ["data.source=reasoning_gym", "data.reasoning_gym.size=300", "data.eval_size=400"])
    large = small.model_copy(update={"data": small.data.model_copy(update={"reasoning_gym": rg(size=600)})})
    small = small.model_copy(update={"data": small.data.model_copy(update={"reasoning_gym": rg(size=300)})})
    a, b = prepare_splits(small.data), prepare_splits(large.data)
    held_small = {p.problem_key() for p in a.eval}
    assert held_small and held_small <= {p.problem_key() for p in b.eval}  # a held-out problem stays held out
    assert not held_small & {p.problem_key() for p in b.sft + b.train}


def test_an_unknown_task_or_config_key_names_the_field():
    with pytest.raises(DataError, match=r"data.reasoning_gym.tasks: unknown task 'chain_summ'"):
        reasoning_gym_problems(rg({"name": "chain_summ"}), seed=0)
    with pytest.raises(DataError, match=r"data.reasoning_gym.tasks\[chain_sum\].config .*reasoning-gym refuses it"):
        reasoning_gym_problems(rg({"name": "chain_sum", "config": {"max_digitz": 2}}), seed=0)
    with pytest.raises(ValueError, match="names a task twice"):
        ReasoningGymConfig(tasks=["chain_sum", "chain_sum"])
    with pytest.raises(ValueError, match="is not read by data.source='reasoning_gym'"):
        load_config(None, ["data.source=reasoning_gym", "data.path=x.jsonl"])


def test_the_answer_is_the_tag_else_the_last_line_or_the_last_number():
    assert answer_candidates("think <answer>1</answer> then <answer> 42 </answer> 7") == ["42"]
    assert answer_candidates("6 + 10 is 16.\nSo it is 16.") == ["So it is 16", "16"]
    assert answer_candidates("") == []


def test_the_reward_is_the_tasks_verifier_under_the_threshold():
    cfg = load_config(None, ["data.source=reasoning_gym", "data.reasoning_gym.size=20"])
    assert cfg.eval.reward == "reasoning_gym" and cfg.eval.judged_with()["reward"] == "reasoning_gym"
    judge = judge_for(cfg.eval)
    p = reasoning_gym_problems(rg(), seed=0)[0]
    wrong = str(int(p.answer) + 1)
    scores = judge.score([p.answer, f"It is {p.answer}.", f"<answer>{wrong}</answer> {p.answer}", wrong], [p] * 4)
    assert scores.rewards[:3] == [1.0, 1.0, 0.0] and scores.correct == [True, True, False, False]
