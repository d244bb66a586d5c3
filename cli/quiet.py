"""The library lines a command's terminal is spared: each one named, so nothing a user can act on is hidden.

Progress, the JSON line and warnings about the user's own config and data stay. What goes is what libraries say
about themselves: MLflow creating the tables of a new sqlite store. The others are handled at their source: Ray's
token-auth warning where a local Ray starts (essaflow/cluster/connection.py sets the mode Ray would set, before it
starts), Ray's error about a restartable actor's constructor arguments by giving ESSA's scorers none (their spec
comes with `ready`: essaflow/essa/ray_pool.py), MLflow's type-hint warning where the model is defined
(essaflow/tracking/pyfunc_model.py), transformers' "Loading weights" bars and peft's missing-base-config warning
where models are loaded and adapters saved (essaflow/model/loading.py), torchao's and torch's import-time warnings
in essaflow/__init__.py.
"""

from __future__ import annotations

import logging

#: library loggers raised to WARNING: their INFO lines are the library's own bookkeeping
QUIET_LOGGERS = ("mlflow.store.db.utils",)


def quiet_libraries() -> None:
    """Raise the loggers of QUIET_LOGGERS to WARNING (their warnings and errors still print)."""
    for name in QUIET_LOGGERS:
        logging.getLogger(name).setLevel(logging.WARNING)
