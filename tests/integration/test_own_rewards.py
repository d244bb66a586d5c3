"""Rewards of the user's own: named by file or module, given the problem and its fields, returning components,
failing (or scoring 0) with the problem named, stopped when they hang; code_tests run in the sandbox. Processes: a
reward of yours is loaded and called in reward processes of its own, code_tests in bubblewrap. What starts none
(where a reward file is found, its digest, the config's refusals) is in tests/unit/judging/test_own_rewards.py."""

from __future__ import annotations

import sys
import textwrap
import time
from pathlib import Path

import pytest

from essaflow.data.schema import Problem
from essaflow.judging.config import EvalConfig
from essaflow.judging.judge import RewardError, judge_for
from essaflow.judging.reward_ref import RewardRefError, load_reward_function, resolve_reward_ref

pytestmark = pytest.mark.integration
P = [
    Problem(id="a", prompt="2+3=", answer="5", fields={"operands": [2, 3], "op": "+"}),
    Problem(id="b", prompt="9-4=", answer="5", fields={"operands": [9, 4], "op": "-"}),
]


def write(tmp_path: Path, body: str, name: str = "my_reward.py") -> Path:
    path = tmp_path / name
    path.write_text(textwrap.dedent(body))
    return path


def test_a_file_reward_gets_the_problem_and_its_fields_and_returns_components(tmp_path):
    path = write(
        tmp_path,
        """
        def graded(completion, problem):
            a, b = problem.fields["operands"]
            want = a + b if problem.fields["op"] == "+" else a - b
            return {"format": 0.25 * completion.isdigit(), "value": 0.75 * (completion == str(want))}
    """,
    )
    judge = judge_for(EvalConfig(reward=f"{path}:graded", correct_threshold=1.0))
    scores = judge.score(["5", "6"], P)
    assert scores.rewards == [1.0, 0.25]
    assert scores.correct == [True, False]
    assert scores.components == {"format": [0.25, 0.25], "value": [0.75, 0.0]}
    assert scores.component_means() == {"format": 0.25, "value": 0.375}


def test_the_two_argument_form_receives_the_reference_text(tmp_path):
    path = write(tmp_path, "def same(completion, reference):\n    return float(completion == reference)\n")
    judge = judge_for(EvalConfig(reward=f"{path}:same"))
    assert judge.score(["5", "4"], P).rewards == [1.0, 0.0]


def test_a_module_reward_is_read_by_its_source(tmp_path, monkeypatch):
    body = "def first_digit(completion, problem):\n    return 1.0 if completion[:1] == problem.answer[:1] else 0\n"
    write(tmp_path, body, "task_rewards_mod.py")
    monkeypatch.syspath_prepend(str(tmp_path))
    cfg = EvalConfig(reward="task_rewards_mod:first_digit")
    assert cfg.reward_digest == resolve_reward_ref("task_rewards_mod:first_digit").digest
    assert judge_for(cfg).score(["55", "7"], P).rewards == [1.0, 0.0]
    assert "task_rewards_mod" not in sys.modules  # defined from its source, not imported


def test_a_module_reward_of_a_package_imports_its_siblings_relatively(tmp_path, monkeypatch):
    pkg = tmp_path / "own_task_pkg"
    pkg.mkdir()
    write(pkg, "", "__init__.py")
    write(pkg, "def clean(text):\n    return text.strip()\n", "util.py")
    write(pkg, "from .util import clean\n\ndef score(completion, reference):\n"
               "    return float(clean(completion) == reference)\n", "rewards.py")  # fmt: skip
    write(pkg, "from .rewards import score\n\ndef whole(completion, reference):\n    return 1.0\n", "__init__.py")
    monkeypatch.syspath_prepend(str(tmp_path))
    cfg = EvalConfig(reward="own_task_pkg.rewards:score")
    assert cfg.reward_digest == resolve_reward_ref(cfg.reward).digest  # the module's own text
    assert judge_for(cfg).score([" 5 ", "6"], P).rewards == [1.0, 0.0]
    assert load_reward_function(resolve_reward_ref(cfg.reward))(" 5", "5") == 1.0  # in-process, as a worker does
    assert judge_for(EvalConfig(reward="own_task_pkg:whole")).score(["x"], P[:1]).rewards == [1.0]  # __init__'s
    with pytest.raises(RewardRefError, match=r"__init__.py imports score from own_task_pkg.rewards rather than "
                                             r"defining it.*name the module that defines it "
                                             r"\(own_task_pkg.rewards:score\)"):  # fmt: skip
        judge_for(EvalConfig(reward="own_task_pkg:score"))


def test_a_stdlib_function_is_defined_in_its_package_and_its_signature_judged():
    with pytest.raises(RewardRefError, match=r"'json:loads': loads must take \(completion, problem\)"):
        judge_for(EvalConfig(reward="json:loads"))
    compiled = r"no Python source for module 'math' \(.*: built in or compiled\); a reward is defined from its source"
    with pytest.raises(RewardRefError, match=compiled):
        resolve_reward_ref("math:sqrt")


def test_a_reward_file_importing_its_sibling_says_it_must_be_self_contained(tmp_path):
    write(tmp_path, "def thing(text):\n    return text.strip()\n", "helper.py")
    sibling = write(tmp_path, "from helper import thing\n\ndef r(completion, reference):\n    return 1.0\n")
    relative = write(tmp_path, "from .helper import r\n", "relative.py")
    said = {
        sibling: r"No module named 'helper' \(helper is beside it: a reward file is defined from its own text alone.*"
                 r"cannot import its sibling files: copy what it needs from helper into it",
        relative: r"no known parent package \(a reward file is defined from its own text, outside any package: "
                  r"import absolutely, or name the reward package.module:function",
    }  # fmt: skip
    for path, words in said.items():
        with pytest.raises(RewardRefError, match=words):  # in its own process, as the run and check-config load it
            judge_for(EvalConfig(reward=f"{path}:r"))
        with pytest.raises(RewardRefError, match=words):  # in this one
            load_reward_function(resolve_reward_ref(f"{path}:r"))
    missing = write(tmp_path, "import no_such_module_anywhere\n\ndef r(c, r):\n    return 1.0\n", "missing.py")
    with pytest.raises(RewardRefError, match=r"No module named 'no_such_module_anywhere'$"):
        judge_for(EvalConfig(reward=f"{missing}:r"))


def test_bad_references_are_one_clear_error(tmp_path):
    path = write(tmp_path, "def other(completion, problem):\n    return 1.0\n")
    with pytest.raises(RewardRefError, match=r"defines no function 'r' \(functions there: \['other'\]\)"):
        judge_for(EvalConfig(reward=f"{path}:r"))
    bad = write(tmp_path, "def r(completion):\n    return 1.0\n", "one_arg.py")
    with pytest.raises(RewardRefError, match=r"must take \(completion, problem\)"):
        judge_for(EvalConfig(reward=f"{bad}:r"))
    broken = write(tmp_path, "def r(completion, problem)\n    return 1.0\n", "broken.py")
    with pytest.raises(RewardRefError, match="syntax error in .*broken.py, line 1"):
        judge_for(EvalConfig(reward=f"{broken}:r"))


def test_a_raising_reward_names_the_reward_problem_and_completion_or_scores_zero(tmp_path):
    path = write(
        tmp_path,
        """
        def fragile(completion, problem):
            if problem.id == "b":
                raise KeyError("target")
            return 1.0
    """,
    )
    with pytest.raises(RewardError, match=r"fragile.*problem 'b' \(KeyError: 'target'\); completion starts 'oops'"):
        judge_for(EvalConfig(reward=f"{path}:fragile")).score(["5", "oops"], P)
    scores = judge_for(EvalConfig(reward=f"{path}:fragile", reward_errors="zero")).score(["5", "oops"], P)
    assert scores.rewards == [1.0, 0.0] and scores.errors == 1


def test_a_hanging_reward_is_stopped_by_its_timeout_and_the_next_call_scores(tmp_path):
    path = write(
        tmp_path,
        """
        import time
        def slow(completion, problem):
            if completion == "hang":
                time.sleep(60)
            return 1.0
    """,
    )
    cfg = EvalConfig(reward=f"{path}:slow", reward_errors="zero", reward_timeout_s=0.5)
    start = time.monotonic()
    scores = judge_for(cfg).score(["hang", "5"], P)
    assert scores.rewards == [0.0, 1.0] and scores.errors == 1
    assert time.monotonic() - start < 5


def test_a_reward_returning_no_number_is_an_error(tmp_path):
    path = write(tmp_path, "def r(completion, problem):\n    return 'yes'\n")
    with pytest.raises(RewardError, match="returned 'yes': a reward returns a number"):
        judge_for(EvalConfig(reward=f"{path}:r")).score(["5"], P[:1])


def test_code_tests_runs_the_completion_against_the_problem_tests_in_the_sandbox():
    tests = "assert double(2) == 4\nassert double(-3) == -6\n"
    problems = [Problem(id=f"c{i}", prompt="double", answer="", fields={"tests": tests}) for i in range(3)]
    honest = "```python\ndef double(x):\n    return 2 * x\n```"
    wrong = "def double(x):\n    return x + 2\n"
    escape = "import os\nos._exit(0)\ndef double(x):\n    return 2 * x\n"
    judge = judge_for(EvalConfig(reward="code_tests"))
    assert judge.score([honest, wrong, escape], problems).rewards == [1.0, 0.0, 0.0]
    no_tests = Problem(id="n", prompt="p", answer="")
    with pytest.raises(RewardError, match=r"code_tests.*missing for \['n'\]"):
        judge.score([honest], [no_tests])
