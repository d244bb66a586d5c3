"""Deterministic sft / train / eval splits, each problem's split a function of its own problem key.

A problem's key (`Problem.problem_key`, the hash of its prompt) is read as two numbers in [0, 1): the first below
`data.eval_fraction` puts the problem in the held-out region, the second below `data.sft_fraction` puts a training
problem in the SFT split. Neither depends on the other problems, so a source that grows never moves a held-out
problem into training, the same problem under two ids lands in one split, and the source's order does not matter.

`data.eval_size` caps how many held-out problems are evaluated: the ones with the smallest keys. The rest of the
region (`held_out_unused`) is trained on by nobody: when new problems push an evaluated one past the cap, it stays
out of training. With a separate held-out source (`eval.data`) the training source has no region: all of it is
sft/train, less the problems that are also in the held-out source (`eval_overlap_dropped`). See docs/data.md.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, field

from essaflow.data.errors import DataError
from essaflow.data.schema import Problem

_SCALE = float(1 << 64)


@dataclass(frozen=True)
class Splits:
    """The three disjoint splits, and the problems left out of all three (counts, not part of the content)."""

    sft: list[Problem]
    train: list[Problem]
    eval: list[Problem]
    held_out_unused: int = field(default=0, compare=False)
    """Held-out problems past the data.eval_size cap (of the region, or of eval.data): evaluated by nobody, trained
    on by nobody."""
    eval_overlap_dropped: int = field(default=0, compare=False)
    """Training-source problems dropped because the held-out source (eval.data) has them too."""

    def fingerprint(self) -> str:
        """Hash of all split contents: the dataset's address in storage."""
        h = hashlib.sha256()
        for name in ("sft", "train", "eval"):
            h.update(name.encode())
            for p in getattr(self, name):
                h.update(p.content_hash().encode())
        return h.hexdigest()[:16]

    def counts(self) -> dict[str, int]:
        """What was left out, by reason (for the run's JSON, MLflow and the summary)."""
        return {"held_out_unused": self.held_out_unused, "eval_overlap_dropped": self.eval_overlap_dropped}


def key_points(problem: Problem) -> tuple[float, float]:
    """The problem key as two independent uniforms in [0, 1): (held-out draw, SFT draw)."""
    key = problem.problem_key()
    return int(key[:16], 16) / _SCALE, int(key[16:32], 16) / _SCALE


def _ordered(problems: list[Problem]) -> list[Problem]:
    return sorted(problems, key=lambda p: (p.problem_key(), p.content_hash()))


def _capped(held_out: list[Problem], eval_size: int) -> tuple[list[Problem], int]:
    """The eval_size held-out problems with the smallest keys (duplicates of one problem count once)."""
    kept: list[Problem] = []
    keys: set[str] = set()
    for p in _ordered(held_out):
        key = p.problem_key()
        if key in keys or len(keys) < eval_size:
            keys.add(key)
            kept.append(p)
    return kept, len(held_out) - len(kept)


def split_problems(
    problems: list[Problem],
    eval_size: int,
    sft_fraction: float,
    eval_fraction: float = 0.1,
    eval_problems: list[Problem] | None = None,
) -> Splits:
    """Split by threshold on each problem's key; ``eval_problems`` (eval.data) replaces the held-out region."""
    # eval_size is a cap on the held-out region, not a share of the source: 400 problems with eval_size=400 hold
    # out ~eval_fraction of them and evaluate all of those
    if eval_problems is None:
        region = [p for p in problems if key_points(p)[0] < eval_fraction]
        training = [p for p in problems if key_points(p)[0] >= eval_fraction]
        dropped = 0
    else:
        region = list(eval_problems)
        held = {p.problem_key() for p in region}
        training = [p for p in problems if p.problem_key() not in held]
        dropped = len(problems) - len(training)
    if not training and eval_fraction < 1.0:  # 1.0: an evaluation set (DataConfig.held_out_fraction), by design
        raise DataError(
            f"no training data left out of {len(problems)} problems"
            + (f" (data.eval_fraction={eval_fraction} holds them all out)" if eval_problems is None else "")
        )
    if not region:
        raise DataError(
            f"no problem held out: none of the {len(problems)} problems has a key below data.eval_fraction="
            f"{eval_fraction}; raise data.eval_fraction or name a held-out source (eval.data)"
        )
    evaluated, unused = _capped(region, eval_size)
    sft = [p for p in training if key_points(p)[1] < sft_fraction]
    train = [p for p in training if key_points(p)[1] >= sft_fraction]
    return Splits(
        sft=_ordered(sft),
        train=_ordered(train),
        eval=evaluated,
        held_out_unused=unused,
        eval_overlap_dropped=dropped,
    )
