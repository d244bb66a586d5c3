"""Built-in synthetic arithmetic: the embedded default task, deterministic by seed.

Prompts look like `123+45=` and answers like `168`; a character tokenizer covers everything.
"""

from __future__ import annotations

import random

from essaflow.data.schema import Problem

# Every character the task can produce: the tiny model's vocabulary is built from this.
ALPHABET = "0123456789+-*= "


def _operand(rng: random.Random, min_digits: int, max_digits: int) -> int:
    digits = rng.randint(min_digits, max_digits)
    low = 0 if digits == 1 else 10 ** (digits - 1)
    return rng.randint(low, 10**digits - 1)


def synthetic_problems(
    num_problems: int,
    min_digits: int = 1,
    max_digits: int = 3,
    operators: tuple[str, ...] | list[str] = ("+", "-"),
    seed: int = 0,
) -> list[Problem]:
    """Generate distinct arithmetic problems; same arguments => same list."""
    rng = random.Random(seed)
    seen: set[str] = set()
    out: list[Problem] = []
    attempts = 0
    while len(out) < num_problems:
        attempts += 1
        if attempts > num_problems * 50:
            raise ValueError(
                f"cannot draw {num_problems} distinct problems with digits {min_digits}-{max_digits} "
                f"and operators {list(operators)}"
            )
        a, b = _operand(rng, min_digits, max_digits), _operand(rng, min_digits, max_digits)
        op = rng.choice(list(operators))
        prompt = f"{a}{op}{b}="
        if prompt in seen:
            continue
        seen.add(prompt)
        value = a + b if op == "+" else a - b if op == "-" else a * b
        out.append(Problem(id=f"arith-{len(out)}", prompt=prompt, answer=str(value), metadata={"op": op}))
    return out
