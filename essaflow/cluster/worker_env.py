"""What Ray workers get from the driver's environment: plain settings as env_vars, secrets through a setup hook."""

from __future__ import annotations

import fnmatch
import os
from collections.abc import Iterable, Mapping
from typing import Any

from essaflow.secrets import MASK, is_secret, mask_url_password, url_has_password

DEFAULT_ENV_KEYS: tuple[str, ...] = (
    "PREFECT_API_URL",
    "PREFECT_API_KEY",
    "PREFECT_LOGGING_EXTRA_LOGGERS",
    "MLFLOW_*",
    "ESSAFLOW_*",
    "AWS_ENDPOINT_URL*",
    "AWS_REGION",
    "AWS_DEFAULT_REGION",
    "AWS_ACCESS_KEY_ID",
    "AWS_SECRET_ACCESS_KEY",
    "AWS_SESSION_TOKEN",
    "HF_TOKEN",
    "HF_HUB_OFFLINE",
    "TRANSFORMERS_OFFLINE",
    "HF_DATASETS_OFFLINE",
    "TOKENIZERS_PARALLELISM",
)
"""What workers need from the driver's environment (fnmatch patterns): Prefect API, MLflow, essaflow settings, the
S3 endpoint, region and credentials, hub access. Ray's own RAY_* settings are never sent: nodes have their own."""


def redacted(env: Mapping[str, str]) -> dict[str, str]:
    """``env`` safe to log: secret values become ``***``; a URL keeps everything but its password."""
    out = {}
    for key, value in env.items():
        if url_has_password(value):
            out[key] = mask_url_password(value)
        elif is_secret(key, value):
            out[key] = MASK
        else:
            out[key] = value
    return out


def select_env(env: Mapping[str, str] | None = None, keys: Iterable[str] = DEFAULT_ENV_KEYS) -> dict[str, str]:
    """The entries of ``env`` (default: this process's environment) whose names match one of ``keys``."""
    env = os.environ if env is None else env
    patterns = tuple(keys)
    return {
        k: v
        for k, v in sorted(env.items())
        if not k.startswith("RAY_") and any(fnmatch.fnmatchcase(k, p) for p in patterns)
    }


def _secret_env_hook(values: dict[str, str]):
    """A setup hook that puts ``values`` into a worker's environment before it runs anything.

    A closure, so cloudpickle ships the values with it (through the GCS, never through a log line).
    """

    def essaflow_worker_env() -> None:
        os.environ.update(values)

    return essaflow_worker_env


def runtime_env_for(env: Mapping[str, str], base: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """A Ray ``runtime_env`` that gives every worker ``env``: plain values as ``env_vars`` (visible in Ray's logs and
    dashboard, handy for debugging), secrets through a ``worker_process_setup_hook`` (never printed).

    ``base`` is the caller's runtime_env (pip, working_dir, more env_vars); its env_vars win over ``env``'s plain ones.
    """
    rt: dict[str, Any] = dict(base or {})
    plain = {k: v for k, v in env.items() if not is_secret(k, v)}
    secret = {k: v for k, v in env.items() if is_secret(k, v)}
    base_vars = dict(rt.get("env_vars") or {})
    leaked = sorted(k for k, v in base_vars.items() if is_secret(k, v))
    if leaked:
        raise ValueError(f"runtime_env env_vars would print secrets in Ray's logs: {leaked}; pass them in env instead")
    if plain or base_vars:
        rt["env_vars"] = {**plain, **base_vars}
    if secret:
        if rt.get("worker_process_setup_hook") is not None:
            raise ValueError("runtime_env already has a worker_process_setup_hook; secrets need their own")
        rt["worker_process_setup_hook"] = _secret_env_hook(secret)
    return rt
