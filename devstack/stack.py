"""The full local stack behind `essaflow stack up|down|status`: S3, MLflow, Prefect (+ a process worker), Ray.

Everything lives under one state directory (default `.essaflow/stack`, or ESSAFLOW_STACK_DIR): each server's PID
record, log, data and temp files, the generated S3 credentials (`credentials.json`, mode 0600) and `stack.env`
(mode 0600), the environment that points a shell, a worker or a test at the stack:

    eval "$(essaflow stack env)"      # or: set -a; . .essaflow/stack/stack.env; set +a

Ports are chosen once and kept in `ports.json`, so a restarted stack keeps its URLs. Servers bind to 127.0.0.1,
except Ray's internal ports, which Ray opens on every interface; its token (a file in the state dir) guards them.
This module never imports prefect.
"""

from __future__ import annotations

import json
import os
import secrets
import time
import urllib.request
from pathlib import Path
from typing import Any

from devstack.mlflow_server import start_mlflow_server
from devstack.ports import LOCALHOST, free_ports, port_open
from devstack.prefect_server import prefect_server_env, start_prefect_server, start_prefect_worker
from devstack.process import Service, load_service, stop_interrupting
from devstack.ray_head import ray_env, start_ray_head
from devstack.seaweedfs import start_seaweedfs

BUCKET = "essaflow"
POOL = "essaflow-process"
#: start order; `down` stops in reverse
SERVICES = ("seaweedfs", "mlflow-server", "prefect-server", "ray-head", "prefect-worker")
_PORTS = ("s3", "mlflow", "prefect", "ray")
PROJECT_DIR = Path(__file__).resolve().parent.parent


DEFAULT_DIR = Path(".essaflow") / "stack"


def state_dir(path: str | Path | None = None, *, recorded: bool = True) -> Path:
    """The stack's state directory: `path`, else ESSAFLOW_STACK_DIR, else the nearest `.essaflow/stack` holding a
    stack in the current directory or one above it (so `stack status` answers from a subfolder of the project),
    else (with `recorded`) the one the last `stack up` used, else `.essaflow/stack` here (where `up` starts one)."""
    given = path or os.environ.get("ESSAFLOW_STACK_DIR")
    if given:
        return Path(given).absolute()
    here = Path.cwd()
    for folder in (here, *here.parents):
        if (folder / DEFAULT_DIR / "ports.json").exists():
            return folder / DEFAULT_DIR
    last = _last_stack()
    if recorded and last is not None:
        return last
    return (here / DEFAULT_DIR).absolute()


def _record_file() -> Path:
    """Where `stack up` notes the state directory it used (beside essaflow's cache: one per user)."""
    return Path(os.environ.get("ESSAFLOW_CACHE_DIR", Path.home() / ".cache" / "essaflow")) / "last-stack-dir"


def _last_stack() -> Path | None:
    """The state directory of the last `stack up`, while it still holds a stack."""
    try:
        last = Path(_record_file().read_text().strip())
    except OSError:
        return None
    return last if (last / "ports.json").exists() else None


def _remember(sd: Path) -> None:
    record = _record_file()
    record.parent.mkdir(parents=True, exist_ok=True)
    record.write_text(f"{sd}\n")


def _private_text(path: Path, text: str) -> None:
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as f:
        f.write(text)


def _private_json(path: Path, obj: Any) -> None:
    _private_text(path, json.dumps(obj, indent=2))


def _ports(sd: Path) -> dict[str, int]:
    path = sd / "ports.json"
    if path.exists():
        return json.loads(path.read_text())
    ports = dict(zip(_PORTS, free_ports(len(_PORTS))))
    path.write_text(json.dumps(ports, indent=2))
    return ports


def credentials(sd: Path) -> dict[str, str]:
    """The stack's S3 credentials, generated on first use and kept in credentials.json (0600)."""
    path = sd / "credentials.json"
    if path.exists():
        return json.loads(path.read_text())
    creds = {"access_key": "essaflow" + secrets.token_hex(6), "secret_key": secrets.token_urlsafe(30)}
    _private_json(path, creds)
    return creds


def client_env(sd: Path) -> dict[str, str]:
    """Environment for anything that uses the stack (CLI, worker, flow runs). Holds credentials: keep it private."""
    p, creds = _ports(sd), credentials(sd)
    s3 = f"http://{LOCALHOST}:{p['s3']}"
    return {
        "PREFECT_API_URL": prefect_server_env(sd, p["prefect"])["PREFECT_API_URL"],
        "MLFLOW_TRACKING_URI": f"http://{LOCALHOST}:{p['mlflow']}",
        "ESSAFLOW_STORAGE_URI": f"s3://{BUCKET}/store",
        "ESSAFLOW_S3_ENDPOINT_URL": s3,
        "AWS_ACCESS_KEY_ID": creds["access_key"],
        "AWS_SECRET_ACCESS_KEY": creds["secret_key"],
        "AWS_REGION": "us-east-1",
        "RAY_ADDRESS": f"{LOCALHOST}:{p['ray']}",
        **ray_env(sd / "ray_auth_token"),
        "PREFECT_LOGGING_EXTRA_LOGGERS": "essaflow",
        "PREFECT_SERVER_ANALYTICS_ENABLED": "false",
        "MLFLOW_DISABLE_TELEMETRY": "true",
        "MLFLOW_ENABLE_ARTIFACTS_PROGRESS_BAR": "false",
    }


def rss_mb(pid: int) -> float:
    """Resident memory of a server's whole process group (its pid is the group id), in MB."""
    total = 0
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
            if int(fields[2]) == pid:  # pgrp
                total += int(fields[21]) * os.sysconf("SC_PAGE_SIZE")  # rss pages
        except (OSError, IndexError, ValueError):
            continue
    return round(total / 2**20, 1)


def _healthy(name: str, svc: Service) -> bool:
    paths = {"mlflow-server": "/health", "prefect-server": "/api/health"}
    if name in paths:
        try:
            with urllib.request.urlopen(svc.url + paths[name], timeout=2) as r:
                return r.status == 200
        except OSError:
            return False
    if name in ("seaweedfs", "ray-head"):
        host, port = svc.url.removeprefix("http://").split(":")
        return port_open(host, int(port))
    return svc.is_running()


def up(path: str | Path | None = None, *, worker: bool = True) -> dict[str, dict[str, Any]]:
    """Start whatever is not running yet; returns {service: {url, pid, start_s, rss_mb}}."""
    sd = state_dir(path, recorded=False)  # here (or the project above), not another folder's last stack
    sd.mkdir(parents=True, exist_ok=True)
    p, creds, env = _ports(sd), credentials(sd), client_env(sd)
    _remember(sd)
    s3_env = {
        "MLFLOW_S3_ENDPOINT_URL": env["ESSAFLOW_S3_ENDPOINT_URL"],
        "AWS_ACCESS_KEY_ID": creds["access_key"],
        "AWS_SECRET_ACCESS_KEY": creds["secret_key"],
        "AWS_DEFAULT_REGION": "us-east-1",
    }
    starters = {
        "seaweedfs": lambda: start_seaweedfs(sd, p["s3"], creds["access_key"], creds["secret_key"], buckets=(BUCKET,)),
        "mlflow-server": lambda: start_mlflow_server(
            sd, p["mlflow"], artifacts_destination=f"s3://{BUCKET}/mlflow", extra_env=s3_env
        ),
        "prefect-server": lambda: start_prefect_server(sd, p["prefect"]),
        "ray-head": lambda: start_ray_head(sd, p["ray"]),
        "prefect-worker": lambda: start_prefect_worker(
            sd, env["PREFECT_API_URL"], POOL, extra_env=env, cwd=PROJECT_DIR
        ),
    }
    _private_text(sd / "stack.env", "".join(f"{k}={v}\n" for k, v in env.items()))
    out: dict[str, dict[str, Any]] = {}
    for name in SERVICES:
        if name == "prefect-worker" and not worker:
            continue
        svc = load_service(sd, name)
        t0 = time.monotonic()
        if svc is None or not svc.is_running():
            svc = starters[name]()
        out[name] = {"url": svc.url, "pid": svc.pid, "start_s": round(time.monotonic() - t0, 1)}
    for info in out.values():
        info["rss_mb"] = rss_mb(info["pid"])
    return out


def down(path: str | Path | None = None) -> dict[str, str]:
    """Stop every recorded server by PID (its process group: SIGINT or SIGTERM, then SIGKILL), last started first."""
    sd = state_dir(path)
    out = {}
    for name in reversed(SERVICES):
        svc = load_service(sd, name)
        if svc is None:
            continue
        was = svc.is_running()
        if name in ("ray-head", "prefect-worker"):
            stop_interrupting(svc)
        else:
            svc.stop()
        (sd / f"{name}.service.json").unlink(missing_ok=True)
        out[name] = "stopped" if was else "was not running"
    return out


def status(path: str | Path | None = None) -> dict[str, dict[str, Any]]:
    sd = state_dir(path)
    out = {}
    for name in SERVICES:
        svc = load_service(sd, name)
        if svc is None:
            continue
        running = svc.is_running()
        out[name] = {
            "url": svc.url,
            "pid": svc.pid,
            "running": running,
            "healthy": running and _healthy(name, svc),
            "rss_mb": rss_mb(svc.pid) if running else 0.0,
            "log": str(svc.log_path),
        }
    return out
