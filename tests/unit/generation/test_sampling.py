"""The transformers backend: shapes, EOS handling, determinism by seed, batching invariance for greedy."""

import pytest

from essaflow.config import ModelConfig
from essaflow.generation.sampling import TransformersGenerator
from essaflow.model.loading import load_base_model, load_tokenizer


@pytest.fixture(scope="module")
def gen():
    cfg = ModelConfig()
    return TransformersGenerator(load_base_model(cfg), load_tokenizer(cfg), batch_size=64)


def test_n_completions_per_prompt_in_order(gen):
    out = gen.generate(["1+2=", "33-4=", "105+250="], n=5, temperature=1.0, max_new_tokens=6, seed=3)
    assert [len(o) for o in out] == [5, 5, 5]
    assert all(isinstance(c, str) and len(c) <= 6 for o in out for c in o)


def test_same_seed_same_samples_different_seed_differs(gen):
    prompts = [f"{i}+{i * 7}=" for i in range(40)]
    a = gen.generate(prompts, n=4, seed=11, max_new_tokens=6)
    b = gen.generate(prompts, n=4, seed=11, max_new_tokens=6)
    c = gen.generate(prompts, n=4, seed=12, max_new_tokens=6)
    assert a == b and a != c


def test_greedy_is_independent_of_batch_composition(gen):
    prompts = ["7+8=", "123+456=", "99-100=", "5-3="]
    together = gen.generate(prompts, n=1, temperature=0.0, max_new_tokens=6)
    alone = [gen.generate([p], n=1, temperature=0.0, max_new_tokens=6)[0] for p in prompts]
    assert together == alone


def test_rollout_masks_stop_at_eos(gen):
    r = gen.rollout(["12+30=", "4-1="] * 8, temperature=1.0, max_new_tokens=6, seed=0)
    eos, pad = gen.tokenizer.eos_token_id, gen.tokenizer.pad_token_id
    for ids, mask in zip(r.completion_ids.tolist(), r.completion_mask.tolist()):
        if eos in ids:
            cut = ids.index(eos)
            assert mask[: cut + 1] == [1] * (cut + 1) and all(m == 0 for m in mask[cut + 1 :])
            assert all(t == pad for t in ids[cut + 1 :])
    assert r.prompt_mask[0].tolist()[0] == 0 or r.prompt_ids.shape[1] == 6, "prompts are left padded"
