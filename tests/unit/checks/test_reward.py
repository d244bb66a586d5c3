"""`check-config` tries the reward before anything runs: it imports, takes two arguments, reads only fields the
data has, and gives the data's own reference answers full marks (else a warning naming the rows)."""

from __future__ import annotations

import json
import textwrap
from pathlib import Path

from typer.testing import CliRunner

from cli.main import app
from essaflow.checks.reward import fields_required
from essaflow.judging.reward_ref import resolve_reward_ref

GOOD = """
    def graded(completion, problem):
        a, b = problem.fields["operands"]
        unit = problem.fields.get("unit", "")
        return {"format": 0.2 * completion.strip().lstrip("-").isdigit(), "value": 0.8 * (completion == problem.answer)}
"""


def data_file(tmp_path: Path, rows: int = 60, wrong: tuple[int, ...] = ()) -> Path:
    path = tmp_path / "problems.jsonl"
    lines = []
    for i in range(rows):
        a, b = i + 2, i + 5
        answer = str(a + b + (1 if i in wrong else 0))
        lines.append(json.dumps({"id": f"p{i}", "prompt": f"{a}+{b}=", "answer": answer, "operands": [a, b]}))
    path.write_text("\n".join(lines) + "\n")
    return path


def reward_file(tmp_path: Path, body: str) -> Path:
    path = tmp_path / "my_reward.py"
    path.write_text(textwrap.dedent(body))
    return path


def check(data: Path, reward: str, *more: str):
    args = ["check-config", "--set", "data.source=file", "--set", f"data.path={data}", "--set", "data.eval_size=4"]
    args += ["--set", f"eval.reward={reward}"]
    for m in more:
        args += ["--set", m]
    return CliRunner().invoke(app, args)


def test_the_fields_a_reward_requires_are_found_in_its_source(tmp_path):
    ref = resolve_reward_ref(f"{reward_file(tmp_path, GOOD)}:graded")
    assert fields_required(ref) == {"operands"}  # .get("unit") reads one it can do without
    assert fields_required(resolve_reward_ref("code_tests")) == {"tests"}
    assert fields_required(resolve_reward_ref("exact_match")) == set()


def test_a_reward_that_fits_its_data_passes_and_says_what_it_tried(tmp_path):
    out = check(data_file(tmp_path), f"{reward_file(tmp_path, GOOD)}:graded")
    assert out.exit_code == 0, out.output
    assert "the first 20 reference answers all reach eval.correct_threshold=1" in out.output


def test_reference_answers_that_miss_the_threshold_are_a_warning_naming_the_rows(tmp_path):
    body = """
        def graded(completion, problem):
            a, b = problem.fields["operands"]
            return float(completion == str(a + b))
    """
    out = check(data_file(tmp_path, wrong=(1, 4)), f"{reward_file(tmp_path, body)}:graded")
    assert out.exit_code == 0, out.output
    assert "warning:" in out.output and "2 of the first 20 reference answers score below" in out.output
    assert "row 1 (id 'p1'): 0" in out.output and "row 4 (id 'p4'): 0" in out.output


def test_a_field_the_data_lacks_is_one_error_naming_it(tmp_path):
    body = """
        def graded(completion, problem):
            return float(completion == str(problem.fields["target"]))
    """
    out = check(data_file(tmp_path), f"{reward_file(tmp_path, body)}:graded")
    assert out.exit_code == 2
    assert "reads problem.fields ['target']" in out.output and "its fields: ['operands']" in out.output


def test_a_missing_file_a_missing_function_and_a_wrong_signature_are_clear_errors(tmp_path):
    data = data_file(tmp_path)
    missing = check(data, f"{tmp_path}/nowhere.py:graded")
    assert missing.exit_code == 2 and "nowhere.py" in missing.output
    no_fn = check(data, f"{reward_file(tmp_path, GOOD)}:grade")
    assert no_fn.exit_code == 2 and "grade" in no_fn.output and "Traceback" not in no_fn.output
    one_arg_file = reward_file(tmp_path, "def graded(completion):\n    return 1.0\n")
    one_arg = check(data, f"{one_arg_file}:graded")
    assert one_arg.exit_code == 2 and "must take (completion, problem) or (completion, reference)" in one_arg.output


def test_a_reward_that_raises_on_a_reference_names_the_row(tmp_path):
    body = """
        def graded(completion, problem):
            if problem.id == "p3":
                raise KeyError("no such thing")
            return 1.0
    """
    out = check(data_file(tmp_path), f"{reward_file(tmp_path, body)}:graded")
    assert out.exit_code == 0, out.output
    assert "row 3 (id 'p3'): raised" in out.output and "KeyError" in out.output
