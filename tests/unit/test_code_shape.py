"""The shape of the code, read statically with `ast` from essaflow/, tasks/, flows/, cli/ and devstack/: a public name
means one thing, a function fits a screen, a Prefect task is a thin wrapper, and training/ holds training only.

- A public top-level function or class (no leading underscore) is defined in one module: `train`, `open_run` or
  `latest_checkpoint` in two packages would make a reader (and an import) ask which one is meant.
- No function or method is over MAX_LINES lines (docstring included), save the few in LONG_ALLOWED, each with its
  reason in the closing note of the change that allowed it; a function decorated with Prefect's `@task` in tasks/
  is at most MAX_TASK_LINES: one library call plus retries, caching, artifacts and logging.
- essaflow/training/ is the SFT warm start and the one training path: no run-lifecycle module (lease, crashed runs,
  resume, the nothing-new skip, registry versions: essaflow/runs/, essaflow/judging/) and no `evaluate*` function
  (evaluation lives with judging).
"""

from __future__ import annotations

import ast
from collections import defaultdict
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
LAYERS = ("essaflow", "tasks", "flows", "cli", "devstack")
MAX_LINES = 60
MAX_TASK_LINES = 35
#: "path:function" -> why it is longer than MAX_LINES (at most 3; the closing note of the change says why)
LONG_ALLOWED: dict[str, str] = {}
#: what essaflow/training/ must not hold: the run lifecycle and registry-version scoring live elsewhere
NOT_TRAINING = ("lease", "crash", "resume", "skip", "nothing_new", "registered")

FunctionNode = ast.FunctionDef | ast.AsyncFunctionDef


def sources(*layers: str) -> dict[str, ast.Module]:
    """Repository-relative path -> parsed module, for every .py file under the layers."""
    return {
        p.relative_to(REPO).as_posix(): ast.parse(p.read_text())
        for layer in layers
        for p in sorted((REPO / layer).rglob("*.py"))
    }


def public_definitions(trees: dict[str, ast.Module]) -> dict[str, list[str]]:
    """Public top-level function and class name -> the modules defining it."""
    where: dict[str, list[str]] = defaultdict(list)
    for path, tree in trees.items():
        for node in tree.body:
            if isinstance(node, FunctionNode | ast.ClassDef) and not node.name.startswith("_"):
                where[node.name].append(path)
    return where


def function_lengths(trees: dict[str, ast.Module]) -> dict[str, int]:
    """ "path:name" -> lines, for every function and method at any depth (a name defined twice in a file: the
    longer)."""
    lengths: dict[str, int] = {}
    for path, tree in trees.items():
        for node in ast.walk(tree):
            if isinstance(node, FunctionNode):
                key = f"{path}:{node.name}"
                lengths[key] = max(lengths.get(key, 0), node.end_lineno - node.lineno + 1)
    return lengths


def is_prefect_task(node: FunctionNode) -> bool:
    """Decorated with `@task`, `@task(...)`, `@prefect.task` or `@prefect.task(...)`."""
    for decorator in node.decorator_list:
        target = decorator.func if isinstance(decorator, ast.Call) else decorator
        if (isinstance(target, ast.Name) and target.id == "task") or (
            isinstance(target, ast.Attribute) and target.attr == "task"
        ):
            return True
    return False


def test_the_checks_read_the_tree_as_described():
    tree = {
        "a.py": ast.parse("def f():\n    pass\n\n\nclass C:\n    def m(self):\n        return 1\n\n\ndef _g(): ...")
    }
    tree["b.py"] = ast.parse("from prefect import task\n\n\n@task(name='f')\ndef f():\n    return 2\n")
    assert public_definitions(tree) == {"f": ["a.py", "b.py"], "C": ["a.py"]}
    assert function_lengths(tree) == {"a.py:f": 2, "a.py:m": 2, "a.py:_g": 1, "b.py:f": 2}
    assert [n.name for n in ast.walk(tree["b.py"]) if isinstance(n, FunctionNode) and is_prefect_task(n)] == ["f"]
    assert len(sources(*LAYERS)) > 100


def test_no_public_name_is_defined_in_two_modules():
    twice = {name: paths for name, paths in public_definitions(sources(*LAYERS)).items() if len(paths) > 1}
    assert not twice, "one public name, two meanings:\n" + "\n".join(f"{n}: {', '.join(p)}" for n, p in twice.items())


def test_no_function_is_longer_than_a_screen():
    assert len(LONG_ALLOWED) <= 3, "at most 3 long functions, each justified"
    long = {f: n for f, n in function_lengths(sources(*LAYERS)).items() if n > MAX_LINES and f not in LONG_ALLOWED}
    assert not long, f"functions over {MAX_LINES} lines:\n" + "\n".join(f"{n} {f}" for f, n in sorted(long.items()))


def test_every_prefect_task_is_thin():
    tasks = {
        f"{path}:{node.name}": node.end_lineno - node.lineno + 1
        for path, tree in sources("tasks").items()
        for node in ast.walk(tree)
        if isinstance(node, FunctionNode) and is_prefect_task(node)
    }
    assert len(tasks) >= 10, tasks  # the pipeline's tasks were found
    fat = {name: n for name, n in tasks.items() if n > MAX_TASK_LINES}
    assert not fat, f"Prefect tasks over {MAX_TASK_LINES} lines:\n" + "\n".join(f"{n} {t}" for t, n in fat.items())


def test_training_holds_no_run_lifecycle_module_and_no_evaluation():
    training = sources("essaflow/training")
    lifecycle = [p for p in training if any(word in Path(p).stem for word in NOT_TRAINING)]
    evaluating = [
        f"{path}:{node.name}"
        for path, tree in training.items()
        for node in ast.walk(tree)
        if isinstance(node, FunctionNode) and node.name.lstrip("_").startswith("evaluate")
    ]
    assert not lifecycle, f"run-lifecycle modules in essaflow/training/ (they belong in essaflow/runs/): {lifecycle}"
    assert not evaluating, f"evaluation in essaflow/training/ (it belongs with judging): {evaluating}"
