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

This package never imports prefect, and imports ray only inside functions.
"""

from essaflow.cluster.address import ClusterUnreachable, check_reachable
from essaflow.cluster.connection import ClusterConnection, connect, reload_ray_auth, shutdown, use_token_auth
from essaflow.cluster.placement import (
    ClusterCapacityError,
    NodeInfo,
    bundle_for,
    check_capacity,
    describe_cluster,
    gpus_per_worker,
    node_id,
    placement_group_for,
    unshared_path_message,
    work_by_node,
    worker_options,
    worker_resources,
)
from essaflow.cluster.worker_env import DEFAULT_ENV_KEYS, is_secret, redacted, runtime_env_for, select_env

__all__ = [
    "DEFAULT_ENV_KEYS",
    "ClusterCapacityError",
    "ClusterConnection",
    "ClusterUnreachable",
    "NodeInfo",
    "bundle_for",
    "check_capacity",
    "check_reachable",
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
