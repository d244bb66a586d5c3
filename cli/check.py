"""`essaflow check-config`: validate a config, and optionally check it against the joined Ray cluster."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from cli.common import ConfigOpt, SetOpt, load, refuse
from essaflow.checks.machine import machine_problems
from essaflow.checks.notes import config_notes
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
    problems = _environment_problems(cfg, inputs if machine is None else machine)
    problems = _input_problems(cfg) + problems if inputs else problems
    if problems:
        refuse(problems, json_line=False)
    _memory_plan(cfg)
    if cluster:
        _check_cluster(cfg)
    typer.echo(mask_passwords(cfg.model_dump_json(indent=2)))  # a tracking_uri's password stays off the screen


def _input_problems(cfg: PipelineConfig) -> list[str]:
    """The model and data the config names, then its reward tried on the data: their notes on stderr, their
    problems returned (a sandbox that cannot start for code_tests is one of them, not a traceback)."""
    from essaflow.input_check import check_inputs
    from essaflow.judging.reward_check import check_reward
    from essaflow.sandbox.bubblewrap import SandboxUnavailable

    report = check_inputs(cfg.model, cfg.data, cfg.eval.data)
    sandbox: list[str] = []
    try:
        reward = check_reward(cfg.eval, cfg.data) if not report.problems else None
    except SandboxUnavailable as err:  # its message names the field and the fix
        reward, sandbox = None, [str(err)]
    for note in report.notes + (reward.notes if reward else []):
        typer.echo(mask_passwords(note), err=True)
    return report.problems + (reward.problems if reward else []) + sandbox


def _check_cluster(cfg: PipelineConfig) -> None:
    """--cluster: the run's Ray head answers (in seconds, naming its address), and its nodes hold the training
    workers; the nodes listed on stderr. One `error:` line and exit status 1 otherwise."""
    from essaflow.cluster import ClusterCapacityError, ClusterUnreachable, connect, describe_cluster
    from essaflow.cluster.preflight import check_training_fits, joins_existing_cluster

    if not joins_existing_cluster(cfg.ray_address):
        typer.echo("no cluster to check: neither ray_address nor RAY_ADDRESS is set (a local Ray starts)", err=True)
    else:
        try:
            request = check_training_fits(cfg.cluster_request(), cfg.ray_address)
            connect(cfg.ray_address, log_to_driver=False)  # method none: joined here, for the node listing
        except (ClusterCapacityError, ClusterUnreachable) as err:
            typer.echo(f"error: {type(err).__name__}: {err}", err=True)
            raise typer.Exit(1) from None
        for n in describe_cluster():
            typer.echo(
                f"node {n.node_id[:8]} {'head' if n.is_head else 'worker'}: {n.cpus:g} CPU, {n.gpus:g} GPU",
                err=True,
            )
        typer.echo(f"training workers fit: {request or 'training uses no Ray workers'}", err=True)


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
        from essaflow.input_check import check_inputs

        report = check_inputs(cfg.task.model, cfg.task.data, cfg.task.eval.data)
        for note in report.notes:
            typer.echo(mask_passwords(note), err=True)
        if report.problems:
            refuse(report.problems, json_line=False)
    typer.echo(mask_passwords(cfg.model_dump_json(indent=2)))


def _environment_problems(cfg: PipelineConfig, machine: bool) -> list[str]:
    """What this process's environment and machine lack: a tracking URI the run would read from MLFLOW_TRACKING_URI
    (tracking_uri unset) that breaks the config's rule, a numeric variable that is no number, a cache directory
    that cannot be written, S3 variables boto3 refuses; with `machine`, a GPU or vllm the config asks for."""
    import os

    from essaflow.checks.environment import environment_problems
    from essaflow.checks.service_uris import tracking_uri_problem

    env = os.environ.get("MLFLOW_TRACKING_URI")
    problem = tracking_uri_problem(env) if cfg.tracking_uri is None and env else None
    problems = [f"MLFLOW_TRACKING_URI (tracking_uri is unset): {problem}"] if problem else []
    problems += environment_problems(cfg)
    hint = " (--no-machine: a config meant for another machine)"
    return problems + [p + hint for p in machine_problems(cfg)] if machine else problems
