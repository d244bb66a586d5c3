"""The terminal of a command holds no library noise: each filter matches what the library really prints, and only
that (the lines themselves: tests/e2e and `make demo`)."""

from __future__ import annotations

import logging
import runpy
import warnings

from mlflow.pyfunc import PythonModel

from cli.quiet import QUIET_LOGGERS, quiet_libraries
from essaflow.tracking.registration import PYFUNC_SOURCE


def test_quiet_libraries_raises_the_bookkeeping_loggers_to_warning(monkeypatch):
    for name in QUIET_LOGGERS:
        monkeypatch.setattr(logging.getLogger(name), "level", logging.NOTSET)
    quiet_libraries()
    assert {logging.getLogger(n).getEffectiveLevel() for n in QUIET_LOGGERS} == {logging.WARNING}
    assert "mlflow.store.db.utils" in QUIET_LOGGERS  # "Creating initial MLflow database tables..."


def test_the_registered_models_class_is_defined_without_mlflows_type_hint_warning():
    """MLflow checks a PythonModel's predict for type hints under a warnings filter of its own ("once", pushed in
    front of any of ours), so the warning printed at every registration whatever we filtered; the class opts out of
    the check instead (essaflow/tracking/pyfunc_model.py)."""
    warnings.onceregistry.clear()  # "once": a class defined earlier in this process must not hide the control below
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        runpy.run_path(str(PYFUNC_SOURCE))  # as MLflow runs the model's file (save_model, load_model)

        class Bare(PythonModel):  # the control: a predict without type hints and without the opt-out
            def predict(self, context, model_input, params=None):
                return model_input

    hints = [str(w.message) for w in caught if "Add type hints to the `predict` method" in str(w.message)]
    assert len(hints) == 1, hints  # Bare's, and only Bare's
