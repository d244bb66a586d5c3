"""Small checkpoints built like real ones, for tests of what real models bring (no hub access needed).

- `build_qwen_like`: a Qwen2-architecture model (transformers Qwen2Config, tiny sizes) with a byte-level BPE
  tokenizer trained by the `tokenizers` library, a Qwen-style chat template (<|im_start|> / <|im_end|>, a default
  system message), the tokenizer's EOS <|endoftext|> and a generation_config whose EOS list adds <|im_end|>: the
  shape of Qwen2.5 checkpoints, where a turn ends with a token the tokenizer does not call EOS.
- `build_llama_like`: a Llama-architecture model whose tokenizer adds BOS <s> (a TemplateProcessing post-processor,
  as Llama 2 / Gemma do) and whose chat template writes `{{ bos_token }}` itself (as Llama 3's does): the two ways a
  prompt can get a second BOS.

With `train_steps > 0` the model is fully fine-tuned for a few seconds on chat-formatted GSM8K-style arithmetic
("... #### 19<|im_end|>"), so that greedy decoding ends its turn with the end-of-turn token: what tests of stopping,
truncation shares and dress rehearsals need. Every build is a pure function of its arguments (seeded).
"""

from __future__ import annotations

import json
import random
from pathlib import Path

import pytest
import torch
from tokenizers import Tokenizer, decoders, models, pre_tokenizers, processors, trainers
from transformers import (
    GenerationConfig,
    LlamaConfig,
    LlamaForCausalLM,
    PreTrainedTokenizerFast,
    Qwen2Config,
    Qwen2ForCausalLM,
)

QWEN_SPECIALS = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]
QWEN_CHAT_TEMPLATE = (
    "{%- if messages[0]['role'] != 'system' %}"
    "{{- '<|im_start|>system\\nYou are a helpful assistant.<|im_end|>\\n' }}"
    "{%- endif %}"
    "{%- for message in messages %}"
    "{{- '<|im_start|>' + message['role'] + '\\n' + message['content'] + '<|im_end|>' + '\\n' }}"
    "{%- endfor %}"
    "{%- if add_generation_prompt %}{{- '<|im_start|>assistant\\n' }}{%- endif %}"
)
LLAMA_SPECIALS = ["<unk>", "<s>", "</s>", "<|start_header_id|>", "<|end_header_id|>", "<|eot_id|>"]
LLAMA_CHAT_TEMPLATE = (
    "{{- bos_token }}"
    "{%- for message in messages %}"
    "{{- '<|start_header_id|>' + message['role'] + '<|end_header_id|>\\n\\n' + message['content'] + '<|eot_id|>' }}"
    "{%- endfor %}"
    "{%- if add_generation_prompt %}{{- '<|start_header_id|>assistant<|end_header_id|>\\n\\n' }}{%- endif %}"
)


def arithmetic_problems(n: int, seed: int = 0) -> list[dict[str, str]]:
    """GSM8K-format rows: question, a worked answer ending in '#### <number>'."""
    rng = random.Random(seed)
    rows = []
    for i in range(n):
        a, b = rng.randint(1, 60), rng.randint(1, 40)
        rows.append(
            {
                "id": f"q{i}",
                "question": f"Tom has {a} apples and buys {b} more. How many apples does he have?",
                "answer": f"He has {a} + {b} = {a + b} apples.\n#### {a + b}",
            }
        )
    return rows


def write_gsm8k_jsonl(path: Path, n: int = 120, seed: int = 0) -> Path:
    """A GSM8K-format JSONL file (question, answer with '####') of `n` rows."""
    path = Path(path)
    path.write_text("".join(json.dumps(r) + "\n" for r in arithmetic_problems(n, seed)))
    return path


def _bpe(corpus: list[str], specials: list[str], vocab_size: int) -> Tokenizer:
    core = Tokenizer(models.BPE())
    core.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    core.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size, special_tokens=specials, initial_alphabet=pre_tokenizers.ByteLevel.alphabet()
    )
    core.train_from_iterator(corpus, trainer)
    return core


def _corpus(seed: int) -> list[str]:
    rows = arithmetic_problems(400, seed)
    return [r["question"] for r in rows] + [r["answer"] for r in rows] + ["system user assistant helpful"] * 4


def qwen_tokenizer(seed: int = 0, vocab_size: int = 400) -> PreTrainedTokenizerFast:
    core = _bpe(_corpus(seed), QWEN_SPECIALS, vocab_size)
    core.post_processor = processors.ByteLevel(trim_offsets=False)
    return PreTrainedTokenizerFast(
        tokenizer_object=core,
        eos_token="<|endoftext|>",
        pad_token="<|endoftext|>",
        additional_special_tokens=["<|im_start|>", "<|im_end|>"],
        chat_template=QWEN_CHAT_TEMPLATE,
        clean_up_tokenization_spaces=False,
    )


def llama_tokenizer(seed: int = 0, vocab_size: int = 400) -> PreTrainedTokenizerFast:
    core = _bpe(_corpus(seed), LLAMA_SPECIALS, vocab_size)
    bos = core.token_to_id("<s>")
    core.post_processor = processors.TemplateProcessing(
        single="<s> $A", pair="<s> $A <s> $B", special_tokens=[("<s>", bos)]
    )
    return PreTrainedTokenizerFast(
        tokenizer_object=core,
        bos_token="<s>",
        eos_token="</s>",
        unk_token="<unk>",
        pad_token="</s>",
        additional_special_tokens=["<|start_header_id|>", "<|end_header_id|>", "<|eot_id|>"],
        chat_template=LLAMA_CHAT_TEMPLATE,
        clean_up_tokenization_spaces=False,
    )


def _chat_batch(tok, rows, end_of_turn: str) -> dict[str, torch.Tensor]:
    """Full-sequence LM batch of chat-formatted (question, answer + end_of_turn) conversations."""

    def head(question: str) -> str:
        turn = [{"role": "user", "content": question}]
        return tok.apply_chat_template(turn, tokenize=False, add_generation_prompt=True)

    texts = [head(r["question"]) + r["answer"] + end_of_turn for r in rows]
    enc = tok(texts, add_special_tokens=False, padding=True, return_tensors="pt", padding_side="right")
    labels = enc["input_ids"].masked_fill(enc["attention_mask"] == 0, -100)
    return {"input_ids": enc["input_ids"], "attention_mask": enc["attention_mask"], "labels": labels}


def _train(model, tok, end_of_turn: str, steps: int, seed: int) -> None:
    rows = arithmetic_problems(256, seed + 1)
    rng = random.Random(seed)
    opt = torch.optim.AdamW(model.parameters(), lr=3e-3)
    model.train()
    for _ in range(steps):
        loss = model(**_chat_batch(tok, rng.sample(rows, 32), end_of_turn)).loss
        opt.zero_grad()
        loss.backward()
        opt.step()
    model.eval()


def build_qwen_like(out_dir: Path, train_steps: int = 0, seed: int = 0) -> Path:
    """A Qwen2-architecture checkpoint (model, BPE tokenizer with chat template, generation_config) in out_dir."""
    torch.manual_seed(seed)
    tok = qwen_tokenizer(seed)
    im_end, eot = tok.convert_tokens_to_ids("<|im_end|>"), tok.convert_tokens_to_ids("<|endoftext|>")
    config = Qwen2Config(
        vocab_size=len(tok),
        hidden_size=64,
        intermediate_size=128,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=512,
        tie_word_embeddings=True,
        bos_token_id=None,
        eos_token_id=eot,
        pad_token_id=eot,
    )
    model = Qwen2ForCausalLM(config)
    if train_steps:
        _train(model, tok, "<|im_end|>", train_steps, seed)
    # Qwen2.5-Instruct's generation_config ends generation at <|im_end|> as well as <|endoftext|>
    model.generation_config = GenerationConfig(eos_token_id=[im_end, eot], pad_token_id=eot, bos_token_id=None)
    out = Path(out_dir)
    model.save_pretrained(out, safe_serialization=True)
    tok.save_pretrained(out)
    return out


def build_llama_like(out_dir: Path, train_steps: int = 0, seed: int = 0) -> Path:
    """A Llama-architecture checkpoint whose tokenizer adds BOS and whose chat template writes it too."""
    torch.manual_seed(seed)
    tok = llama_tokenizer(seed)
    eot_id, eos = tok.convert_tokens_to_ids("<|eot_id|>"), tok.eos_token_id
    config = LlamaConfig(
        vocab_size=len(tok),
        hidden_size=64,
        intermediate_size=128,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=512,
        tie_word_embeddings=True,
        bos_token_id=tok.bos_token_id,
        eos_token_id=eos,
        pad_token_id=eos,
    )
    model = LlamaForCausalLM(config)
    if train_steps:
        _train(model, tok, "<|eot_id|>", train_steps, seed)
    model.generation_config = GenerationConfig(
        eos_token_id=[eot_id, eos], pad_token_id=eos, bos_token_id=tok.bos_token_id
    )
    out = Path(out_dir)
    model.save_pretrained(out, safe_serialization=True)
    tok.save_pretrained(out)
    return out


# Session fixtures, registered once in tests/conftest.py: every test module asks for them by name. (Imported into a
# test module, a fixture is defined again there, and a session fixture defined twice is built twice.)
@pytest.fixture(scope="session")
def qwen_untrained(tmp_path_factory) -> Path:
    """Random-weight Qwen-like checkpoint (tokenizer and template tests)."""
    return build_qwen_like(tmp_path_factory.mktemp("qwen-untrained"))


@pytest.fixture(scope="session")
def qwen_trained(tmp_path_factory) -> Path:
    """Qwen-like checkpoint fine-tuned ~10 s to answer in '#### n<|im_end|>' turns."""
    return build_qwen_like(tmp_path_factory.mktemp("qwen-trained"), train_steps=150)


@pytest.fixture(scope="session")
def llama_untrained(tmp_path_factory) -> Path:
    """Random-weight Llama-like checkpoint whose tokenizer adds BOS and whose template writes it."""
    return build_llama_like(tmp_path_factory.mktemp("llama-untrained"))
