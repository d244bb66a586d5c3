"""Deterministic sft / train / eval splits keyed by each problem's content hash.

A problem lands in the same split whatever order the source lists it in, and the eval split never overlaps the
others, so 'held-out' means held out.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass

from essaflow.data.schema import Problem


@dataclass(frozen=True)
class Splits:
    """The three disjoint splits."""

    sft: list[Problem]
    train: list[Problem]
    eval: list[Problem]

    def fingerprint(self) -> str:
        """Hash of all split contents: the dataset's address in storage."""
        h = hashlib.sha256()
        for name in ("sft", "train", "eval"):
            h.update(name.encode())
            for p in getattr(self, name):
                h.update(p.content_hash().encode())
        return h.hexdigest()[:16]


def split_problems(problems: list[Problem], eval_size: int, sft_fraction: float) -> Splits:
    """Order by content hash, take the first eval_size as eval, then sft_fraction of the rest as SFT."""
    if eval_size >= len(problems):
        raise ValueError(f"eval_size={eval_size} leaves no training data out of {len(problems)} problems")
    ordered = sorted(problems, key=lambda p: p.content_hash())
    eval_split, rest = ordered[:eval_size], ordered[eval_size:]
    n_sft = int(round(len(rest) * sft_fraction))
    return Splits(sft=rest[:n_sft], train=rest[n_sft:], eval=eval_split)
