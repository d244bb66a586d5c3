"""`essaflow` command line. Every job prints one JSON line last, so scripts can parse the outcome."""

from __future__ import annotations

import json
import logging
import os
import time
from collections.abc import Iterator
from contextlib import contextmanager
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


#: Quiet, local-only defaults for the services a flow talks to (the user's own settings win).
SERVICE_ENV = {
    "PREFECT_SERVER_ANALYTICS_ENABLED": "false",
    "MLFLOW_DISABLE_TELEMETRY": "true",
    "MLFLOW_ENABLE_ARTIFACTS_PROGRESS_BAR": "false",
    "PREFECT_LOGGING_EXTRA_LOGGERS": "essaflow",
    "TOKENIZERS_PARALLELISM": "false",
}


def _service_env() -> None:
    for key, value in SERVICE_ENV.items():
        os.environ.setdefault(key, value)


@contextmanager
def _progress_bars(enabled: bool) -> Iterator[None]:
    """Rich bars for the pipeline's stages and for training, fed by tasks.progress while the flow runs here."""
    if not enabled:
        yield
        return
    from rich.console import Console
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    from tasks.progress import LISTENERS

    bars: dict[str, Any] = {}
    columns = (TextColumn("{task.description:>9}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn())
    with Progress(*columns, TextColumn("{task.fields[note]}"), console=Console(stderr=True)) as bar:

        def listener(stage: str, done: float, total: float, note: str) -> None:
            if stage not in bars:
                bars[stage] = bar.add_task(stage, total=total, note="")
            bar.update(bars[stage], completed=done, total=total, note=note[:60])

        LISTENERS.append(listener)
        try:
            yield
        finally:
            LISTENERS.remove(listener)


def _finetune(cfg: PipelineConfig, progress: bool) -> dict[str, Any]:
    """Run the finetune flow in this process (Prefect's temporary local API unless PREFECT_API_URL is set)."""
    start = time.perf_counter()
    _service_env()
    from flows.finetune import finetune

    try:
        with _progress_bars(progress):
            result = finetune(cfg)
    except Exception as err:
        from essaflow.tracking import scrub

        typer.echo(f"error: {type(err).__name__}: {scrub(str(err))}", err=True)
        raise typer.Exit(1) from None
    wall = round(time.perf_counter() - start, 2)
    out = result.model_dump()
    compute = out["parts"]["compute"]
    out["wall_s"] = wall
    out["overhead"] = {
        "storage_s": out["parts"]["storage"],
        "tracking_s": out["parts"]["tracking"],
        "orchestration_s": round(wall - sum(out["parts"].values()), 2),
        "share": round((wall - compute) / wall, 3) if wall else 0.0,
    }
    keys = ["before", "after", "model_name", "model_version", "aliases", "tracking_uri", "storage_uri", "wall_s"]
    return (
        {k: out[k] for k in keys}
        | {"stages": out["stages"]}
        | {k: out[k] for k in ("run_id", "decision", "cached", "flow_s", "overhead", "parts")}
    )


@app.command()
def demo(
    method: Annotated[str, typer.Option(help="essa | fgrpo | none")] = "essa",
    config: ConfigOpt = None,
    set_: SetOpt = None,
    progress: Annotated[bool, typer.Option(help="progress bars on stderr")] = True,
    verbose: bool = False,
) -> None:
    """The main job on the embedded default: the whole finetune flow (tiny model, synthetic data, local services)."""
    _setup_logging(verbose)
    if config is None:
        preset = {"essa": "tiny-essa.yaml", "fgrpo": "tiny-fgrpo.yaml"}.get(method, "tiny.yaml")
        config = Path(__file__).resolve().parent.parent / "configs" / preset
        config = config if config.exists() else None
    cfg = _load(config, set_, method=method)
    _emit(_finetune(cfg, progress))


@app.command()
def run(
    config: Annotated[Path, typer.Argument(help="YAML preset (configs/*.yaml)")],
    set_: SetOpt = None,
    progress: Annotated[bool, typer.Option(help="progress bars on stderr")] = True,
    verbose: bool = False,
) -> None:
    """Run the finetune flow locally: data -> pass@k -> SFT -> ESSA/F-GRPO -> pass@k -> MLflow registry."""
    _setup_logging(verbose)
    _emit(_finetune(_load(config, set_), progress))


@app.command("eval")
def eval_(
    model: Annotated[str, typer.Option("--model", help="registered model name")] = "tiny-arith",
    alias: Annotated[str, typer.Option(help="alias to evaluate")] = "champion",
    config: ConfigOpt = None,
    set_: SetOpt = None,
    verbose: bool = False,
) -> None:
    """pass@k of a registered model version (models:/MODEL@ALIAS) with the config's data and eval protocol."""
    _setup_logging(verbose)
    cfg = _load(config, set_)
    _service_env()
    from flows.evaluate import EvaluateParams, evaluate_model

    params = EvaluateParams(
        model_name=model,
        alias=alias,
        data=cfg.data,
        eval=cfg.eval,
        sampling=cfg.sampling,
        storage_uri=cfg.storage_uri,
        tracking_uri=cfg.tracking_uri,
    )
    start = time.perf_counter()
    try:
        ref = evaluate_model(params)
    except Exception as err:
        from essaflow.tracking import scrub

        typer.echo(f"error: {type(err).__name__}: {scrub(str(err))}", err=True)
        raise typer.Exit(1) from None
    _emit(
        {
            "model": f"{model}@{alias}",
            "pass_at_k": ref.summary,
            "report_uri": ref.uri,
            "wall_s": round(time.perf_counter() - start, 2),
        }
    )


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
