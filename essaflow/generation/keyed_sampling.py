"""Batch-invariant sampling: Gumbel-max with noise from a counter-based hash instead of torch's global RNG.

Each sequence carries a row key (a hash of whatever identifies it: GRPO's (seed, step, slot, sample, round),
evaluation's (seed, problem, sample)); the noise of its token v at completion position t is a hash of (row key, t,
v). A completion therefore never depends on which other sequences share its batch, its worker, or the order they
were decoded in, and argmax(logits / T + Gumbel noise), after the top-p filter, is an exact sample of the tempered
softmax (the Gumbel-max trick). vLLM's per-request seeds give its engine the same property.
"""

from __future__ import annotations

import torch
from transformers import LogitsProcessor

_M32 = 0xFFFFFFFF


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
        h = mix32(h ^ mix32(torch.as_tensor(p, dtype=torch.int64) + 0x632BE5AB))
    return h


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
        vocab = torch.arange(scores.shape[-1], dtype=torch.int64)
        h = hash_keys(keys.cpu(), t, vocab[None, :])
        u = (h.double() + 0.5) / 2.0**32
        gumbel = -torch.log(-torch.log(u))
        return scores + gumbel.to(device=scores.device, dtype=scores.dtype)
