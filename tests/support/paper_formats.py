"""Small data files in the formats the paper recipes read (configs/essa-*.yaml, configs/fgrpo-*.yaml).

- GSM8K (`openai/gsm8k`, JSONL): `question`, `answer` = worked solution ending in "#### <number>".
- MATH as PRM800K ships it (`prm800k/math_splits/train.jsonl`, JSONL): `problem`, `solution` with the final answer in
  the last \\boxed{}, plus `answer`, `subject`, `level`, `unique_id`.
- DeepScaleR (`agentica-org/DeepScaleR-Preview-Dataset`, one JSON array `deepscaler.json`): `problem`, `answer`
  (the final answer, no \\boxed{}), `solution`.

The problems are one-step additions, so a tiny model can learn them in a few steps; every file is a pure function
of (n, seed).
"""

from __future__ import annotations

import json
import random
from pathlib import Path


def _pairs(n: int, seed: int, high: int = 60) -> list[tuple[int, int]]:
    rng = random.Random(seed)
    return [(rng.randint(1, high), rng.randint(1, high)) for _ in range(n)]


def write_gsm8k(path: Path, n: int, seed: int = 0) -> Path:
    rows = [
        {
            "question": f"Tom has {a} apples and buys {b} more. How many apples does he have?",
            "answer": f"He has {a} + {b} = <<{a}+{b}={a + b}>>{a + b} apples.\n#### {a + b}",
        }
        for a, b in _pairs(n, seed)
    ]
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


def write_math(path: Path, n: int, seed: int = 0) -> Path:
    rows = [
        {
            "problem": f"What is ${a} + {b}$?",
            "solution": f"Adding, ${a} + {b} = {a + b}$, so the answer is $\\boxed{{{a + b}}}$.",
            "answer": str(a + b),
            "subject": "Prealgebra",
            "level": 1,
            "unique_id": f"test/prealgebra/{i}.json",
        }
        for i, (a, b) in enumerate(_pairs(n, seed))
    ]
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


def write_deepscaler(path: Path, n: int, seed: int = 0, high: int = 60) -> Path:
    """`high`: the largest operand. Small sums (high=4: 2..8) let a barely trained model hit some answers by chance,
    so rollout groups mix right and wrong answers and policy updates have non-zero advantages."""
    rows = [
        {
            "problem": f"Tom has {a} apples and buys {b} more. How many apples does he have? (#{i})",
            "answer": str(a + b),
            "solution": f"We have ${a} + {b} = {a + b}$. The answer is $\\boxed{{{a + b}}}$.",
        }
        for i, (a, b) in enumerate(_pairs(n, seed, high))
    ]
    path.write_text(json.dumps(rows, indent=1))
    return path
