"""`essaflow stack up|down|status|env`: the local dev stack (devstack/), each server on 127.0.0.1."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Annotated

import typer

from cli.common import emit

stack_app = typer.Typer(
    no_args_is_help=True, help="The local stack: SeaweedFS (S3), MLflow, Prefect server + worker, Ray."
)
StateOpt = Annotated[
    Path | None,
    typer.Option(
        "--state-dir",
        help="state directory [ESSAFLOW_STACK_DIR, else .essaflow/stack here or in a folder above, else the last "
        "`stack up`'s]",
    ),
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
    emit({"state_dir": str(sd), "services": services, "wall_s": round(time.perf_counter() - start, 1)})


@stack_app.command("down")
def stack_down(state_dir: StateOpt = None) -> None:
    """Stop the stack's servers by PID, each process group: SIGINT (Ray, worker) or SIGTERM, then SIGKILL."""
    from devstack import stack

    emit({"state_dir": str(stack.state_dir(state_dir)), "services": stack.down(state_dir)})


@stack_app.command("status")
def stack_status(state_dir: StateOpt = None) -> None:
    """Which servers run, whether they answer, their memory."""
    from devstack import stack

    services = stack.status(state_dir)
    if not services:
        typer.echo(f"no stack in {stack.state_dir(state_dir)}: essaflow stack up starts one (or give --state-dir)",
                   err=True)  # fmt: skip
    for name, info in services.items():
        state = "healthy" if info["healthy"] else ("running" if info["running"] else "stopped")
        typer.echo(f"{name:15} {state:8} {info['url']:28} pid {info['pid']:<7} {info['rss_mb']:7.1f} MB", err=True)
    emit({"state_dir": str(stack.state_dir(state_dir)), "services": services})
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
