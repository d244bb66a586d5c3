"""`essaflow check-config`: validate a config, and optionally check it against the joined Ray cluster."""

from __future__ import annotations

from typing import Annotated

import typer

from cli.common import ConfigOpt, SetOpt, load, refuse
from essaflow.config import PipelineConfig
from essaflow.secrets import mask_passwords


def check_config(
    config: ConfigOpt = None,
    set_: SetOpt = None,
    cluster: Annotated[
        bool, typer.Option("--cluster", help="also check that the Ray cluster (ray_address / RAY_ADDRESS) fits")
    ] = False,
    inputs: Annotated[
        bool,
        typer.Option(
            "--inputs/--no-inputs",
            help="check the model and data the config names (default): a local checkpoint has config.json, a data "
            "file exists and reads cleanly with the configured columns; hub ids and s3:// URIs by spelling only",
        ),
    ] = True,
) -> None:
    """Validate a config (and overrides) without running anything; prints the resolved config (URI passwords
    masked).

    The model and data it names are checked too (offline: nothing is downloaded); each problem is one
    `error:` line naming the field, and the command exits with 2.

    With --cluster, joins the run's Ray cluster and checks its nodes can hold the training workers (the check the
    pipeline's first task makes), listing the nodes on stderr.
    """
    cfg = load(config, set_, json_line=False)
    if inputs:
        from essaflow.input_check import check_inputs

        report = check_inputs(cfg.model, cfg.data, cfg.eval.data)
        for note in report.notes:
            typer.echo(mask_passwords(note), err=True)
        if report.problems:
            refuse(report.problems, json_line=False)
    _memory_plan(cfg)
    if cluster:
        from essaflow.cluster import ClusterCapacityError, describe_cluster
        from essaflow.cluster.preflight import check_training_fits, joins_existing_cluster

        if not joins_existing_cluster(cfg.ray_address):
            typer.echo("no cluster to check: neither ray_address nor RAY_ADDRESS is set (a local Ray starts)", err=True)
        else:
            try:
                request = check_training_fits(cfg.cluster_request(), cfg.ray_address)
            except ClusterCapacityError as err:
                typer.echo(f"error: ClusterCapacityError: {err}", err=True)
                raise typer.Exit(1) from None
            for n in describe_cluster():
                typer.echo(
                    f"node {n.node_id[:8]} {'head' if n.is_head else 'worker'}: {n.cpus:g} CPU, {n.gpus:g} GPU",
                    err=True,
                )
            typer.echo(f"training workers fit: {request or 'training uses no Ray workers'}", err=True)
    typer.echo(mask_passwords(cfg.model_dump_json(indent=2)))  # a tracking_uri's password stays off the screen


def _memory_plan(cfg: PipelineConfig) -> None:
    """F-GRPO with grpo.workers.gpu_memory_gib: each rank's estimated peak, refused when it cannot fit."""
    from essaflow.grpo.memory_plan import ConfigPlan, plan_config

    try:
        result = plan_config(cfg)
    except ValueError as err:  # no prompt cap, or a config.json that is no decoder the plan knows
        refuse([str(err)], json_line=False)
    if isinstance(result, str):
        typer.echo(result, err=True)
    elif isinstance(result, ConfigPlan):
        for note in result.notes():
            typer.echo(note, err=True)
        if result.problem():
            refuse([result.problem()], json_line=False)
