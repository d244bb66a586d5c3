"""Joining Ray: a new local Ray or the cluster at an address, token auth, the job's runtime_env."""

from __future__ import annotations

import logging
import os
import time
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from essaflow.cluster.address import check_reachable
from essaflow.cluster.worker_env import DEFAULT_ENV_KEYS, is_secret, runtime_env_for, select_env

logger = logging.getLogger(__name__)


def reload_ray_auth() -> None:
    """Make Ray re-read RAY_AUTH_MODE and the token: both are cached per process (C++ side) on first use."""
    try:
        from ray._raylet import AuthenticationTokenLoader, Config
    except ImportError:  # an older Ray without token auth: nothing cached
        return
    Config.initialize("")
    AuthenticationTokenLoader.instance().reset_cache()


def use_token_auth(token_path: str | Path | None = None, *, mode: str = "token") -> None:
    """Set RAY_AUTH_MODE (and RAY_AUTH_TOKEN_PATH, when given) for this process and the processes it starts.

    ``mode=""`` unsets both (Ray's defaults again). Call it while this process is not connected to Ray.
    """
    import ray

    if ray.is_initialized():
        raise RuntimeError("change Ray's auth settings before ray.init (or after ray.shutdown)")
    if mode:
        os.environ["RAY_AUTH_MODE"] = mode
        if token_path is not None:
            os.environ["RAY_AUTH_TOKEN_PATH"] = str(Path(token_path).absolute())
    else:
        os.environ.pop("RAY_AUTH_MODE", None)
        os.environ.pop("RAY_AUTH_TOKEN_PATH", None)
    reload_ray_auth()


@dataclass(frozen=True)
class ClusterConnection:
    """Where this driver is connected and which settings its workers received (names only: safe to log)."""

    address: str
    """GCS address (host:port) of the cluster."""
    local: bool
    """True when this process started the Ray instance itself."""
    env_keys: tuple[str, ...] = ()
    """Names of the settings sent to workers as plain env_vars."""
    secret_keys: tuple[str, ...] = ()
    """Names of the settings sent through the setup hook (values never logged)."""
    auth_mode: str = "disabled"


def connect(
    address: str | None = None,
    *,
    num_cpus: int | None = None,
    num_gpus: int | None = None,
    env_keys: Iterable[str] = DEFAULT_ENV_KEYS,
    env: Mapping[str, str] | None = None,
    runtime_env: Mapping[str, Any] | None = None,
    auth_token_path: str | Path | None = None,
    namespace: str | None = None,
    log_to_driver: bool = True,
) -> ClusterConnection:
    """Join the Ray cluster at ``address`` (default RAY_ADDRESS), or start a local Ray when neither is set.

    Args:
        address: ``host:port`` of the head's GCS, or ``auto``; None reads RAY_ADDRESS; without either (or with
            ``local``) a new local Ray starts, without dashboard.
        num_cpus, num_gpus: size of a local Ray; ignored when joining a cluster (its nodes declare their own).
        env_keys: patterns of the driver's environment variables the workers need (:data:`DEFAULT_ENV_KEYS`).
        env: extra settings for the workers, on top of those selected from the environment.
        runtime_env: the caller's own runtime_env (working_dir, pip, more env_vars), merged.
        auth_token_path: token file of a cluster with token auth; sets RAY_AUTH_MODE=token for this process.
        namespace: Ray namespace (named actors live in one).
        log_to_driver: forward workers' stdout/stderr to this process (off keeps model-loading noise in Ray's logs).

    An address where nothing answers raises ClusterUnreachable within seconds (essaflow/cluster/address.py).
    When this process is already connected, nothing is re-initialised: the workers keep the settings of the first
    connection (a warning says so).
    """
    import ray

    address, source = (address, "ray_address") if address else (os.environ.get("RAY_ADDRESS") or None, "RAY_ADDRESS")
    if address == "local":
        address = None
    if ray.is_initialized():
        current = ray.get_runtime_context().gcs_address
        logger.warning("Ray is already connected (%s); its workers keep the settings they were started with", current)
        return ClusterConnection(current, local=False, auth_mode=os.environ.get("RAY_AUTH_MODE", "disabled"))
    if address:
        check_reachable(address, source)  # ray.init would wait for an absent GCS without end
    _refresh_auth(auth_token_path)
    values = select_env(None, env_keys)
    values.update(env or {})
    kwargs: dict[str, Any] = {
        "runtime_env": runtime_env_for(values, runtime_env),
        "namespace": namespace,
        "logging_level": logging.WARNING,
        "log_to_driver": log_to_driver,
    }
    t0 = time.monotonic()
    _init(address, num_cpus, num_gpus, kwargs)
    conn = ClusterConnection(
        address=ray.get_runtime_context().gcs_address,
        local=not address,
        env_keys=tuple(sorted(k for k, v in values.items() if not is_secret(k, v))),
        secret_keys=tuple(sorted(k for k, v in values.items() if is_secret(k, v))),
        auth_mode=os.environ.get("RAY_AUTH_MODE", "disabled"),  # a new local Ray turns token auth on by itself
    )
    _log_connection(conn, time.monotonic() - t0)
    return conn


def _refresh_auth(auth_token_path: str | Path | None) -> None:
    """Token auth from ``auth_token_path``, else the environment's auth settings read afresh."""
    if auth_token_path is not None:
        use_token_auth(auth_token_path)
    else:
        # Ray caches the auth mode and token per process on first use: without a reload, a process that talked
        # to one cluster (or started a local Ray, which generates a token) presents stale credentials to the next.
        reload_ray_auth()


def _init(address: str | None, num_cpus: int | None, num_gpus: int | None, kwargs: dict[str, Any]) -> None:
    """ray.init: join the cluster at ``address``, or start a new local Ray sized by num_cpus / num_gpus."""
    import ray

    if address:
        if num_cpus is not None or num_gpus is not None:
            logger.debug("num_cpus/num_gpus ignored: joining %s, whose nodes declare their own resources", address)
        ray.init(address=address, **kwargs)
    else:
        if "RAY_AUTH_MODE" not in os.environ:
            # what ray.init does by itself for a new local Ray (token auth on), minus its warning on the terminal
            use_token_auth()
        # "local": a new instance even when another one was started on this machine with `ray start`
        ray.init(address="local", num_cpus=num_cpus, num_gpus=num_gpus, include_dashboard=False, **kwargs)


def _log_connection(conn: ClusterConnection, seconds: float) -> None:
    """One line: where Ray is, how long it took, and the names (never the values) of what the workers get."""
    logger.info(
        "Ray: %s %s in %.1fs (auth %s); workers get %s; secrets via setup hook: %s",
        "started local" if conn.local else "joined",
        conn.address,
        seconds,
        conn.auth_mode,
        ", ".join(conn.env_keys) or "-",
        ", ".join(conn.secret_keys) or "-",
    )


def shutdown() -> None:
    """Disconnect (and stop a local Ray this process started)."""
    import ray

    ray.shutdown()
