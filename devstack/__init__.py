"""The local dev stack behind `essaflow stack up|down|status`: SeaweedFS (S3), MLflow, Prefect (+ a process worker)
and Ray, each on 127.0.0.1 with PID, log and state under one directory. Never imports prefect; the library never
imports this package."""

from devstack.process import (
    LOCALHOST,
    Service,
    ServiceError,
    free_port,
    free_ports,
    load_service,
    port_open,
    ray_env,
    start_mlflow_server,
    start_prefect_server,
    start_prefect_worker,
    start_process,
    start_ray_head,
    start_seaweedfs,
    stop_interrupting,
    wait_for_port,
    weed_binary,
)
from devstack.stack import PROJECT_DIR, client_env, credentials, down, rss_mb, state_dir, status, up

__all__ = [
    "LOCALHOST",
    "PROJECT_DIR",
    "Service",
    "ServiceError",
    "client_env",
    "credentials",
    "down",
    "free_port",
    "free_ports",
    "load_service",
    "port_open",
    "ray_env",
    "rss_mb",
    "start_mlflow_server",
    "start_prefect_server",
    "start_prefect_worker",
    "start_process",
    "start_ray_head",
    "start_seaweedfs",
    "state_dir",
    "status",
    "stop_interrupting",
    "up",
    "wait_for_port",
    "weed_binary",
]
