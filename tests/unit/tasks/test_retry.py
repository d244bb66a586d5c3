"""The retry policy every pipeline task declares: which failures get retried, and with what backoff."""

from __future__ import annotations

import ast
import importlib
import os
import pkgutil
from pathlib import Path

import pytest
from prefect import Task

import tasks
from essaflow.config import ConfigError
from essaflow.data import BadRowsError
from essaflow.storage import StorageError
from essaflow.tracking import TrackingError
from tasks import training
from tasks.retry import retry_policy, transient_only

REPO = Path(__file__).resolve().parents[3]
#: the scale the tasks imported above were defined with
SCALE = float(os.environ.get("ESSAFLOW_RETRY_BACKOFF_SCALE", 1.0))


class Failed:
    """The part of a Prefect state transient_only reads: result() raises the task's exception."""

    def __init__(self, exc: BaseException):
        self.exc = exc

    def result(self):
        raise self.exc


@pytest.mark.parametrize(
    "exc, retried",
    [
        (ConnectionResetError("peer reset"), True),
        (TimeoutError("slow"), True),
        (RuntimeError("trainer crashed"), True),
        (StorageError("s3 down", "unreachable"), True),
        (StorageError("checksum", "integrity"), True),  # a partial download: fetching again can fix it
        (StorageError("no bucket", "missing_bucket"), False),
        (StorageError("object not found: s3://b/k", "missing_object"), False),
        (StorageError("bad key", "credentials"), False),
        (StorageError("bad uri", "invalid"), False),
        (StorageError("other artifact there", "conflict"), False),
        (ConfigError("essa.population must be even"), False),
        (BadRowsError("train.jsonl", [(3, "no answer")]), False),
        (TrackingError("mlflow unreachable"), False),
        (ImportError("no vllm"), False),
        (FileNotFoundError("data/train.jsonl"), False),
    ],
)
def test_only_failures_a_retry_can_fix_are_retried(exc, retried):
    assert transient_only(None, None, Failed(exc)) is retried


def pipeline_tasks() -> dict[str, Task]:
    """Every Prefect task defined in the tasks package, by module and name."""
    found = {}
    for info in pkgutil.iter_modules(tasks.__path__):
        module = importlib.import_module(f"tasks.{info.name}")
        for name, obj in vars(module).items():
            if isinstance(obj, Task) and obj.fn.__module__ == module.__name__:
                found[f"{info.name}.{name}"] = obj
    return found


def test_every_task_in_the_package_declares_the_one_policy():
    found = pipeline_tasks()
    expected = {"compare.open_comparison", "compare.open_arm", "compare.close_arm", "compare.write_report",
                "run.open_run", "run.close_run", "data.prepare_dataset", "model.build_base_model",
                "training.warm_start", "training.train_adapter", "evaluation.evaluate_pass_at_k",
                "evaluation.evaluate_registered",
                "register.register"}  # fmt: skip
    assert expected <= set(found), sorted(expected - set(found))
    for name, t in found.items():
        assert t.retry_condition_fn is transient_only, name
        assert t.retry_jitter_factor == 0.5, name
        assert t.on_failure_hooks and t.on_failure_hooks[0].__name__ == "on_task_failure", name
        # exponential backoff from the policy: each wait doubles the one before
        assert all(b == 2 * a for a, b in zip(t.retry_delay_seconds, t.retry_delay_seconds[1:])), name
    # preflights report an unreachable server at once; the rest retry
    preflights = ("run.open_run", "compare.open_comparison", "evaluation.check_registered")
    assert all(found[n].retries == 0 for n in preflights)
    assert all(t.retries >= 2 for n, t in found.items() if n not in preflights)


def test_backoffs_double_from_the_tasks_base():
    assert retry_policy(retries=3)["retry_delay_seconds"](3) == [2, 4, 8]
    assert training.train_adapter.retry_delay_seconds == [5 * SCALE, 10 * SCALE]  # a crashed trainer waits longer


RETRY_OPTIONS = {"retries", "retry_delay_seconds", "retry_jitter_factor", "retry_condition_fn"}


def _task_decorators(path: Path):
    """(function name, decorator call) for each `@task(...)` in a module's source."""
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.FunctionDef):
            for d in node.decorator_list:
                if isinstance(d, ast.Call) and getattr(d.func, "id", None) == "task":
                    yield node.name, d


def test_the_backoff_scale_applies_to_every_task(monkeypatch):
    monkeypatch.setenv("ESSAFLOW_RETRY_BACKOFF_SCALE", "0.1")
    assert retry_policy(retries=2, backoff_s=5)["retry_delay_seconds"](2) == [0.5, 1.0]
    assert retry_policy(retries=0)["retry_delay_seconds"](0) == []

    # so every task must take its retry options from retry_policy alone, none written beside it
    declared = [
        (path.name, *found) for path in sorted((REPO / "tasks").glob("*.py")) for found in _task_decorators(path)
    ]
    assert len(declared) == len(pipeline_tasks())
    for module, name, call in declared:
        spread = [k.value for k in call.keywords if k.arg is None]
        assert any(getattr(getattr(v, "func", None), "id", None) == "retry_policy" for v in spread), f"{module}:{name}"
        assert not RETRY_OPTIONS & {k.arg for k in call.keywords}, f"{module}:{name} writes its own retry options"
