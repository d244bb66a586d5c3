"""What determines the embedded tiny model (tiny.py builds it): its digest is the model's identity, read without
torch by whoever only needs to know which checkpoint a run used."""

from __future__ import annotations

import hashlib
import json
from dataclasses import asdict, dataclass, field


@dataclass(frozen=True)
class TinyRecipe:
    """Everything that determines the tiny base checkpoint."""

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
    version: int = 1

    def digest(self) -> str:
        return hashlib.sha256(json.dumps(asdict(self), sort_keys=True).encode()).hexdigest()[:12]
