"""The local dev stack behind `essaflow stack up|down|status`: SeaweedFS (S3), MLflow, Prefect (+ a process worker)
and Ray, each on 127.0.0.1 with PID, log and state under one state directory.

- ports: free ports and port checks on 127.0.0.1
- process: one server as a process group (start, record, readiness, stop by PID)
- seaweedfs, mlflow_server, prefect_server, ray_head: one starter per server
- stack: the whole stack in order (up, down, status), its ports, credentials and client environment

It sits on top of the library: it never imports prefect (it runs Prefect as a server process), and nothing in
essaflow/, tasks/ or flows/ imports it.
"""

from devstack.mlflow_server import start_mlflow_server
from devstack.ports import LOCALHOST, free_port, free_ports, port_open
from devstack.prefect_server import prefect_server_env, start_prefect_server, start_prefect_worker
from devstack.process import Service, ServiceError, load_service, start_process, stop_interrupting, wait_for_port
from devstack.ray_head import ray_env, start_ray_head
from devstack.seaweedfs import start_seaweedfs, weed_binary
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
    "prefect_server_env",
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
