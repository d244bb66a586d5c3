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
