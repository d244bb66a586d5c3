"""`check-config` tries the reward before anything runs: it imports, takes two arguments, reads only fields the
data has, and gives the data's own reference answers full marks (else a warning naming the rows); `essaflow run`
tries it again before its flow starts; code_tests' reference answers are run with their tests in the sandbox.

Processes: a reward file of yours is tried in a reward process of its own, code_tests in bubblewrap. Which fields a
reward reads (its source, no process) is in tests/unit/checks/test_reward.py; the rest of the bad-input sweep of the
commands, no process, in tests/unit/checks/test_bad_input_commands.py."""

from __future__ import annotations

import json
import textwrap
import time
from pathlib import Path

import pytest
from typer.testing import CliRunner

import cli.pipeline
from cli.main import app

pytestmark = pytest.mark.integration


@pytest.fixture(autouse=True)
def no_compute(monkeypatch):
    """Every case here must be answered before the flow starts."""

    def refuse(*_args, **_kwargs):
        raise AssertionError("the flow started")

    monkeypatch.setattr(cli.pipeline, "finetune_summary", refuse)

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


# ------------------------------------------------------------------------------------------ `essaflow run` tries it too


def _errors(result) -> list[str]:
    return [line for line in result.stderr.splitlines() if line.startswith("error: ")]


def _refused(args: list[str], code: int = 2) -> list[str]:
    """The `error:` lines of a command refused with `code`; no traceback on either stream."""
    result = CliRunner().invoke(app, args)
    assert result.exit_code == code, result.output
    assert "Traceback" not in result.output and not isinstance(result.exception, AssertionError), result.output
    return _errors(result)


def _run_refused(tmp_path, *words: str) -> list[str]:
    """`essaflow run` on an empty preset, refused before its flow: its error lines; its JSON line last."""
    preset = tmp_path / "run.yaml"
    preset.write_text("{}\n")
    result = CliRunner().invoke(app, ["run", str(preset), "--no-progress", *[a for w in words for a in ("--set", w)]])
    assert result.exit_code == 2 and "Traceback" not in result.output, result.output
    last = json.loads(result.stdout.strip().splitlines()[-1])
    assert last["stage"] == "config" and last["resume"] is None
    return _errors(result)


def _own_task(tmp_path, reward: str) -> list[str]:
    """--set words of a run on a JSONL file of 40 sums judged by a reward file of `reward`'s text (function r)."""
    rows = [{"id": f"p{i}", "prompt": f"{i}+1=", "answer": str(i + 1)} for i in range(40)]
    (tmp_path / "sums.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    (tmp_path / "my_reward.py").write_text(reward)
    return ["data.source=file", f"data.path={tmp_path / 'sums.jsonl'}", "data.eval_size=8",
            f"eval.reward={tmp_path / 'my_reward.py'}:r"]  # fmt: skip


GOOD_REWARD = "def r(completion, reference):\n    return float(completion.strip() == reference)\n"


@pytest.mark.parametrize(
    ("case", "said"),
    [
        ("string", "no score for row 0 (id 'p0'), its reference answer judged as a completion: TypeError: returned "
                   "'yes': a reward returns a number or a mapping of named numbers, each finite"),
        ("syntax", "syntax error in TMP/my_reward.py, line 1"),
        ("gone", "TMP/my_reward.py defines no function 'r' (functions there: ['renamed'])"),
    ],
)  # fmt: skip
def test_run_tries_the_reward_before_prefect_starts(tmp_path, case, said):
    words = _own_task(tmp_path, GOOD_REWARD)
    bodies = {"string": "def r(completion, reference):\n    return 'yes'\n", "syntax": "def r(completion reference):\n",
              "gone": "def renamed(completion, reference):\n    return 1.0\n"}  # fmt: skip
    (tmp_path / "my_reward.py").write_text(bodies[case])  # as a reward edited after check-config passed
    start = time.monotonic()
    errors = _run_refused(tmp_path, *words)
    assert len(errors) == 1 and errors[0].startswith("error: eval.reward") and said.replace("TMP", str(tmp_path)) in \
        errors[0], errors  # fmt: skip
    assert time.monotonic() - start < 10


def test_a_run_whose_reward_and_rows_are_good_passes_the_preflight_with_its_warnings(tmp_path):
    preset = tmp_path / "run.yaml"
    preset.write_text("{}\n")
    picky = "def r(completion, reference):\n    return 0.0 if reference == '4' else 1.0\n"  # row 3's answer
    args = [a for w in _own_task(tmp_path, picky) for a in ("--set", w)]
    result = CliRunner().invoke(app, ["run", str(preset), "--no-progress", *args])
    assert isinstance(result.exception, AssertionError) and "the flow started" in str(result.exception)
    assert "warning: eval.reward" in result.stderr and "row 3 (id 'p3'): 0" in result.stderr, result.stderr


# ------------------------------------------------------------------------------------------ code_tests' references

DOUBLE = "def double(x):\n    return 2 * x\n"


def _code_rows(tmp_path, tests, answer=DOUBLE, rows: int = 24) -> list[str]:
    """check-config's arguments for a file of `rows` code problems whose tests are `tests`, reward code_tests."""
    path = tmp_path / "code.jsonl"
    path.write_text("".join(json.dumps({"id": f"c{i}", "prompt": f"double {i}", "answer": answer(i) if callable(answer)
                                        else answer, "tests": tests}) + "\n" for i in range(rows)))  # fmt: skip
    words = ["data.source=file", f"data.path={path}", "data.eval_size=4", "eval.reward=code_tests"]
    return ["check-config", "--no-machine", *[a for w in words for a in ("--set", w)]]


def test_a_sandbox_timeout_too_short_for_the_references_names_the_limit_not_the_answers(tmp_path):
    args = _code_rows(tmp_path, "assert double(2) == 4\n") + ["--set", "eval.sandbox.timeout_s=0.001"]
    assert _refused(args) == [
        "error: eval.reward code_tests: every one of the first 20 reference answers, run with its tests, ran past the "
        "sandbox's limits (eval.sandbox.timeout_s=0.001 s, eval.sandbox.cpu_s=5): raise them (or give references "
        "that end): every completion would be stopped and score 0"
    ]


def test_code_tests_references_that_fail_are_a_warning_saying_why(tmp_path):
    answers = {3: "def double(x):\n    return x\n", 5: "def double(x) return 2"}
    result = CliRunner().invoke(app, _code_rows(tmp_path, "assert double(2) == 4\n", lambda i: answers.get(i, DOUBLE)))
    assert result.exit_code == 0, result.output
    said = ("warning: eval.reward code_tests: 2 of the first 20 reference answers score below "
            "eval.correct_threshold=1 when judged as completions: row 3 (id 'c3'): 0 (it failed: AssertionError); "
            "row 5 (id 'c5'): 0 (its program is no Python (SyntaxError, line 1: expected ':'))")  # fmt: skip
    assert said in result.stderr.splitlines(), result.stderr
