"""What the commands share: the config options, loading a config, the JSON line last, logging, service defaults."""

from __future__ import annotations

import json
import logging
import os
from pathlib import Path
from typing import Annotated, Any, NoReturn

import typer

from essaflow.config import ConfigError, PipelineConfig, load_config
from essaflow.secrets import mask_passwords, scrub

ConfigOpt = Annotated[Path | None, typer.Option("--config", "-c", help="YAML preset (configs/*.yaml)")]
SetOpt = Annotated[list[str] | None, typer.Option("--set", help="dotted override, e.g. essa.population=48")]


def load(config: Path | None, overrides: list[str] | None, *, json_line: bool = True, **forced: Any) -> PipelineConfig:
    """The config from a preset and dotted overrides, with ``forced`` fields on top; a bad config (a YAML syntax
    error, an empty file, an unknown key, a bad value) ends the command through :func:`refuse`."""
    try:
        cfg = load_config(config, overrides)
        return cfg.model_copy(update=forced) if forced else cfg
    except ConfigError as err:
        refuse([str(err)], json_line)


def refuse(errors: list[str], json_line: bool = True) -> NoReturn:
    """Input that cannot run, found before any compute: one `error:` line on stderr per problem (URI credentials
    masked), then for a job (`json_line`) the failure's JSON line last on stdout (stage `config`, nothing to
    resume); exit status 2."""
    errors = [scrub(e) for e in errors]
    for error in errors:
        typer.echo(f"error: {error}", err=True)
    if json_line:
        emit({"error": "; ".join(errors), "stage": "config", "run_id": None, "resume": None})
    raise typer.Exit(2)


def emit(result: dict[str, Any]) -> None:
    """The command's outcome as one JSON line on stdout (the last line it prints)."""
    typer.echo(json.dumps(result))


def fail(error: str, stage: str, run_id: str | None, rerun: list[str]) -> None:
    """A failed job: one line on stderr, the failure's JSON line last on stdout (`error`, `stage`, `run_id` and the
    command that resumes the run, when there is one to resume: `rerun` empty for a failure no rerun can fix; URI
    passwords in it masked), exit status 1."""
    import shlex

    typer.echo(f"error: {stage}: {error}", err=True)
    resume = mask_passwords(shlex.join([*rerun, "--resume", run_id])) if run_id and rerun else None
    emit({"error": error, "stage": stage, "run_id": run_id, "resume": resume})
    raise typer.Exit(1)


def setup_logging(verbose: bool) -> None:
    """Plain logging for the jobs that run without Prefect."""
    logging.basicConfig(
        level=logging.INFO if verbose else logging.WARNING, format="%(levelname)s %(name)s: %(message)s"
    )


#: Quiet, local-only defaults for the services a flow talks to (the user's own settings win).
SERVICE_ENV = {
    "PREFECT_SERVER_ANALYTICS_ENABLED": "false",
    "MLFLOW_DISABLE_TELEMETRY": "true",
    "MLFLOW_ENABLE_ARTIFACTS_PROGRESS_BAR": "false",
    "PREFECT_LOGGING_EXTRA_LOGGERS": "essaflow",
    "TOKENIZERS_PARALLELISM": "false",
    # Prefect's temporary local server needs longer than its 20 s default to start on 2 busy cores.
    "PREFECT_SERVER_EPHEMERAL_STARTUP_TIMEOUT_SECONDS": "180",
}


def flow_logging(verbose: bool) -> None:
    """Flows log through Prefect's own handlers (with task run names); essaflow's loggers ride along."""
    if verbose:
        os.environ.setdefault("PREFECT_LOGGING_LEVEL", "DEBUG")


def service_env() -> None:
    """Apply SERVICE_ENV to this process, keeping whatever the user already set."""
    for key, value in SERVICE_ENV.items():
        os.environ.setdefault(key, value)
