"""What a pipeline run's stages load in this process, loaded ahead while something else starts.

A command that runs the finetune flow in its own process starts Prefect's temporary server first, and while that
starts (10-20 s on 2 cores) loads what the flow's stages would load in order: the MLflow store (on a first run, its
tables created) and the model stack's imports (torch, transformers, peft, the evaluation, the trainer and Ray). Each
step is timed as the stage that would have run it times it (the store as tracking, the imports as compute, as
build_base_model counts its own), and the steps stop once the server answers: a run that skips after its dataset
stage need not wait for a model stack it never uses. Never imports prefect.
"""

from __future__ import annotations

import importlib
import logging
from collections.abc import Callable

from essaflow.config import PipelineConfig
from essaflow.methods import method_of
from essaflow.timing import Timer

log = logging.getLogger(__name__)

MODEL_STACK = ("essaflow.model.loading", "essaflow.judging.model_eval")
"""Modules the first model stages import (the base model, then its evaluation), in the order they need them."""


def preload(cfg: PipelineConfig, busy: Callable[[], bool]) -> dict[str, float]:
    """Load the run's tracking store, then its model stack, while `busy()` (the other start-up has not finished);
    returns the seconds spent by part (tracking, compute). Best effort: a failure here is left to the stage that
    meets it again, with its retries and its message."""
    timer = Timer()
    steps = [("tracking", lambda: _tracking_store(cfg.tracking_uri))]
    modules = [*MODEL_STACK, "essaflow.training.warm_start"]
    steps += [("compute", lambda m=m: importlib.import_module(m)) for m in modules]
    method = method_of(cfg)
    if method.trains:
        steps.append(("compute", method.preload))  # its trainer
    for part, step in steps:
        if not busy():
            break
        with timer.part(part):
            try:
                step()
            except Exception as e:  # noqa: BLE001 - the stage reports it
                log.debug("preload: %s", e)
    return {k: v for k, v in timer.timings().items() if k != "total"}


def _tracking_store(tracking_uri: str | None) -> None:
    """MLflow imported and, for a local sqlite store (`tracking_uri` as configured), opened (tables created on a
    first run): the client caches it per URI, so open_run finds it ready."""
    from essaflow.tracking.server import check_tracking, client, resolve_tracking_uri

    uri = resolve_tracking_uri(tracking_uri)
    if uri.startswith("sqlite:"):
        check_tracking(uri)
        client(uri)
    else:
        import mlflow  # noqa: F401 - a server's client opens nothing before its first request
