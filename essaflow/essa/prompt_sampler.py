"""What each ESSA generation scores on: one shared minibatch and one sampling seed per generation (ESSA-v3 Alg. 1)."""

from __future__ import annotations

from typing import Any

import numpy as np

from essaflow.essa.strategy import dump_attrs, restore_attrs


def generation_seed(seed: int, generation: int) -> int:
    """Sampling seed of a generation's fitness decoding (common to all its candidates: common random numbers)."""
    return int(np.random.SeedSequence([seed, generation]).generate_state(1)[0] % (2**31 - 1))


class MinibatchSampler:
    """b prompt indices per generation, epoch-shuffled: every training prompt is used once per pass.

    Sampling without replacement across generations covers the split evenly (docs/algorithms.md sec. 6.6; the paper
    leaves the scheme open; Algorithm 1 only says "random minibatch"). When b does not divide the split, a minibatch may
    straddle two passes; it never repeats a prompt within itself as long as b <= the split size.
    """

    def __init__(self, size: int, batch: int, seed: int):
        if not 1 <= batch <= size:
            raise ValueError(f"essa.minibatch={batch} must be between 1 and the training split size {size}")
        self.size = size
        self.batch = batch
        self.rng = np.random.RandomState(seed)
        self.order = self.rng.permutation(size)
        self.pos = 0

    def next(self) -> np.ndarray:
        if self.pos + self.batch <= self.size:
            out = self.order[self.pos : self.pos + self.batch]
            self.pos += self.batch
            return out.copy()
        head = self.order[self.pos :]
        # New pass; the prompts of `head` go to its end so this minibatch never holds a prompt twice, and each
        # pass still holds every prompt exactly once.
        perm = self.rng.permutation(self.size)
        in_head = np.isin(perm, head)
        self.order = np.concatenate([perm[~in_head], perm[in_head]])
        take = self.batch - len(head)
        out = np.concatenate([head, self.order[:take]])
        self.pos = take
        return out

    def state_dict(self) -> tuple[dict[str, Any], dict[str, np.ndarray]]:
        return dump_attrs(self, "")

    def load_state_dict(self, meta: dict[str, Any], arrays: dict[str, np.ndarray]) -> None:
        restore_attrs(self, meta, arrays, "")
