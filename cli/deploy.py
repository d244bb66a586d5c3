"""`essaflow deploy`: the process work pool and every deployment of prefect.yaml, on the server at PREFECT_API_URL."""

from __future__ import annotations

import os
import time
from typing import Annotated
from urllib.parse import urlsplit

import typer

from cli.common import SERVICE_ENV, emit, refuse
from flows.alerts import WEBHOOK_ENV, webhook_problem


def _where(url: str) -> str:
    """scheme://host[:port] of a webhook: its path or query may be its secret (a chat webhook's token)."""
    parts = urlsplit(url)
    return f"{parts.scheme}://{parts.hostname}{f':{parts.port}' if parts.port else ''}"


def deploy(
    pool: Annotated[str, typer.Option(help="process work pool the deployments use")] = "essaflow-process",
    alert_webhook: Annotated[
        str | None,
        typer.Option(help="post to this URL when a deployed run fails or crashes (or ESSAFLOW_ALERT_WEBHOOK_URL)"),
    ] = None,
) -> None:
    """Create the process work pool if needed and deploy every deployment in prefect.yaml (PREFECT_API_URL); with
    a webhook, the automation that alerts on a failed or crashed run (flows/alerts.py)."""
    import subprocess
    import sys

    from devstack.stack import PROJECT_DIR

    webhook = alert_webhook or os.environ.get(WEBHOOK_ENV)
    problem = webhook_problem(webhook) if webhook else None
    if problem:  # before the pool, the deployments or the automation exist
        refuse([f"{'--alert-webhook' if alert_webhook else WEBHOOK_ENV}: {problem}"])
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
        created = subprocess.run([*prefect, "work-pool", "create", pool, "--type", "process"], env=env)
        if created.returncode != 0:  # a slow server can fail the inspect of a pool that exists: ask once more
            subprocess.run([*prefect, "work-pool", "inspect", pool], env=env, capture_output=True, check=True)
    done = subprocess.run([*prefect, "--no-prompt", "deploy", "--all"], cwd=PROJECT_DIR, env=env)
    if done.returncode != 0:
        raise typer.Exit(done.returncode)
    out = {"deployed": "all", "pool": pool, "project": str(PROJECT_DIR)}
    if webhook:
        from flows.alerts import ALERT_AUTOMATION, define_alerts

        automation_id = define_alerts(webhook)
        out["alert"] = {"automation": ALERT_AUTOMATION, "id": str(automation_id), "webhook": _where(webhook)}
    emit({**out, "wall_s": round(time.perf_counter() - start, 1)})
