"""The environment variables a run reads, checked before any compute: each numeric one a number in range, the
cache directory writable, (where the config reads or writes s3://) the S3 endpoint and region in a form boto3
takes, and (for check-config) the MLFLOW_TRACKING_URI a config without tracking_uri reads.
Each problem is one line naming the variable, its value and the fix; no boto3 is imported here."""

from __future__ import annotations

import os
from typing import Any

from essaflow.config_base import ConfigError
from essaflow.config_rules import tracking_uri_problem
from essaflow.environment import numeric_env_problems
from essaflow.storage.cache_dir import cache_dir_problem
from essaflow.storage.s3 import s3_env_problems


def uses_s3(cfg: Any) -> bool:
    """Whether a PipelineConfig reads or writes s3:// (its store, or the ESSAFLOW_STORAGE_URI its default yields
    to; its data, held-out data or model)."""
    held_out = cfg.eval.data
    return (
        any(str(u).startswith("s3://") for u in (cfg.storage_uri, os.environ.get("ESSAFLOW_STORAGE_URI")))
        or cfg.data.source == "s3"
        or (held_out is not None and held_out.source == "s3")
        or str(cfg.model.name_or_path).startswith("s3://")
    )


def environment_problems(cfg: Any | None = None, s3: bool | None = None) -> list[str]:
    """What is wrong with this process's environment for `cfg` (a PipelineConfig; None: any command): numeric
    variables, the cache directory, and with `s3` (default: whether `cfg` uses s3://) the S3 variables."""
    problems = numeric_env_problems()
    cache = cache_dir_problem()
    problems += [cache] if cache else []
    if s3 if s3 is not None else (cfg is not None and uses_s3(cfg)):
        problems += s3_env_problems()
    return problems


def require_environment(cfg: Any) -> None:
    """ConfigError listing :func:`environment_problems` for `cfg`: what a run checks first, wherever it was started
    (a deployment's run has no CLI preflight)."""
    problems = environment_problems(cfg)
    if problems:
        raise ConfigError("; ".join(problems))


def tracking_env_problems(cfg: Any) -> list[str]:
    """MLFLOW_TRACKING_URI, when `cfg` (a PipelineConfig) leaves tracking_uri unset and so reads it, breaking the
    tracking_uri rule (essaflow/config_rules.py): what check-config says of it (a run finds it when it connects)."""
    env = os.environ.get("MLFLOW_TRACKING_URI")
    problem = tracking_uri_problem(env) if cfg.tracking_uri is None and env else None
    return [f"MLFLOW_TRACKING_URI (tracking_uri is unset): {problem}"] if problem else []
