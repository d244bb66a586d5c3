"""`essaflow deploy`: the process work pool and every deployment of prefect.yaml, on the server at PREFECT_API_URL."""

from __future__ import annotations

import os
import time
from typing import Annotated

import typer

from cli.common import SERVICE_ENV, emit


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
    emit(
        {"deployed": "all", "pool": pool, "project": str(PROJECT_DIR), "wall_s": round(time.perf_counter() - start, 1)}
    )
