"""The retry policy every pipeline task declares: which failures get retried, and with what backoff."""

from __future__ import annotations

import pytest

from essaflow.config import ConfigError
from essaflow.data import BadRowsError
from essaflow.storage import StorageError
from essaflow.tracking import TrackingError
from tasks import data, evaluation, model, register, training
from tasks.retry import retry_policy, transient_only


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
        (StorageError("bad key", "credentials"), False),
        (StorageError("bad uri", "invalid"), False),
        (StorageError("other artifact there", "conflict"), False),
        (ConfigError("essa.population must be even"), False),
        (BadRowsError("train.jsonl", [(3, "no answer")]), False),
        (TrackingError("mlflow unreachable"), False),
        (ImportError("no vllm"), False),
    ],
)
def test_only_failures_a_retry_can_fix_are_retried(exc, retried):
    assert transient_only(None, None, Failed(exc)) is retried


def test_every_pipeline_task_declares_the_policy():
    tasks = [
        data.prepare_dataset,
        model.build_base_model,
        training.warm_start,
        training.train,
        evaluation.evaluate,
        evaluation.evaluate_registered,
        register.register,
    ]
    for t in tasks:
        assert t.retries >= 2 and t.retry_condition_fn is transient_only, t.name
        assert t.retry_jitter_factor == 0.5
    assert training.train.retry_delay_seconds == [5, 10]  # a crashed trainer gets longer before it resumes
    assert retry_policy(retries=3)["retry_delay_seconds"](3) == [2, 4, 8]
