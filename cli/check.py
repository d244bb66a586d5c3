"""`essaflow check-config`: validate a config, and optionally check it against the joined Ray cluster."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from cli.common import ConfigOpt, SetOpt, load, refuse
from essaflow.checks.findings import Findings
from essaflow.checks.memory_plan import memory_findings
from essaflow.checks.notes import config_notes
from essaflow.checks.preflight import config_findings
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
            help="check the model and data the config names (default): a local checkpoint has config.json and "
            "whole weight files, a data file exists, reads cleanly with the configured columns and splits; hub ids "
            "and s3:// URIs by spelling only; and this machine: a GPU for device cuda, vllm for its backend",
        ),
    ] = True,
    machine: Annotated[
        bool | None,
        typer.Option(
            "--machine/--no-machine",
            help="check that this machine has what the config asks: a GPU for device cuda, vllm for "
            "sampling.backend=vllm [default: as --inputs]; --no-machine for a config meant for another machine",
        ),
    ] = None,
) -> None:
    """Validate a config (and overrides) without running anything; prints the resolved config (URI passwords
    masked).

    The model and data it names are checked too (offline: nothing is downloaded), with the splits the run would
    make, and this machine (a GPU, vllm) where the config asks for them; each problem is one `error:` line naming
    the field, and the command exits with 2. A compare config (configs/compare-*.yaml) is checked as `essaflow
    compare` reads it.

    With --cluster, joins the run's Ray cluster and checks its nodes can hold the training workers (the check the
    pipeline's first task makes), listing the nodes on stderr.
    """
    if config is not None and _is_compare_config(config):
        _check_compare(config, set_, inputs)
        return
    cfg = load(config, set_, json_line=False)
    for note in config_notes(cfg):
        typer.echo(note, err=True)
    _report(config_findings(cfg, inputs, inputs if machine is None else machine))
    _report(memory_findings(cfg))
    if cluster:
        _check_cluster(cfg)
    typer.echo(mask_passwords(cfg.model_dump_json(indent=2)))  # a tracking_uri's password stays off the screen


def _report(found: Findings) -> None:
    """A check's notes on stderr (URI passwords masked), then its problems refused: one `error:` line each, exit
    status 2."""
    for note in found.notes:
        typer.echo(mask_passwords(note), err=True)
    if found.problems:
        refuse(found.problems, json_line=False)


def _check_cluster(cfg: PipelineConfig) -> None:
    """--cluster: the lines of essaflow.checks.cluster.cluster_report on stderr; one `error:` line and exit status 1
    when the head does not answer or its nodes cannot hold the training workers."""
    from essaflow.checks.cluster import cluster_report
    from essaflow.cluster import ClusterCapacityError, ClusterUnreachable

    try:
        lines = cluster_report(cfg.cluster_request(), cfg.ray_address)
    except (ClusterCapacityError, ClusterUnreachable) as err:
        typer.echo(f"error: {type(err).__name__}: {err}", err=True)
        raise typer.Exit(1) from None
    for line in lines:
        typer.echo(line, err=True)


#: top-level keys only a compare config has (essaflow/compare/config.py)
_COMPARE_KEYS = {"task", "methods"}


def _is_compare_config(path: Path) -> bool:
    """A compare preset (configs/compare-*.yaml) rather than a pipeline config; an unreadable file is neither (the
    pipeline config's loader names what is wrong with it)."""
    from essaflow.config import ConfigError, read_yaml_tree

    try:
        return bool(_COMPARE_KEYS & set(read_yaml_tree(path)))
    except ConfigError:
        return False


def _check_compare(path: Path, set_: list[str] | None, inputs: bool) -> None:
    """A compare config, checked as `essaflow compare` reads it: every arm's pipeline config, then the shared task's
    inputs; printed, with the command that runs it."""
    from essaflow.compare import load_compare_config
    from essaflow.config import ConfigError

    try:
        cfg = load_compare_config(path, set_)
    except ConfigError as err:
        refuse([str(err)], json_line=False)
    typer.echo(f"note: {path} is a compare config ({len(cfg.arms())} runs: methods x seeds); run it with "
               f"`essaflow compare {path}`", err=True)  # fmt: skip
    if inputs:
        from essaflow.checks.preflight import check_inputs

        _report(check_inputs(cfg.task.model, cfg.task.data, cfg.task.eval.data))
    typer.echo(mask_passwords(cfg.model_dump_json(indent=2)))
