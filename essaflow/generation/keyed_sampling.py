"""Batch-invariant sampling: Gumbel-max with noise from a counter-based hash instead of torch's global RNG.

Each sequence carries a row key (a hash of whatever identifies it: GRPO's (seed, step, slot, sample, round),
evaluation's (seed, problem, sample)); the noise of its token v at completion position t is a hash of (row key, t,
v). A completion therefore never depends on which other sequences share its batch, its worker, or the order they
were decoded in, and argmax(logits / T + Gumbel noise), after the top-p filter, is an exact sample of the tempered
softmax (the Gumbel-max trick). vLLM's per-request seeds give its engine the same property.
"""

from __future__ import annotations

from functools import lru_cache

import torch
from transformers import LogitsProcessor

_M32 = 0xFFFFFFFF
_KEY_OFFSET = 0x632BE5AB


def _mul32(x: torch.Tensor, c: int) -> torch.Tensor:
    """(x * c) mod 2^32 for int64 tensors holding uint32, without int64 overflow."""
    return ((x & 0xFFFF) * c + (((x >> 16) * (c & 0xFFFF)) << 16)) & _M32


def mix32(x: torch.Tensor | int) -> torch.Tensor:
    """lowbias32 integer hash (C. Wellons' hash-prospector): a good 32-bit avalanche, vectorised."""
    x = torch.as_tensor(x, dtype=torch.int64) & _M32
    x = x ^ (x >> 16)
    x = _mul32(x, 0x7FEB352D)
    x = x ^ (x >> 15)
    x = _mul32(x, 0x846CA68B)
    return x ^ (x >> 16)


def hash_keys(*parts: torch.Tensor | int) -> torch.Tensor:
    """Fold integer keys (broadcastable tensors or ints) into one uint32 hash per element."""
    h = mix32(0x9E3779B9)
    for p in parts:
        h = mix32(h ^ mix32(torch.as_tensor(p, dtype=torch.int64) + _KEY_OFFSET))
    return h


def _as_int32(x: torch.Tensor) -> torch.Tensor:
    """uint32 values held in int64 -> the same 32 bits as int32 (two's complement)."""
    return (x - ((x >> 31) << 32)).to(torch.int32)


def _mix32_int32(x: torch.Tensor) -> torch.Tensor:
    """mix32 on the 32 bits of an int32 tensor, in place: int32 products wrap mod 2^32 and a masked arithmetic
    shift is a logical one, so the bits equal mix32's at half the memory and a third of the passes. The noise of
    a whole vocabulary per row and position is the sampler's cost (a 49,152-token vocabulary at batch 256 is 12.6 M
    hashes a step)."""
    x ^= (x >> 16) & 0xFFFF
    x *= 0x7FEB352D
    x ^= (x >> 15) & 0x1FFFF
    x *= 0x846CA68B - (1 << 32)
    x ^= (x >> 16) & 0xFFFF
    return x


@lru_cache(maxsize=4)
def _vocab_mix(vocab_size: int) -> torch.Tensor:
    """mix32(v + offset) of every token id v, as int32: the part of the last fold of hash_keys(row, t, v) that
    depends on v alone, computed once per vocabulary size."""
    return _as_int32(mix32(torch.arange(vocab_size, dtype=torch.int64) + _KEY_OFFSET))


NOISE_BLOCK_ELEMENTS = 1 << 19
"""The sampler draws its noise this many (row, token) pairs at a time: a block's passes stay in the CPU's cache,
where a whole batch's (12.6 M pairs at batch 256 and a 49,152-token vocabulary) would stream through memory a
dozen times."""


def gumbel_noise(row_keys: torch.Tensor, t: int, vocab_size: int) -> torch.Tensor:
    """The Gumbel noise -log(-log(u)) of every token id v < vocab_size at completion position t, float64
    [rows, vocab_size], where u = (hash_keys(row_key, t, v) + 0.5) / 2^32 (bit for bit)."""
    row = _as_int32(hash_keys(row_keys.view(-1, 1), t))
    h = _mix32_int32(row ^ _vocab_mix(vocab_size)[None, :])
    u = h.view(torch.uint32).double().add_(0.5).mul_(2.0**-32)
    return u.log_().neg_().log_().neg_()


class GumbelSampler(LogitsProcessor):
    """Turns HF greedy decoding into exact, batch-invariant sampling: argmax(logits / T + Gumbel noise).

    row_keys[b] is the key of sequence b (the module doc); the noise of position t and token v is a hash of
    (row_key, t, v), so it is the same in any batch.
    """

    def __init__(self, row_keys: torch.Tensor, prompt_width: int, temperature: float, top_p: float = 1.0):
        self.row_keys = row_keys.view(-1, 1)
        self.prompt_width = prompt_width
        self.temperature = temperature
        self.top_p = top_p

    def __call__(self, input_ids: torch.LongTensor, scores: torch.Tensor) -> torch.Tensor:
        return self.scores_at(input_ids.shape[1] - self.prompt_width, scores)

    def scores_at(self, t: int, scores: torch.Tensor, rows: torch.Tensor | None = None) -> torch.Tensor:
        """The noisy tempered scores of completion position t (their argmax is the sample); `rows`: which of the
        sampler's rows `scores` holds (None: all of them)."""
        keys = self.row_keys if rows is None else self.row_keys[rows.cpu()]
        scores = scores / self.temperature
        if self.top_p < 1.0:
            sorted_scores, order = scores.sort(dim=-1, descending=True)
            cum = sorted_scores.softmax(dim=-1).cumsum(dim=-1)
            drop_sorted = (cum - sorted_scores.softmax(dim=-1)) >= self.top_p  # keep the smallest set reaching top_p
            drop = drop_sorted.scatter(-1, order, drop_sorted)
            scores = scores.masked_fill(drop, float("-inf"))
        keys, vocab = keys.cpu(), scores.shape[-1]
        block = max(1, NOISE_BLOCK_ELEMENTS // vocab)
        for start in range(0, len(keys), block):
            noise = gumbel_noise(keys[start : start + block], t, vocab)
            scores[start : start + block] += noise.to(device=scores.device, dtype=scores.dtype)
        return scores
