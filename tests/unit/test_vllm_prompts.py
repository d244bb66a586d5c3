"""The vLLM backend sees the prompts the transformers backend sees: token ids from prompt_format (chat template,
system prompt, BOS once), every EOS id as a stop id, and truncation read from finish_reason. vLLM itself is
replaced by a stand-in module (CPU machines have none)."""

import sys
import types
from dataclasses import dataclass

from essaflow.config import ModelConfig
from essaflow.generation.prompt_format import PromptFormat, prompt_ids
from essaflow.generation.sampling import VLLMGenerator
from essaflow.model.loading import load_tokenizer


@dataclass
class _Out:
    text: str
    finish_reason: str


class _LLM:
    seen: dict = {}

    def __init__(self, model, dtype, gpu_memory_utilization):
        self.model = model

    def generate(self, inputs, params):
        _LLM.seen = {"inputs": inputs, "params": params}
        reasons = ["stop", "length"]
        return [types.SimpleNamespace(outputs=[_Out(f"c{j}", reasons[j % 2]) for j in range(params.n)]) for _ in inputs]


def _fake_vllm(monkeypatch):
    mod = types.ModuleType("vllm")
    mod.LLM = _LLM
    mod.SamplingParams = lambda **kw: types.SimpleNamespace(**kw)
    monkeypatch.setitem(sys.modules, "vllm", mod)


def test_vllm_gets_rendered_token_ids_and_every_stop_id(qwen_untrained, monkeypatch):
    _fake_vllm(monkeypatch)
    fmt = PromptFormat(system_prompt="Be brief.")
    gen = VLLMGenerator(str(qwen_untrained), dtype="float32", fmt=fmt)
    out = gen.sample(["What is 2+3?", "And 4+4?"], n=2, temperature=0.0, max_new_tokens=7)
    tok = load_tokenizer(ModelConfig(name_or_path=str(qwen_untrained)))
    expected = prompt_ids(tok, ["What is 2+3?", "And 4+4?"], fmt)
    assert [i["prompt_token_ids"] for i in _LLM.seen["inputs"]] == expected
    assert _LLM.seen["params"].stop_token_ids == [tok.convert_tokens_to_ids("<|im_end|>"), tok.eos_token_id]
    assert _LLM.seen["params"].max_tokens == 7
    assert out.texts == [["c0", "c1"], ["c0", "c1"]] and out.truncated == [[False, True], [False, True]]
    assert out.truncated_share() == 0.5
