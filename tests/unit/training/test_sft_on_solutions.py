"""SFT on worked solutions: the gsm8k and math adapters keep the source's solution beside the
final answer, the dataset stores it, SFT trains on it by default, and the SFT cache key follows it."""

import json

import pandas as pd

from essaflow.artifacts import publish_dataset, read_dataset
from essaflow.config import DataConfig, ModelConfig, SFTConfig
from essaflow.data import Problem, load_problems, split_problems
from essaflow.generation.prompt_format import PromptFormat
from essaflow.model.loading import load_tokenizer
from essaflow.storage import open_store
from essaflow.training.sft import sft_batch, sft_target
from essaflow.training.warm_start import sft_key
from tests.support.real_checkpoints import write_gsm8k_jsonl


def test_gsm8k_adapter_keeps_the_worked_solution_and_reads_the_answer(tmp_path):
    path = write_gsm8k_jsonl(tmp_path / "g.jsonl", n=5)
    problems = load_problems(DataConfig(source="file", path=str(path), adapter="gsm8k"))
    first = json.loads(path.read_text().splitlines()[0])
    assert problems[0].solution == first["answer"] and problems[0].solution.endswith("#### " + problems[0].answer)
    assert problems[0].prompt == first["question"]


def test_math_adapter_keeps_the_solution_and_reads_the_last_boxed(tmp_path):
    rows = [{"problem": "What is 1/2 + 1/3?", "solution": "It is $\\boxed{\\frac{5}{6}}$."}]
    pd.DataFrame(rows).to_json(tmp_path / "m.jsonl", orient="records", lines=True)
    (p,) = load_problems(DataConfig(source="file", path=str(tmp_path / "m.jsonl"), adapter="math"))
    assert p.answer == "\\frac{5}{6}" and p.solution == rows[0]["solution"]


def test_plain_sources_have_no_solution_unless_a_column_says_so(tmp_path):
    rows = [{"prompt": "1+1=", "answer": "2"}, {"prompt": "2+2=", "answer": "4", "solution": "2+2 is 4"}]
    pd.DataFrame(rows).to_json(tmp_path / "p.jsonl", orient="records", lines=True)
    a, b = load_problems(DataConfig(source="file", path=str(tmp_path / "p.jsonl")))
    assert a.solution is None and b.solution == "2+2 is 4"


def test_a_problem_without_solution_keeps_its_hash_and_a_solution_changes_it():
    bare = Problem(id="1", prompt="p", answer="2")
    assert bare.content_hash() == Problem(id="1", prompt="p", answer="2", solution=None).content_hash()
    assert bare.content_hash() != Problem(id="1", prompt="p", answer="2", solution="1+1=2").content_hash()


def test_the_dataset_artifact_stores_solutions(tmp_path):
    path = write_gsm8k_jsonl(tmp_path / "g.jsonl", n=20)
    cfg = DataConfig(source="file", path=str(path), adapter="gsm8k", eval_size=5)
    splits = split_problems(load_problems(cfg), cfg.eval_size, cfg.sft_fraction)
    ref = publish_dataset(open_store(f"file://{tmp_path}/store"), "g", splits, cfg)
    back = read_dataset(ref)
    assert back == splits and all(p.solution for p in back.sft)


def test_sft_trains_on_the_solution_by_default_and_on_the_answer_on_request(qwen_untrained):
    tok = load_tokenizer(ModelConfig(name_or_path=str(qwen_untrained)))
    p = Problem(id="1", prompt="Tom has 3 and buys 4. How many?", answer="7", solution="3 + 4 = 7.\n#### 7")
    assert SFTConfig().target == "solution"
    assert sft_target(p, "solution") == p.solution and sft_target(p, "answer") == "7"
    assert sft_target(p.model_copy(update={"solution": None}), "solution") == "7"
    im_end = tok.convert_tokens_to_ids("<|im_end|>")
    for target, text in (("solution", p.solution), ("answer", "7")):
        b = sft_batch(tok, [p], target, PromptFormat(), [im_end, tok.eos_token_id])
        assert tok.decode(b["labels"][0][b["labels"][0] != -100]) == text + "<|im_end|>"


def test_the_sft_cache_key_follows_target_solution_and_prompt_format():
    p = Problem(id="1", prompt="q", answer="7", solution="3 + 4 = 7")
    m, s = ModelConfig(), SFTConfig()
    key = sft_key(m, s, [p], PromptFormat())
    assert key == sft_key(m, s, [p], PromptFormat())
    assert key != sft_key(m, SFTConfig(target="answer"), [p], PromptFormat())
    assert key != sft_key(m, s, [p.model_copy(update={"solution": "7"})], PromptFormat())
    assert key != sft_key(m, s, [p], PromptFormat(system_prompt="Be brief."))
    assert key != sft_key(m, s, [p], PromptFormat(chat_template="never"))
