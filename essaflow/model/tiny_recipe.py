"""What determines the embedded tiny model (tiny.py builds it): its digest is the model's identity, read without
torch by whoever only needs to know which checkpoint a run used."""

from __future__ import annotations

import hashlib
import json
from dataclasses import asdict, dataclass, field

from essaflow.generation.config import TINY_MAX_NEW_TOKENS


@dataclass(frozen=True)
class TinyRecipe:
    """Everything that determines a tiny base checkpoint."""

    hidden_size: int = 128
    intermediate_size: int = 256
    num_layers: int = 4
    num_heads: int = 4
    max_positions: int = 64
    pretrain_steps: int = 1000
    batch_size: int = 128
    lr: float = 3e-3
    corpus_size: int = 64000
    seed: int = 1234
    # Pretraining draws from its own seed stream, not the dataset's (seed 0).
    task: dict = field(default_factory=lambda: {"min_digits": 1, "max_digits": 3, "operators": ["+", "-"]})
    """The task generator's knobs (essaflow.data.synthetic_tasks): the corpus is its problems."""
    version: int = 1
    task_name: str | None = None
    """The synthetic task pretrained on: its alphabet is the vocabulary, its problems the corpus. None: arithmetic."""
    held_out: float | None = None
    """Corpus problems whose key reads below this (the held-out region of any data.eval_fraction up to it) are left
    out, so no problem a run evaluates was seen in pretraining. None: nothing left out."""

    def digest(self) -> str:
        """The checkpoint's identity. Fields left None are out of it: an unset knob names no other checkpoint."""
        fields = {k: v for k, v in asdict(self).items() if v is not None}
        return hashlib.sha256(json.dumps(fields, sort_keys=True).encode()).hexdigest()[:12]


@dataclass(frozen=True)
class BuiltinModel:
    """A tiny model named in model.name_or_path (`builtin:...`): its recipe and how long its answers run."""

    recipe: TinyRecipe
    max_new_tokens: int
    """sampling.max_new_tokens when left unset: the task's longest answer and EOS, with room."""


BUILTIN_MODELS: dict[str, BuiltinModel] = {
    "builtin:tiny": BuiltinModel(TinyRecipe(), max_new_tokens=TINY_MAX_NEW_TOKENS),
    # batch 64: their sequences run two to four times arithmetic's length; SFT starts and build times measured in
    # docs/tasks.md
    "builtin:tiny-countdown": BuiltinModel(
        TinyRecipe(
            task_name="countdown",
            task={"count": 3, "low": 1, "high": 25, "operators": ["+", "-", "*"], "max_target": 999},
            held_out=0.1,
            batch_size=64,
        ),
        max_new_tokens=12,
    ),
    "builtin:tiny-programs": BuiltinModel(
        TinyRecipe(
            task_name="programs",
            task={
                "max_steps": 2,
                "examples": 4,
                "domain": 10,
                "kinds": ["+", "-", "*", "//", "%", "abs", "min", "max"],
            },
            held_out=0.1,
            batch_size=64,
            max_positions=96,
        ),
        max_new_tokens=28,
    ),
}
"""The built-in tiny models, one per synthetic task (docs/tasks.md)."""
