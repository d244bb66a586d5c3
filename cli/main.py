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
    # Prefect's temporary local server needs longer than its 20 s default to start on 2 busy cores.
    "PREFECT_SERVER_EPHEMERAL_STARTUP_TIMEOUT_SECONDS": "180",
}


def _flow_logging(verbose: bool) -> None:
    """Flows log through Prefect's own handlers (with task run names); essaflow's loggers ride along."""
    if verbose:
        os.environ.setdefault("PREFECT_LOGGING_LEVEL", "DEBUG")


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
        | {
            k: out[k]
            for k in ("run_id", "mlflow_run_id", "decision", "training", "cached", "flow_s", "overhead", "parts")
        }
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
    _flow_logging(verbose)
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
    _flow_logging(verbose)
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
    _flow_logging(verbose)
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
def check_config(
    config: ConfigOpt = None,
    set_: SetOpt = None,
    cluster: Annotated[
        bool, typer.Option("--cluster", help="also check that the Ray cluster (ray_address / RAY_ADDRESS) fits")
    ] = False,
) -> None:
    """Validate a config (and overrides) without running anything; prints the resolved config.

    With --cluster, joins the run's Ray cluster and checks its nodes can hold the training workers (the check the
    pipeline's first task makes), listing the nodes on stderr.
    """
    cfg = _load(config, set_)
    if cluster:
        from essaflow.cluster import ClusterCapacityError, describe_cluster
        from essaflow.training_cluster import check_training_fits, joins_existing_cluster

        if not joins_existing_cluster(cfg):
            typer.echo("no cluster to check: neither ray_address nor RAY_ADDRESS is set (a local Ray starts)", err=True)
        else:
            try:
                request = check_training_fits(cfg)
            except ClusterCapacityError as err:
                typer.echo(f"error: ClusterCapacityError: {err}", err=True)
                raise typer.Exit(1) from None
            for n in describe_cluster():
                typer.echo(
                    f"node {n.node_id[:8]} {'head' if n.is_head else 'worker'}: {n.cpus:g} CPU, {n.gpus:g} GPU",
                    err=True,
                )
            typer.echo(f"training workers fit: {request or 'training uses no Ray workers'}", err=True)
    typer.echo(cfg.model_dump_json(indent=2))


@app.command("build-tiny")
def build_tiny(out: Annotated[Path | None, typer.Option(help="target directory")] = None) -> None:
    """(Re)build the embedded tiny base model."""
    from essaflow.tiny_model import SHIPPED, build_tiny_base

    start = time.perf_counter()
    path = build_tiny_base(out or SHIPPED)
    _emit({"path": str(path), "wall_s": round(time.perf_counter() - start, 1)})


stack_app = typer.Typer(
    no_args_is_help=True, help="The local stack: SeaweedFS (S3), MLflow, Prefect server + worker, Ray."
)
app.add_typer(stack_app, name="stack")
StateOpt = Annotated[
    Path | None, typer.Option("--state-dir", help="state directory [ESSAFLOW_STACK_DIR or .essaflow/stack]")
]


@stack_app.command("up")
def stack_up(
    state_dir: StateOpt = None,
    worker: Annotated[bool, typer.Option(help="also start a process worker for the essaflow-process pool")] = True,
) -> None:
    """Start every server that is not running (127.0.0.1); print their URLs, PIDs, start times and memory."""
    from devstack import stack
    from devstack.process import ServiceError

    start = time.perf_counter()
    try:
        services = stack.up(state_dir, worker=worker)
    except ServiceError as err:
        typer.echo(f"error: {err}", err=True)
        raise typer.Exit(1) from None
    sd = stack.state_dir(state_dir)
    for name, info in services.items():
        typer.echo(
            f"{name:15} {info['url']:28} pid {info['pid']:<7} {info['start_s']:5.1f}s {info['rss_mb']:7.1f} MB",
            err=True,
        )
    typer.echo(f'use it:  eval "$(essaflow stack env --state-dir {sd})"', err=True)
    _emit({"state_dir": str(sd), "services": services, "wall_s": round(time.perf_counter() - start, 1)})


@stack_app.command("down")
def stack_down(state_dir: StateOpt = None) -> None:
    """Stop the stack's servers by PID, each process group: SIGINT (Ray, worker) or SIGTERM, then SIGKILL."""
    from devstack import stack

    _emit({"state_dir": str(stack.state_dir(state_dir)), "services": stack.down(state_dir)})


@stack_app.command("status")
def stack_status(state_dir: StateOpt = None) -> None:
    """Which servers run, whether they answer, their memory."""
    from devstack import stack

    services = stack.status(state_dir)
    for name, info in services.items():
        state = "healthy" if info["healthy"] else ("running" if info["running"] else "stopped")
        typer.echo(f"{name:15} {state:8} {info['url']:28} pid {info['pid']:<7} {info['rss_mb']:7.1f} MB", err=True)
    _emit({"state_dir": str(stack.state_dir(state_dir)), "services": services})
    if not services or not all(i["healthy"] for i in services.values()):
        raise typer.Exit(1)


@stack_app.command("env")
def stack_env(state_dir: StateOpt = None) -> None:
    """Print `export` lines pointing a shell at the stack (includes its credentials: do not paste them anywhere)."""
    import shlex

    from devstack import stack

    sd = stack.state_dir(state_dir)
    if not (sd / "ports.json").exists():
        typer.echo(f"error: no stack in {sd}; run essaflow stack up", err=True)
        raise typer.Exit(1)
    for key, value in stack.client_env(sd).items():
        typer.echo(f"export {key}={shlex.quote(value)}")


@app.command()
def deploy(
    pool: Annotated[str, typer.Option(help="process work pool the deployments use")] = "essaflow-process",
) -> None:
    """Create the process work pool if needed and deploy every deployment in prefect.yaml (PREFECT_API_URL)."""
    import subprocess
    import sys

    from devstack.stack import PROJECT_DIR

    if not os.environ.get("PREFECT_API_URL"):
        typer.echo(
            'error: PREFECT_API_URL is not set; run essaflow stack up and eval "$(essaflow stack env)"', err=True
        )
        raise typer.Exit(2)
    prefect = [sys.executable, "-m", "prefect"]
    env = {**os.environ, **SERVICE_ENV}
    start = time.perf_counter()
    pools = subprocess.run([*prefect, "work-pool", "inspect", pool], env=env, capture_output=True, text=True)
    if pools.returncode != 0:
        subprocess.run([*prefect, "work-pool", "create", pool, "--type", "process"], env=env, check=True)
    done = subprocess.run([*prefect, "--no-prompt", "deploy", "--all"], cwd=PROJECT_DIR, env=env)
    if done.returncode != 0:
        raise typer.Exit(done.returncode)
    _emit(
        {"deployed": "all", "pool": pool, "project": str(PROJECT_DIR), "wall_s": round(time.perf_counter() - start, 1)}
    )


if __name__ == "__main__":
    app()
