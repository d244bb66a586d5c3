"""Tokenizer conventions on checkpoints built like real ones: chat template, system prompt, BOS exactly once,
every EOS id of generation_config and tokenizer; and the tiny model's prompts unchanged by all of it."""

import pytest
import torch

from essaflow.config import ModelConfig
from essaflow.generation.prompt_format import (
    PromptFormat,
    bos_id,
    prompt_ids,
    render_prompt,
    stop_ids,
    target_ids,
    uses_chat_template,
)
from essaflow.generation.sampling import encode_prompts, mask_after_eos
from essaflow.model.loading import load_base_model, load_tokenizer
from essaflow.model.tiny import answer_only_batch

Q = "Tom has 3 apples and buys 4 more. How many apples does he have?"


def _tok(path):
    return load_tokenizer(ModelConfig(name_or_path=str(path)))


def test_auto_uses_the_tokenizers_chat_template_with_the_system_prompt(qwen_untrained):
    tok = _tok(qwen_untrained)
    text = render_prompt(tok, Q, PromptFormat(system_prompt="Answer after ####."))
    system = "<|im_start|>system\nAnswer after ####.<|im_end|>\n"
    assert text == system + "<|im_start|>user\n" + Q + "<|im_end|>\n<|im_start|>assistant\n"
    assert render_prompt(tok, Q, PromptFormat()).startswith("<|im_start|>system\nYou are a helpful assistant.")
    assert render_prompt(tok, Q, PromptFormat(chat_template="never")) == Q


def test_without_a_template_auto_is_the_text_and_always_is_an_error():
    tok = load_tokenizer(ModelConfig())  # the built-in tiny model: no chat template
    assert not uses_chat_template(tok, PromptFormat())
    assert render_prompt(tok, "1+2=", PromptFormat()) == "1+2="
    assert render_prompt(tok, "1+2=", PromptFormat(system_prompt="Add.")) == "Add.\n\n1+2="
    with pytest.raises(ValueError, match="chat_template=always but the tokenizer has no chat template"):
        render_prompt(tok, "1+2=", PromptFormat(chat_template="always"))


def test_bos_is_added_exactly_once_with_or_without_a_template_that_writes_it(llama_untrained):
    tok = _tok(llama_untrained)
    bos = tok.bos_token_id
    assert bos_id(tok) == bos
    for fmt in (PromptFormat(), PromptFormat(chat_template="never"), PromptFormat(system_prompt="Be brief.")):
        ids = prompt_ids(tok, [Q], fmt)[0]
        assert ids[0] == bos and ids.count(bos) == 1, fmt
    # what add_special_tokens=True would have done to a template that writes {{ bos_token }}: two BOS
    text = render_prompt(tok, Q, PromptFormat())
    assert tok(text, add_special_tokens=True)["input_ids"][:2] == [bos, bos]


def test_qwen_style_tokenizers_get_no_bos(qwen_untrained):
    tok = _tok(qwen_untrained)
    assert bos_id(tok) is None
    assert prompt_ids(tok, [Q], PromptFormat(chat_template="never"))[0] == tok(Q, add_special_tokens=False)["input_ids"]


def test_stop_ids_join_generation_config_and_tokenizer(qwen_untrained, llama_untrained):
    for path, turn_end in ((qwen_untrained, "<|im_end|>"), (llama_untrained, "<|eot_id|>")):
        tok = _tok(path)
        model = load_base_model(ModelConfig(name_or_path=str(path)))
        stop = stop_ids(tok, model.generation_config)
        assert stop == [tok.convert_tokens_to_ids(turn_end), tok.eos_token_id]
    tiny = load_tokenizer(ModelConfig())
    assert stop_ids(tiny, None) == [tiny.eos_token_id]


def test_masking_stops_at_the_first_of_any_stop_id():
    ids = torch.tensor([[5, 2, 7, 7], [5, 6, 0, 7], [5, 6, 7, 8]])
    masked, mask = mask_after_eos(ids, [2, 0], pad_id=9)
    assert masked.tolist() == [[5, 2, 9, 9], [5, 6, 0, 9], [5, 6, 7, 8]]
    assert mask.tolist() == [[1, 1, 0, 0], [1, 1, 1, 0], [1, 1, 1, 1]]


def test_sft_target_closes_the_turn_as_the_template_does(qwen_untrained, llama_untrained):
    for path, turn_end in ((qwen_untrained, "<|im_end|>"), (llama_untrained, "<|eot_id|>")):
        tok = _tok(path)
        model = load_base_model(ModelConfig(name_or_path=str(path)))
        stop = stop_ids(tok, model.generation_config)
        ids = target_ids(tok, Q, "He has 7.\n#### 7", PromptFormat(), stop)
        assert tok.decode(ids) == "He has 7.\n#### 7" + turn_end
        plain = target_ids(tok, Q, "7", PromptFormat(chat_template="never"), stop)
        assert plain[-1] == tok.eos_token_id


def test_the_tiny_models_prompts_and_sft_batches_are_unchanged():
    """The character tokenizer has no template and no BOS: the ids are what add_special_tokens=False gave."""
    from essaflow.data.schema import Problem
    from essaflow.training.sft import sft_batch

    tok = load_tokenizer(ModelConfig())
    prompts = ["1+2=", "33-4="]
    enc = encode_prompts(tok, prompts, PromptFormat())
    old = tok(prompts, return_tensors="pt", padding=True, add_special_tokens=False, padding_side="left")
    assert torch.equal(enc["input_ids"], old["input_ids"]) and torch.equal(enc["attention_mask"], old["attention_mask"])
    problems = [Problem(id=str(i), prompt=p, answer=a) for i, (p, a) in enumerate(zip(prompts, ["3", "29"]))]
    new = sft_batch(tok, problems, "solution", PromptFormat(), [tok.eos_token_id])
    ref = answer_only_batch(tok, prompts, ["3", "29"])
    assert all(torch.equal(new[k], ref[k]) for k in ref)
