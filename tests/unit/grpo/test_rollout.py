"""Batch-invariant Gumbel-max sampling draws from softmax(logits / T) (with top-p), and prompt order is stateless."""

import torch

from essaflow.generation.keyed_sampling import GumbelSampler, gumbel_noise, hash_keys, mix32
from essaflow.grpo.rollout import overlong_penalty, replacement_index, step_prompt_indices, worker_slots


def _frequencies(logits: torch.Tensor, temperature: float, top_p: float = 1.0, n: int = 40000) -> torch.Tensor:
    sampler = GumbelSampler(hash_keys(7, torch.arange(n)), prompt_width=3, temperature=temperature, top_p=top_p)
    scores = sampler(torch.zeros(n, 5, dtype=torch.long), logits.expand(n, -1).clone())
    return torch.bincount(scores.argmax(dim=-1), minlength=logits.shape[-1]).float() / n


def test_gumbel_max_samples_the_tempered_softmax():
    logits = torch.tensor([[2.0, 1.0, 0.0, -1.0]])
    for t in (1.0, 0.5):
        expected = torch.softmax(logits[0] / t, dim=-1)
        assert torch.allclose(_frequencies(logits, t), expected, atol=0.01)


def test_top_p_keeps_the_smallest_set_reaching_p_and_renormalises():
    logits = torch.log(torch.tensor([[0.5, 0.3, 0.15, 0.05]]))
    freq = _frequencies(logits, 1.0, top_p=0.7)
    assert freq[2] == 0 and freq[3] == 0
    assert torch.allclose(freq[:2], torch.tensor([0.5, 0.3]) / 0.8, atol=0.01)


def test_noise_depends_on_the_row_key_and_position_not_the_batch():
    keys = hash_keys(3, torch.arange(6))
    logits = torch.zeros(6, 9)
    whole = GumbelSampler(keys, 2, 1.0)(torch.zeros(6, 4, dtype=torch.long), logits.clone())
    part = GumbelSampler(keys[3:], 2, 1.0)(torch.zeros(3, 4, dtype=torch.long), logits[3:].clone())
    later = GumbelSampler(keys, 2, 1.0)(torch.zeros(6, 5, dtype=torch.long), logits.clone())
    assert torch.equal(whole[3:], part) and not torch.equal(whole, later)


def test_hash_is_a_uint32_and_spreads_consecutive_inputs():
    h = mix32(torch.arange(1 << 16))
    assert int(h.min()) >= 0 and int(h.max()) < 2**32
    assert len(set(h.tolist())) == 1 << 16
    assert abs(float((h & 1).float().mean()) - 0.5) < 0.01


def test_blocked_int32_noise_is_bit_for_bit_the_gumbel_of_the_keyed_hash():
    """The sampler's fast noise (int32 hashing, vocabulary part cached, row blocks) equals -log(-log(u)) of
    u = (hash_keys(row, t, v) + 0.5) / 2^32 in every bit, across row blocks and a vocabulary not a power of 2."""
    keys, vocab = hash_keys(9, torch.arange(40)), 30_001  # 40 rows: 3 blocks of 17 rows at this vocabulary
    for t in (0, 7):
        h = hash_keys(keys.view(-1, 1), t, torch.arange(vocab)[None, :])
        expected = -torch.log(-torch.log((h.double() + 0.5) / 2.0**32))
        assert torch.equal(gumbel_noise(keys, t, vocab), expected)
        logits = torch.randn(40, vocab, generator=torch.Generator().manual_seed(t))
        got = GumbelSampler(keys, 0, 0.7).scores_at(t, logits.clone())
        assert torch.equal(got, logits / 0.7 + expected.float())


def test_prompt_order_is_a_function_of_seed_and_step_and_covers_each_epoch():
    n, p = 50, 8
    seen = [i for step in range(7) for i in step_prompt_indices(step, p, n, seed=0)][:n]
    assert sorted(seen) == list(range(n))  # the first epoch is a permutation
    assert step_prompt_indices(4, p, n, 0) == step_prompt_indices(4, p, n, 0) != step_prompt_indices(4, p, n, 1)
    assert 0 <= replacement_index(0, 3, 5, 1, n) < n


def test_worker_slots_are_strided_and_partition_the_step():
    slots = [worker_slots(12, 3, r) for r in range(3)]
    assert slots[0] == [0, 3, 6, 9] and sorted(sum(slots, [])) == list(range(12))


def test_overlong_penalty_follows_dapo():
    lengths = torch.tensor([3, 4, 5, 6])
    assert overlong_penalty(lengths, max_len=6, buffer=2).tolist() == [0.0, 0.0, -0.5, -1.0]
    assert overlong_penalty(lengths, max_len=6, buffer=0).tolist() == [0.0] * 4
