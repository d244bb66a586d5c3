"""The MLflow tracking server: which one (configured, MLFLOW_TRACKING_URI, or a local sqlite file), a client for
it, and a check that fails fast, naming the URI, before any compute starts. Never imports prefect."""

from __future__ import annotations

import os
from pathlib import Path
from urllib.parse import urlsplit

from essaflow.secrets import mask_std_streams, safe_uri, url_has_password
from essaflow.tracking.sqlite_store import create_if_missing


class TrackingError(RuntimeError):
    """MLflow cannot be used as configured; the message names the URI and the problem."""


def local_tracking_uri(state_dir: str | Path = ".essaflow") -> str:
    return "sqlite:///" + str((Path(state_dir) / "mlflow.db").absolute())


def resolve_tracking_uri(uri: str | None) -> str:
    """The configured URI, else MLFLOW_TRACKING_URI, else a local sqlite file under .essaflow/."""
    return uri or os.environ.get("MLFLOW_TRACKING_URI") or local_tracking_uri()


def check_tracking(uri: str, timeout: float = 5.0) -> None:
    """Fail fast, naming the URI, when the tracking backend cannot be used."""
    scheme = urlsplit(uri).scheme
    if scheme in ("http", "https"):
        import requests

        try:
            resp = requests.get(uri.rstrip("/") + "/health", timeout=timeout)
        except requests.RequestException as e:
            raise TrackingError(
                f"MLflow tracking server {safe_uri(uri)} is unreachable ({type(e).__name__}); start it "
                "(essaflow stack up) or point MLFLOW_TRACKING_URI / tracking_uri at a running server"
            ) from None
        if resp.status_code in (401, 403):
            raise TrackingError(
                f"MLflow tracking server {safe_uri(uri)} rejected our credentials (HTTP {resp.status_code})"
            )
        if resp.status_code != 200:
            raise TrackingError(
                f"MLflow tracking server {safe_uri(uri)} is not healthy (HTTP {resp.status_code} on /health)"
            )
    elif scheme == "sqlite":
        Path(uri.removeprefix("sqlite:///")).parent.mkdir(parents=True, exist_ok=True)
    elif scheme in ("", "file"):
        raise TrackingError(
            f"MLflow tracking URI {uri!r}: the file store cannot hold a model registry; use sqlite:///path.db or http://"
        )


def client(uri: str):
    """MLflow's client for `uri`. A URI with a password masks this process's stdout and stderr first (the `essaflow`
    command does it anyway; a flow run by a Prefect worker or a Python caller may not): MLflow prints the URI, user
    and password, in the "View run" line that ends each run."""
    from mlflow import MlflowClient

    if url_has_password(uri):
        mask_std_streams()

    if uri.startswith("sqlite:///") and "?" not in uri:  # a new local store is built off disk (sqlite_store.py)
        create_if_missing(Path(uri.removeprefix("sqlite:///")))
    return MlflowClient(tracking_uri=uri, registry_uri=uri)
