"""A reward of your own for the example task: it reads the problem's fields, not only its answer, and gives partial
credit in named components (docs/rewards.md).

`operands` and `op` are columns of problems.jsonl beyond id/prompt/answer: they reach the reward as
`problem.fields`. The two components sum to the reward: 1.0 only for the exact value, which is what
`eval.correct_threshold: 1.0` counts as correct for pass@k and F-GRPO's success rate.
"""

from __future__ import annotations


def digit_credit(completion: str, problem) -> dict[str, float]:
    """format: 0.2 when the first line is an integer; value: 0.8 for the exact value, else 0.4 times the share of
    its last digits that are right (so 123 for 128 earns something, 99 for 128 less)."""
    a, b = problem.fields["operands"]
    want = str(a + b if problem.fields["op"] == "+" else a - b)
    got = completion.strip().split("\n", 1)[0].strip() if completion.strip() else ""
    if not got.lstrip("-").isdigit():
        return {"format": 0.0, "value": 0.0}
    if got == want:
        return {"format": 0.2, "value": 0.8}
    right = sum(x == y for x, y in zip(reversed(got), reversed(want)))
    return {"format": 0.2, "value": 0.4 * right / max(len(want), len(got))}
