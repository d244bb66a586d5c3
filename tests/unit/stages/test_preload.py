"""Loading ahead while Prefect's server starts (essaflow/stages/preload.py): the tracking store, then the model stack in
the order the stages need it, stopping once the other start-up is done, each step timed as its stage counts it."""

from __future__ import annotations

import pytest

from essaflow.config import PipelineConfig
from essaflow.methods import METHODS
from essaflow.stages import preload as preload_module
from essaflow.stages.preload import MODEL_STACK, preload


@pytest.fixture
def loaded(monkeypatch) -> list[str]:
    """What preload loads, in order, without loading it."""
    seen: list[str] = []
    monkeypatch.setattr(preload_module, "_tracking_store", lambda uri: seen.append("tracking store"))
    monkeypatch.setattr(preload_module.importlib, "import_module", seen.append)
    for name in METHODS:  # a method's own step: its trainer
        monkeypatch.setattr(METHODS.get(name), "preload", lambda name=name: seen.append(f"{name} trainer"))
    return seen


def test_nothing_is_loaded_once_the_other_start_up_is_done(loaded):
    assert preload(PipelineConfig(method="essa"), busy=lambda: False) == {}
    assert loaded == []


def test_the_store_then_the_model_stack_then_the_trainer_load_while_the_server_starts(loaded):
    parts = preload(PipelineConfig(method="essa"), busy=lambda: True)

    assert loaded == ["tracking store", *MODEL_STACK, "essaflow.training.warm_start", "essa trainer"]
    assert set(parts) == {"tracking", "compute"}  # as open_run and build_base_model time them


def test_loading_stops_at_the_first_check_after_the_server_answers(loaded):
    answers = iter([True, True, False])
    parts = preload(PipelineConfig(method="fgrpo"), busy=lambda: next(answers))

    assert loaded == ["tracking store", MODEL_STACK[0]]
    assert set(parts) == {"tracking", "compute"}


def test_a_step_that_fails_is_left_to_the_stage_that_meets_it_again(loaded, monkeypatch):
    def broken(uri):
        raise ConnectionError("MLflow is down")

    monkeypatch.setattr(preload_module, "_tracking_store", broken)
    parts = preload(PipelineConfig(method="none"), busy=lambda: True)

    assert loaded == [*MODEL_STACK, "essaflow.training.warm_start"]  # method none trains nothing: no trainer
    assert "tracking" in parts
