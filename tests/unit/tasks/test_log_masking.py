"""Every handler Prefect sets up (its API handler, which fills the run's log in Prefect's database, and its console)
masks URI user-info and secret values once the tasks are imported, in whatever process runs a flow."""

from __future__ import annotations

import logging

from essaflow.secrets import MaskSecrets


def test_prefects_handlers_carry_the_masking_filter_once_tasks_are_imported():
    from prefect.logging.handlers import APILogHandler, PrefectConsoleHandler

    import tasks.failures  # noqa: F401 - what every task module imports

    handlers = {h for name in ("", "prefect", "prefect.flow_runs", "prefect.task_runs", "prefect.extra")
                for h in logging.getLogger(name or None).handlers}  # fmt: skip
    prefects = {h for h in handlers if type(h).__module__.startswith("prefect.")}  # not pytest's capture handlers
    kinds = {type(h) for h in prefects}
    assert APILogHandler in kinds and PrefectConsoleHandler in kinds
    for handler in prefects:
        assert sum(isinstance(f, MaskSecrets) for f in handler.filters) == 1, handler


def _pipeline_tasks():
    import importlib
    import pkgutil

    from prefect import Task

    import tasks

    for info in pkgutil.iter_modules(tasks.__path__):
        module = importlib.import_module(f"tasks.{info.name}")
        yield from (v for v in vars(module).values() if isinstance(v, Task) and v.fn.__module__ == module.__name__)


def test_every_task_masks_what_its_exception_says_before_prefect_stores_it_as_the_state():
    from prefect.states import format_exception

    from tasks.failures import masked_errors

    found = list(_pipeline_tasks())
    assert len(found) >= 15
    wrapper = masked_errors(len).__code__  # every wrapped task runs this code
    unmasked = [t.name for t in found if t.fn.__code__ is not wrapper]
    assert not unmasked, f"tasks without @masked_errors under @task: {unmasked}"

    @masked_errors
    def fails() -> None:
        try:
            raise ConnectionError("Could not connect to http://user:hunter22@127.0.0.1:9/bucket")
        except ConnectionError as e:
            raise RuntimeError("MlflowException: API request to http://admin:hunter22@127.0.0.1:5000/api failed") from e

    try:
        fails()
    except RuntimeError as e:
        state_message = format_exception(e)  # what Prefect writes as the failed task run's state message
        assert "hunter22" not in state_message and "hunter22" not in str(e.__cause__)
        assert "127.0.0.1:5000" in state_message, "only the credentials are masked, not where it failed"
    else:
        raise AssertionError("the wrapped task's error was swallowed")
