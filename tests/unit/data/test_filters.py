"""data.max_prompt_tokens counts prompts in the checkpoint's tokens; data.conflicting_duplicates drops and counts."""

from __future__ import annotations

import pytest

from essaflow.config import DataConfig, ModelConfig
from essaflow.data.filters import filter_problems
from essaflow.data.schema import Problem
from essaflow.generation.prompt_format import prompt_ids


def _p(i: int, prompt: str, answer: str) -> Problem:
    return Problem(id=str(i), prompt=prompt, answer=answer)


def test_conflicting_duplicates_are_dropped_every_copy_and_agreeing_ones_kept():
    problems = [_p(0, "What is 2+2?", "4"), _p(1, "What is  2+2? ", "5"), _p(2, "What is 3+3?", "6"),
                _p(3, "What is 3+3?", "6"), _p(4, "What is 1+1?", "2")]  # fmt: skip
    kept = filter_problems(problems, DataConfig(conflicting_duplicates="drop"))
    assert [p.id for p in kept.problems] == ["2", "3", "4"] and kept.dropped == {"conflicting_duplicates": 2}
    assert filter_problems(problems, DataConfig()).problems == problems  # keep: as read


def test_prompts_are_capped_in_the_checkpoints_tokens_as_the_model_sees_them(tmp_path):
    from essaflow.model.loading import load_tokenizer
    from tests.support.real_checkpoints import build_qwen_like

    model = ModelConfig(name_or_path=str(build_qwen_like(tmp_path / "qwen")), device="cpu")
    tok = load_tokenizer(model)
    problems = [_p(i, "add " * (i + 1) + "1 and 2", "3") for i in range(12)]
    cfg = DataConfig(chat_template="auto")
    lengths = [len(r) for r in prompt_ids(tok, [p.prompt for p in problems], cfg.prompt_format())]
    cap = sorted(lengths)[5]
    kept = filter_problems(problems, cfg.model_copy(update={"max_prompt_tokens": cap}), tok)
    assert [p.id for p in kept.problems] == [p.id for p, n in zip(problems, lengths) if n <= cap]
    assert kept.dropped == {"max_prompt_tokens": sum(n > cap for n in lengths)} and kept.dropped["max_prompt_tokens"]
    assert max(lengths) > len(problems[-1].prompt.split())  # tokens of the chat template, not words or characters


def test_a_token_cap_without_a_tokenizer_names_the_field():
    with pytest.raises(ValueError, match="data.max_prompt_tokens needs the model's tokenizer"):
        filter_problems([_p(0, "x", "1")], DataConfig(max_prompt_tokens=8))


def test_a_token_cap_keys_the_dataset_by_the_model_whose_tokenizer_counts(tmp_path):
    from tasks.data import same_data_config

    def key(data: DataConfig, model: ModelConfig) -> str:
        return same_data_config(None, {"data": data, "storage_uri": "file:///tmp/store", "model": model})

    from tests.support.real_checkpoints import build_qwen_like

    tiny, other = ModelConfig(), ModelConfig(name_or_path=str(build_qwen_like(tmp_path / "qwen")))
    capped = DataConfig(max_prompt_tokens=64)
    assert key(capped, tiny) == key(capped, tiny)
    assert key(capped, tiny) != key(capped, other)  # another tokenizer, other problems kept
    assert key(DataConfig(), tiny) == key(DataConfig(), other)  # no token cap: the data config alone
