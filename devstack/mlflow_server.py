"""An MLflow tracking server on 127.0.0.1: sqlite backend in the state dir, artifacts proxied to S3 (or local)."""

from __future__ import annotations

from pathlib import Path

from devstack.ports import LOCALHOST
from devstack.process import Service, base_env, http_ready, python_module, start_process


def start_mlflow_server(
    state_dir: Path,
    port: int,
    *,
    artifacts_destination: str | None = None,
    extra_env: dict[str, str] | None = None,
    timeout: float = 180.0,
) -> Service:
    """`mlflow server` on 127.0.0.1:port: sqlite backend in ``state_dir``, artifacts proxied to S3 (or local).

    One worker and no job execution keep it near 0.6 GB. S3 settings (MLFLOW_S3_ENDPOINT_URL, AWS_*) come in
    ``extra_env``; clients upload through the server and need no S3 credentials of their own.
    """
    state_dir = Path(state_dir).absolute()
    (state_dir / "mlflow").mkdir(parents=True, exist_ok=True)
    env = base_env(
        state_dir,
        {"MLFLOW_SERVER_ENABLE_JOB_EXECUTION": "false", "MLFLOW_DISABLE_TELEMETRY": "true", **(extra_env or {})},
    )
    dest = artifacts_destination or (state_dir / "mlflow" / "artifacts").as_uri()
    argv = [
        *python_module("mlflow"),
        "server",
        "--host",
        LOCALHOST,
        "--port",
        str(port),
        "--workers",
        "1",
        "--backend-store-uri",
        f"sqlite:///{state_dir / 'mlflow' / 'mlflow.db'}",
        "--artifacts-destination",
        dest,
    ]
    url = f"http://{LOCALHOST}:{port}"
    return start_process(
        "mlflow-server", argv, env, state_dir, port, url=url, ready=http_ready(url + "/health"), timeout=timeout
    )
