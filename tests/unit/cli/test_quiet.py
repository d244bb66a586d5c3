"""The terminal of a command holds no library noise: each filter matches what the library really prints, and only
that (the lines themselves: tests/e2e and `make demo`)."""

from __future__ import annotations

import logging
import warnings

from mlflow.utils.warnings_utils import color_warning

from cli.quiet import QUIET_LOGGERS, quiet_libraries
from essaflow.tracking.pyfunc_model import TYPE_HINT_WARNING


def test_quiet_libraries_raises_the_bookkeeping_loggers_to_warning(monkeypatch):
    for name in QUIET_LOGGERS:
        monkeypatch.setattr(logging.getLogger(name), "level", logging.NOTSET)
    quiet_libraries()
    assert {logging.getLogger(n).getEffectiveLevel() for n in QUIET_LOGGERS} == {logging.WARNING}
    assert "mlflow.store.db.utils" in QUIET_LOGGERS  # "Creating initial MLflow database tables..."


def test_mlflows_coloured_type_hint_warning_is_ignored_and_nothing_else():
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        warnings.filterwarnings("ignore", message=TYPE_HINT_WARNING, category=UserWarning)
        # as MLflow warns about a PythonModel whose predict has no type hints: yellow, an ANSI escape first
        color_warning("Add type hints to the `predict` method to enable data validation", stacklevel=1, color="yellow")
        warnings.warn("Add type hints to the `predict` method (uncoloured)", UserWarning, stacklevel=1)
        color_warning("Type hint used in the model's predict function is not supported", stacklevel=1, color="red")
    assert [str(w.message) for w in caught] == [caught[0].message.args[0]] and "not supported" in str(caught[0].message)
