"""Shared fixtures for integration tests: real servers started on 127.0.0.1, torn down after."""

from __future__ import annotations

import secrets
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from essaflow.local_stack import Service, ServiceError, free_port, start_seaweedfs, weed_binary
from essaflow.storage import S3Store, open_store


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
    except ServiceError as e:
        pytest.skip(str(e))
    server = SeaweedFS(state_dir, bucket).start()
    server.client().create_bucket(Bucket=bucket)
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
