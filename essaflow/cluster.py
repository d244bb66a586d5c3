"""Ray: connect (a local Ray or the cluster at RAY_ADDRESS), hand workers their settings, place GPU workers.

Three things go wrong when a flow that ran on a laptop first meets a Ray cluster, and this module is where each is
handled:

- **Workers do not inherit the driver's environment.** A Ray worker is a child of its node's raylet, started long
  before the flow run; a Prefect flow run on Ray sees PREFECT_API_URL, MLflow and S3 settings only if they travel
  with the job. :func:`connect` sends them in the job's ``runtime_env``: plain settings as ``env_vars``, secrets
  (credentials, tokens, URLs with a password) through a ``worker_process_setup_hook`` closure. Ray's runtime-env
  agent logs every ``env_vars`` value in plain text on every node (``runtime_env_agent.log``); the hook travels
  pickled through the GCS and is never printed. Only key names are logged here (:func:`redacted` for values).
- **Token auth.** Since Ray 2.52 a cluster may require a token (``RAY_AUTH_MODE=token``; token from
  ``RAY_AUTH_TOKEN``, else the file at ``RAY_AUTH_TOKEN_PATH``, else ``~/.ray/auth_token``). A new local
  ``ray.init()`` turns it on by itself, ``ray start --head`` does so when a token file exists, but a driver joining
  an explicit address never does: set RAY_AUTH_MODE identically on every node and every driver. Ray caches the mode
  and the token per process, so :func:`use_token_auth` refreshes that cache when it changes them.
- **A request the cluster cannot meet waits forever.** :func:`placement_group_for` checks the request against the
  nodes before creating the group and waits on it with a timeout; both failures raise :class:`ClusterCapacityError`
  naming what was asked for and what the cluster has.

Ray binds its ports on every interface whatever ``--node-ip-address`` says (it even rewrites 127.0.0.1 to the
machine's routable address): run it on a private network or behind a firewall, with token auth on.

This module never imports prefect, and imports ray only inside functions.
"""

from __future__ import annotations

import fnmatch
import logging
import math
import os
import time
from collections import Counter
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

logger = logging.getLogger(__name__)

__all__ = [
    "DEFAULT_ENV_KEYS",
    "ClusterCapacityError",
    "ClusterConnection",
    "NodeInfo",
    "bundle_for",
    "check_capacity",
    "connect",
    "describe_cluster",
    "gpus_per_worker",
    "is_secret",
    "node_id",
    "placement_group_for",
    "redacted",
    "reload_ray_auth",
    "runtime_env_for",
    "select_env",
    "shutdown",
    "unshared_path_message",
    "use_token_auth",
    "work_by_node",
    "worker_options",
    "worker_resources",
]

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

_SECRET_PARTS = ("PASSWORD", "PASSWD", "SECRET", "CREDENTIAL", "PASSPHRASE")  # anywhere: PGPASSWORD too
_KEY_QUALIFIERS = {"API", "ACCESS", "PRIVATE", "SIGNING", "ENCRYPTION"}
_MASK = "***"
STRATEGIES = ("PACK", "SPREAD", "STRICT_PACK", "STRICT_SPREAD")


class ClusterCapacityError(RuntimeError):
    """The cluster cannot hold (now, or ever) the workers asked for; the message says what was asked and what exists."""


# ------------------------------------------------------------------------------------------ settings for workers


def _url_password(value: str) -> bool:
    if "://" not in value or "@" not in value:
        return False
    try:
        return urlsplit(value).password is not None
    except ValueError:
        return False


def is_secret(key: str, value: str = "") -> bool:
    """True for a credential: its name says so (PASSWORD, SECRET, ... anywhere; a word ending in TOKEN; PASS; an
    API/ACCESS/PRIVATE ... KEY; but not TOKENIZERS_PARALLELISM) or it is a URL with a password
    (``postgresql://user:pw@host/db``)."""
    upper = key.upper()
    words = set(upper.split("_"))
    return bool(
        any(part in upper for part in _SECRET_PARTS)
        or any(w.endswith("TOKEN") or w == "PASS" for w in words)
        or ("KEY" in words and words & _KEY_QUALIFIERS)
        or _url_password(value)
    )


def redacted(env: Mapping[str, str]) -> dict[str, str]:
    """``env`` safe to log: secret values become ``***``; a URL keeps everything but its password."""
    out = {}
    for key, value in env.items():
        if _url_password(value):
            parts = urlsplit(value)
            host = parts.netloc.rsplit("@", 1)[1]
            out[key] = parts._replace(netloc=f"{parts.username or ''}:{_MASK}@{host}").geturl()
        elif is_secret(key, value):
            out[key] = _MASK
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


# --------------------------------------------------------------------------------------------- auth and connect


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

    When this process is already connected, nothing is re-initialised: the workers keep the settings of the first
    connection (a warning says so).
    """
    import ray

    address = address or os.environ.get("RAY_ADDRESS") or None
    if address == "local":
        address = None
    if ray.is_initialized():
        current = ray.get_runtime_context().gcs_address
        logger.warning("Ray is already connected (%s); its workers keep the settings they were started with", current)
        return ClusterConnection(current, local=False, auth_mode=os.environ.get("RAY_AUTH_MODE", "disabled"))
    if auth_token_path is not None:
        use_token_auth(auth_token_path)
    else:
        # Ray caches the auth mode and token per process on first use: without a reload, a process that talked
        # to one cluster (or started a local Ray, which generates a token) presents stale credentials to the next.
        reload_ray_auth()
    values = select_env(None, env_keys)
    values.update(env or {})
    rt = runtime_env_for(values, runtime_env)
    kwargs: dict[str, Any] = {
        "runtime_env": rt,
        "namespace": namespace,
        "logging_level": logging.WARNING,
        "log_to_driver": log_to_driver,
    }
    t0 = time.monotonic()
    if address:
        if num_cpus is not None or num_gpus is not None:
            logger.debug("num_cpus/num_gpus ignored: joining %s, whose nodes declare their own resources", address)
        ray.init(address=address, **kwargs)
    else:
        # "local": a new instance even when another one was started on this machine with `ray start`
        ray.init(address="local", num_cpus=num_cpus, num_gpus=num_gpus, include_dashboard=False, **kwargs)
    conn = ClusterConnection(
        address=ray.get_runtime_context().gcs_address,
        local=not address,
        env_keys=tuple(sorted(k for k, v in values.items() if not is_secret(k, v))),
        secret_keys=tuple(sorted(k for k, v in values.items() if is_secret(k, v))),
        auth_mode=os.environ.get("RAY_AUTH_MODE", "disabled"),  # a new local Ray turns token auth on by itself
    )
    logger.info(
        "Ray: %s %s in %.1fs (auth %s); workers get %s; secrets via setup hook: %s",
        "started local" if conn.local else "joined",
        conn.address,
        time.monotonic() - t0,
        conn.auth_mode,
        ", ".join(conn.env_keys) or "-",
        ", ".join(conn.secret_keys) or "-",
    )
    return conn


def shutdown() -> None:
    """Disconnect (and stop a local Ray this process started)."""
    import ray

    ray.shutdown()


# ----------------------------------------------------------------------------------------- resources per worker


def _check_quantity(name: str, value: float) -> float:
    value = float(value)
    if value < 0 or not math.isfinite(value):
        raise ValueError(f"{name}={value} must be a finite number >= 0")
    if value > 1 and not value.is_integer():
        raise ValueError(f"{name}={value}: Ray accepts fractions only below 1 (whole numbers above)")
    return value


def worker_resources(num_cpus: float = 1.0, num_gpus: float = 0.0) -> dict[str, float]:
    """Ray options of one worker (``.options(**worker_resources(...))``), validated the way Ray will."""
    return {"num_cpus": _check_quantity("num_cpus", num_cpus), "num_gpus": _check_quantity("num_gpus", num_gpus)}


def gpus_per_worker(workers_per_gpu: int) -> float:
    """GPU share of each worker when ``workers_per_gpu`` model instances share one GPU (1 -> whole GPUs).

    ESSA keeps one model instance per worker (ESSA-v3 sec. 4: each GPU holds a full model); a small model can host
    several population workers per GPU, a quantised large one needs exactly one.
    """
    if int(workers_per_gpu) != workers_per_gpu or workers_per_gpu < 1:
        raise ValueError(f"workers_per_gpu={workers_per_gpu} must be a whole number >= 1")
    return 1.0 / int(workers_per_gpu)


def bundle_for(num_cpus: float = 1.0, num_gpus: float = 0.0, resources: Mapping[str, float] | None = None):
    """One placement-group bundle: the resources of one worker, zero entries left out."""
    b = {"CPU": _check_quantity("num_cpus", num_cpus), "GPU": _check_quantity("num_gpus", num_gpus)}
    b.update({k: float(v) for k, v in (resources or {}).items()})
    b = {k: v for k, v in b.items() if v > 0}
    if not b:
        raise ValueError("a worker must ask for some resource (num_cpus or num_gpus > 0)")
    return b


# -------------------------------------------------------------------------------------------- the cluster's view


@dataclass(frozen=True)
class NodeInfo:
    """One Ray node: id, address, whether it is alive and the head, and its total resources."""

    node_id: str
    address: str
    alive: bool
    is_head: bool
    resources: dict[str, float] = field(default_factory=dict)

    @property
    def cpus(self) -> float:
        return self.resources.get("CPU", 0.0)

    @property
    def gpus(self) -> float:
        return self.resources.get("GPU", 0.0)


def describe_cluster(include_dead: bool = False) -> list[NodeInfo]:
    """The cluster's nodes (alive ones unless ``include_dead``), head first: who holds which CPUs and GPUs."""
    import ray

    nodes = []
    for n in ray.nodes():
        if not (n.get("Alive") or include_dead):
            continue
        res = {k: float(v) for k, v in (n.get("Resources") or {}).items() if not k.startswith("node:")}
        is_head = "node:__internal_head__" in (n.get("Resources") or {})
        nodes.append(NodeInfo(n["NodeID"], n.get("NodeManagerAddress", ""), bool(n.get("Alive")), is_head, res))
    return sorted(nodes, key=lambda n: (not n.is_head, not n.alive, n.node_id))


def node_id() -> str:
    """Id of the Ray node running this process ("local" outside Ray)."""
    import ray

    return ray.get_runtime_context().get_node_id() if ray.is_initialized() else "local"


def unshared_path_message(who: str, what: str, path: str | Path) -> str:
    """The error a Ray worker raises when a path the driver wrote is not on its node."""
    return (
        f"{who} on Ray node {node_id()[:8]} cannot read the {what} at {path}: the driver wrote it on its own disk. "
        "On a multi-machine cluster, ESSAFLOW_CACHE_DIR must be one volume mounted on the driver and every Ray node "
        "(infra/: the run-cache volume, infra/k8s/cache-pvc.yaml)"
    )


def work_by_node(node_ids: Iterable[str]) -> dict[str, int]:
    """How many results came from each node (pass the node id every task reported), most first."""
    return dict(Counter(node_ids).most_common())


def _fmt(res: Mapping[str, float], extra: Iterable[str] = ()) -> str:
    """CPU and GPU (always, 0 included) and the ``extra`` custom resources of ``res``, e.g. ``{CPU: 2, GPU: 0}``."""
    keys = ["CPU", "GPU", *sorted(k for k in extra if k not in ("CPU", "GPU"))]
    return "{" + ", ".join(f"{k}: {res.get(k, 0.0):g}" for k in keys) + "}"


def _asked(workers: int, bundle: Mapping[str, float], strategy: str) -> str:
    return f"{workers} worker{'s' if workers != 1 else ''} x {_fmt(bundle, bundle)} ({strategy})"


def _fits(node: Mapping[str, float], bundle: Mapping[str, float]) -> int:
    """How many copies of ``bundle`` fit on a node with resources ``node``."""
    return min(int(node.get(k, 0.0) / v + 1e-9) for k, v in bundle.items())


def check_capacity(workers: int, bundle: Mapping[str, float], nodes: list[Mapping[str, float]], strategy: str) -> None:
    """Raise ClusterCapacityError when ``workers`` copies of ``bundle`` can never be placed on nodes of these total
    resources under ``strategy`` (a pure check: no Ray call)."""
    if strategy not in STRATEGIES:
        raise ValueError(f"strategy={strategy!r}; one of {STRATEGIES}")
    if workers < 1:
        raise ValueError(f"workers={workers} must be >= 1")
    totals: dict[str, float] = {}
    for n in nodes:
        for k, v in n.items():
            totals[k] = totals.get(k, 0.0) + v
    asked = _asked(workers, bundle, strategy)
    has = f"the cluster has {_fmt(totals, bundle)} on {len(nodes)} alive node(s): " + ", ".join(
        _fmt(n, bundle) for n in nodes
    )
    per_node = [_fits(n, bundle) for n in nodes]
    if not any(per_node):
        raise ClusterCapacityError(f"{asked}: no node can hold even one worker; {has}")
    if strategy == "STRICT_PACK" and max(per_node) < workers:
        raise ClusterCapacityError(f"{asked}: no single node holds them all; {has}")
    if strategy == "STRICT_SPREAD" and sum(1 for f in per_node if f) < workers:
        raise ClusterCapacityError(f"{asked}: needs {workers} distinct nodes that can each hold one; {has}")
    if sum(per_node) < workers:
        raise ClusterCapacityError(f"{asked}: at most {sum(per_node)} fit; {has}")


def placement_group_for(
    workers: int,
    cpus_per_worker: float = 1.0,
    gpus_per_worker: float = 0.0,
    *,
    strategy: str = "SPREAD",
    timeout_s: float = 60.0,
    resources: Mapping[str, float] | None = None,
    autoscaling: bool = False,
    name: str = "",
):
    """Reserve one bundle per worker (ESSA population workers, GRPO train ranks) and wait until it is placed.

    SPREAD puts workers on as many nodes as possible (a node failure takes fewer of them); PACK fills nodes first
    (less cross-node traffic: right for DDP). Before anything is created the request is checked against the alive
    nodes' totals (unless ``autoscaling``: the cluster may grow); if it fits in principle but other work holds the
    resources, the group is removed after ``timeout_s`` and the error says what is available now.
    """
    import ray
    from ray.util.placement_group import placement_group, remove_placement_group

    bundle = bundle_for(cpus_per_worker, gpus_per_worker, resources)
    nodes = describe_cluster()
    if not autoscaling:
        check_capacity(workers, bundle, [n.resources for n in nodes], strategy)
    elif strategy not in STRATEGIES:
        raise ValueError(f"strategy={strategy!r}; one of {STRATEGIES}")
    pg = placement_group([dict(bundle) for _ in range(workers)], strategy=strategy, name=name)
    if not pg.wait(timeout_seconds=timeout_s):
        remove_placement_group(pg)
        raise ClusterCapacityError(
            f"{_asked(workers, bundle, strategy)} not placed within {timeout_s:g}s: available now "
            f"{_fmt(ray.available_resources(), bundle)} of {_fmt(ray.cluster_resources(), bundle)}; "
            "other work holds the rest"
        )
    return pg


def worker_options(pg, index: int, num_cpus: float = 1.0, num_gpus: float = 0.0) -> dict[str, Any]:
    """``.options(**...)`` for the worker in bundle ``index`` of ``pg``: its resources and its place.

    Tasks the worker starts stay in the group (captured), so a worker's helpers never escape onto other nodes.
    """
    from ray.util.scheduling_strategies import PlacementGroupSchedulingStrategy

    return {
        **worker_resources(num_cpus, num_gpus),
        "scheduling_strategy": PlacementGroupSchedulingStrategy(
            placement_group=pg, placement_group_bundle_index=index, placement_group_capture_child_tasks=True
        ),
    }
