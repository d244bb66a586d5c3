"""A Qwen-style checkpoint through every path where a prompt meets the model: generation stops at <|im_end|>
(generation_config's extra EOS), truncation at the cap is measured and warned about, and SFT, evaluation, ESSA
scoring and GRPO rollouts feed the model the very same prompt ids (chat template + system prompt)."""

import logging

import numpy as np
import pytest
import torch

from essaflow.config import EvalConfig, SamplingConfig, load_config
from essaflow.data.prepare import prepare_splits
from essaflow.essa.scorer import CandidateScorer
from essaflow.essa.scoring_spec import scoring_spec
from essaflow.generation.prompt_format import PromptFormat, prompt_ids
from essaflow.generation.sampling import TransformersGenerator
from essaflow.grpo.rollout import collect
from essaflow.judging.evaluation import evaluate
from essaflow.model.loading import attach_lora, load_base_model, load_tokenizer, save_adapter
from essaflow.training.sft import sft_batch
from tests.support.real_checkpoints import write_gsm8k_jsonl

SYSTEM = "Solve it and write the number after ####."


@pytest.fixture(scope="module")
def cfg(qwen_trained, tmp_path_factory):
    data = write_gsm8k_jsonl(tmp_path_factory.mktemp("gsm8k") / "train.jsonl", n=60)
    return load_config(
        None,
        [
            "data.source=file", f"data.path={data}", "data.adapter=gsm8k", "data.eval_size=8",
            f"data.system_prompt='{SYSTEM}'", f"model.name_or_path={qwen_trained}",
            "model.target_modules=[q_proj,v_proj]",
            "sampling.max_new_tokens=40", "sampling.batch_size=16", "essa.population=4", "essa.minibatch=4",
        ],
    )  # fmt: skip


class Recorder:
    """Stands in for model.generate: records the prompt ids it is fed and ends every row at once."""

    def __init__(self, stop: int):
        self.stop, self.rows = stop, []

    def __call__(self, input_ids=None, attention_mask=None, **kw):
        self.rows += [ids[m.bool()].tolist() for ids, m in zip(input_ids.cpu(), attention_mask.cpu())]
        return torch.cat([input_ids, torch.full((input_ids.shape[0], 1), self.stop, device=input_ids.device)], 1)


def test_generation_stops_at_im_end_from_generation_config(qwen_trained):
    from essaflow.config import ModelConfig

    mc = ModelConfig(name_or_path=str(qwen_trained))
    tok, model = load_tokenizer(mc), load_base_model(mc)
    gen = TransformersGenerator(model, tok, 16, PromptFormat())
    assert gen.stop[0] == tok.convert_tokens_to_ids("<|im_end|>") != tok.eos_token_id
    prompts = [f"Tom has {a} apples and buys {b} more. How many apples does he have?" for a, b in [(12, 7), (30, 5)]]
    out = gen.sample(prompts, n=1, temperature=0.0, max_new_tokens=60)
    assert out.truncated == [[False], [False]], out.texts
    assert all("####" in t[0] and "<|im_end|>" not in t[0] for t in out.texts)
    # stopping at the tokenizer's EOS (<|endoftext|>) alone, the turn runs on past <|im_end|> to the cap
    gen.stop = [tok.eos_token_id]
    old = gen.sample(prompts, n=1, temperature=0.0, max_new_tokens=60)
    assert old.truncated == [[True], [True]]


def test_evaluation_reports_the_truncated_share_and_warns_above_ten_percent(cfg, caplog):
    splits = prepare_splits(cfg.data)
    tok, model = load_tokenizer(cfg.model), load_base_model(cfg.model)
    gen = TransformersGenerator(model, tok, 16, PromptFormat())
    protocol = EvalConfig(samples_per_problem=2, ks=[1, 2], reward="math_verify", max_problems=4)
    with caplog.at_level(logging.WARNING, logger="essaflow.generation.sampling"):
        roomy = evaluate(gen, splits.eval, protocol, SamplingConfig(max_new_tokens=60, temperature=1.0))
        assert "hit the length cap" not in caplog.text
        cramped = evaluate(gen, splits.eval, protocol, SamplingConfig(max_new_tokens=4, temperature=1.0))
    print("truncated share: cap 60 ->", roomy.truncated_share, "; cap 4 ->", cramped.truncated_share)
    assert roomy.truncated_share <= 0.25 and roomy.greedy_truncated_share == 0.0
    assert cramped.truncated_share == 1.0 and cramped.metrics()["truncated_share"] == 1.0
    assert "100% of completions hit the length cap (4 new tokens)" in caplog.text
    row = cramped.samples[0]
    assert row["greedy"]["truncated"] and len(row["completions"]) == 2 and row["answer"] == splits.eval[0].answer


def test_sft_eval_essa_and_grpo_feed_identical_prompt_ids(cfg, tmp_path):
    fmt = cfg.data.prompt_format()
    assert fmt == PromptFormat(chat_template="auto", system_prompt=SYSTEM)
    splits = prepare_splits(cfg.data)
    tok = load_tokenizer(cfg.model)
    im_end = tok.convert_tokens_to_ids("<|im_end|>")
    expected = {p.id: prompt_ids(tok, [p.prompt], fmt)[0] for p in splits.train + splits.eval + splits.sft}
    assert all(tok.decode(ids).count(SYSTEM) == 1 for ids in expected.values())

    # SFT: the labelled batch starts with exactly those ids, and its target ends the turn with <|im_end|>
    batch = sft_batch(tok, splits.sft[:3], cfg.sft.target, fmt, [im_end, tok.eos_token_id])
    for i, p in enumerate(splits.sft[:3]):
        head = expected[p.id]
        assert batch["input_ids"][i, : len(head)].tolist() == head
        assert (batch["labels"][i, : len(head)] == -100).all() and batch["labels"][i, len(head)] != -100
        assert tok.decode(batch["labels"][i][batch["labels"][i] != -100]).endswith("#### " + p.answer + "<|im_end|>")

    # evaluation (the generator every evaluation path builds)
    model = attach_lora(load_base_model(cfg.model), cfg.model)
    with torch.no_grad():  # a non-zero B so the SVD space of ESSA below is not degenerate
        for name, param in model.named_parameters():
            if "lora_B" in name:
                param.normal_(0, 0.02)
    gen = TransformersGenerator(model, tok, 16, fmt)
    model.generate = rec = Recorder(im_end)
    gen.generate([p.prompt for p in splits.eval[:3]], n=1, temperature=0.0, max_new_tokens=5)
    assert rec.rows == [expected[p.id] for p in splits.eval[:3]]

    # GRPO rollouts: per row through generate, and (grpo.shared_prompt) each prompt once through one prefill
    rec.rows = []
    grpo = cfg.grpo.model_copy(update={"group_size": 2, "prompts_per_step": 2, "shared_prompt": False})
    collect(model, tok, splits.train, [0, 1], 0, grpo, cfg.eval.reward, 5, fmt)
    train_ids = [expected[p.id] for p in splits.train]
    assert len(rec.rows) == 4 and all(row in train_ids for row in rec.rows)
    del model.generate
    fed = []
    hook = model.register_forward_pre_hook(lambda _m, _a, kw: fed.append(kw), with_kwargs=True)
    shared = grpo.model_copy(update={"shared_prompt": True})
    collect(model, tok, splits.train, [0, 1], 0, shared, cfg.eval.reward, 5, fmt)
    hook.remove()
    prefill = [ids[m.bool()].tolist() for ids, m in zip(fed[0]["input_ids"], fed[0]["attention_mask"])]
    assert len(prefill) == 2 and all(row in train_ids for row in prefill)

    # ESSA scoring: decoded fitness and the teacher-forced answer probability
    adapter = save_adapter(model, tmp_path / "adapter", tok)
    spec = scoring_spec(cfg, splits, adapter, ship_adapter=False)
    scorer = CandidateScorer(spec)
    fed = []  # batched scoring: the prompts' shared prefix once per candidate, then each row's tail on top of it
    hook = scorer.generator.model.register_forward_pre_hook(lambda _m, _a, kw: fed.append(kw), with_kwargs=True)
    scorer.score(0, np.zeros(scorer.svd.dimension, dtype=np.float32), np.array([0, 1, 2]), seed=0)
    hook.remove()
    prefix = fed[0]["input_ids"][0].tolist()
    tails = zip(fed[1]["input_ids"], fed[1]["attention_mask"][:, len(prefix) :])
    assert [prefix + ids[m.bool()].tolist() for ids, m in tails] == [expected[p.id] for p in splits.train[:3]]
    scorer.fitness.answer_probability(np.array([0, 1]))
    for i, p in enumerate(splits.train[:2]):
        head, tail = scorer.fitness.answer_tokens()[i]
        assert head == expected[p.id] and tail[-1] == im_end and tok.decode(tail[:-1]) == p.answer
