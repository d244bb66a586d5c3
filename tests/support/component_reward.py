"""A reward file with named components for the tests of per-step and per-generation component means: `low` is the
low-digit reward the random tiny models earn by chance, `bonus` a constant, so the means can be checked exactly."""

REWARD_SOURCE = """
def low_and_bonus(completion, problem):
    low = 1.0 if completion[:1] != "" and completion[:1] in "01234" else 0.0
    return {"low": low, "bonus": 0.25}
"""


def write_component_reward(root) -> str:
    """The reward file under root; returns its `eval.reward` reference."""
    path = root / "component_reward.py"
    path.write_text(REWARD_SOURCE)
    return f"{path}:low_and_bonus"
