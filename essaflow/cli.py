"""`essaflow` command line. Every job prints one JSON line last, so scripts can parse the outcome."""

from __future__ import annotations

import json
import logging
import time
from pathlib import Path
from typing import Annotated, Any

import typer

from essaflow.config import ConfigError, PipelineConfig, load_config

app = typer.Typer(add_completion=False, no_args_is_help=True, help=__doc__)

ConfigOpt = Annotated[Path | None, typer.Option("--config", "-c", help="YAML preset (configs/*.yaml)")]
SetOpt = Annotated[list[str] | None, typer.Option("--set", help="dotted override, e.g. essa.population=48")]


def _load(config: Path | None, overrides: list[str] | None, **forced: Any) -> PipelineConfig:
    try:
        cfg = load_config(config, overrides)
        return cfg.model_copy(update=forced) if forced else cfg
    except ConfigError as err:
        typer.echo(f"error: {err}", err=True)
        raise typer.Exit(2) from None


def _emit(result: dict[str, Any]) -> None:
    typer.echo(json.dumps(result))


def _setup_logging(verbose: bool) -> None:
    logging.basicConfig(
        level=logging.INFO if verbose else logging.WARNING, format="%(levelname)s %(name)s: %(message)s"
    )


@app.command()
def demo(
    method: Annotated[str, typer.Option(help="essa | fgrpo | none")] = "essa",
    config: ConfigOpt = None,
    set_: SetOpt = None,
    verbose: bool = False,
) -> None:
    """The main job on the embedded default: the whole finetune pipeline (tiny model, synthetic data)."""
    _setup_logging(verbose)
    if config is None:
        preset = {"essa": "tiny-essa.yaml", "fgrpo": "tiny-fgrpo.yaml"}.get(method, "tiny.yaml")
        config = Path(__file__).resolve().parent.parent / "configs" / preset
        config = config if config.exists() else None
    cfg = _load(config, set_, method=method)
    from essaflow.demo import run_demo

    _emit(run_demo(cfg))


@app.command()
def essa(config: ConfigOpt = None, set_: SetOpt = None, verbose: bool = False) -> None:
    """SFT warm start (cached) then ESSA; prints before/after held-out accuracy as JSON last."""
    _setup_logging(verbose)
    cfg = _load(config, set_, method="essa")
    from essaflow.essa.job import run_essa_job

    _emit(run_essa_job(cfg))


@app.command()
def grpo(config: ConfigOpt = None, set_: SetOpt = None, verbose: bool = False) -> None:
    """SFT warm start (cached) then GRPO / F-GRPO; prints before/after held-out accuracy as JSON last."""
    _setup_logging(verbose)
    cfg = _load(config, set_, method="fgrpo")
    from essaflow.grpo.job import run_grpo_job

    _emit(run_grpo_job(cfg))


@app.command("check-config")
def check_config(config: ConfigOpt = None, set_: SetOpt = None) -> None:
    """Validate a config (and overrides) without running anything; prints the resolved config."""
    typer.echo(_load(config, set_).model_dump_json(indent=2))


@app.command("build-tiny")
def build_tiny(out: Annotated[Path | None, typer.Option(help="target directory")] = None) -> None:
    """(Re)build the embedded tiny base model."""
    from essaflow.tiny_model import SHIPPED, build_tiny_base

    start = time.perf_counter()
    path = build_tiny_base(out or SHIPPED)
    _emit({"path": str(path), "wall_s": round(time.perf_counter() - start, 1)})


if __name__ == "__main__":
    app()
