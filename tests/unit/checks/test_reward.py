"""The fields a reward reads, found in its source before anything runs (`check-config` then tries the reward on the
data's reference answers, in a process of its own: tests/integration/test_reward_check.py)."""

from __future__ import annotations

import textwrap

from essaflow.checks.reward import fields_required
from essaflow.judging.reward_ref import resolve_reward_ref

GOOD = """
    def graded(completion, problem):
        a, b = problem.fields["operands"]
        unit = problem.fields.get("unit", "")
        return {"format": 0.2 * completion.strip().lstrip("-").isdigit(), "value": 0.8 * (completion == problem.answer)}
"""


def reward_file(tmp_path, body: str):
    path = tmp_path / "my_reward.py"
    path.write_text(textwrap.dedent(body))
    return path


def test_the_fields_a_reward_requires_are_found_in_its_source(tmp_path):
    ref = resolve_reward_ref(f"{reward_file(tmp_path, GOOD)}:graded")
    assert fields_required(ref) == {"operands"}  # .get("unit") reads one it can do without
    assert fields_required(resolve_reward_ref("code_tests")) == {"tests"}
    assert fields_required(resolve_reward_ref("exact_match")) == set()
