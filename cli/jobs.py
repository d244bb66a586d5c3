"""`essaflow essa|grpo|build-tiny`: library jobs run directly, without Prefect."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Annotated

import typer

from cli.common import ConfigOpt, SetOpt, emit, load, setup_logging


def essa(config: ConfigOpt = None, set_: SetOpt = None, verbose: bool = False) -> None:
    """SFT warm start (cached) then ESSA; prints before/after held-out accuracy as JSON last."""
    setup_logging(verbose)
    cfg = load(config, set_, method="essa")
    from essaflow.job import run_training_job

    emit(run_training_job(cfg))


def grpo(config: ConfigOpt = None, set_: SetOpt = None, verbose: bool = False) -> None:
    """SFT warm start (cached) then GRPO / F-GRPO; prints before/after held-out accuracy as JSON last."""
    setup_logging(verbose)
    cfg = load(config, set_, method="fgrpo")
    from essaflow.job import run_training_job

    emit(run_training_job(cfg))


def build_tiny(out: Annotated[Path | None, typer.Option(help="target directory")] = None) -> None:
    """(Re)build the embedded tiny base model."""
    from essaflow.tiny_model import SHIPPED, build_tiny_base

    start = time.perf_counter()
    path = build_tiny_base(out or SHIPPED)
    emit({"path": str(path), "wall_s": round(time.perf_counter() - start, 1)})
