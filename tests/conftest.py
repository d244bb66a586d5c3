"""Suite-wide settings: one torch thread (2-core machines), offline hub, a private cache per session; the session's
Prefect server, shared by the integration tests and the browser test in tests/e2e (one server start, not two); the
small real-architecture checkpoints of tests/support/real_checkpoints.py (each built once per session)."""

import os

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ.setdefault("HF_DATASETS_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
os.environ.setdefault("MLFLOW_DISABLE_TELEMETRY", "true")
os.environ.setdefault("PREFECT_SERVER_ANALYTICS_ENABLED", "false")

from collections.abc import Iterator  # noqa: E402

import pytest  # noqa: E402
import torch  # noqa: E402

from tests.support.real_checkpoints import llama_untrained, qwen_trained, qwen_untrained  # noqa: E402, F401
from tests.support.servers import Server, timed_start  # noqa: E402

torch.set_num_threads(1)


@pytest.fixture(scope="session", autouse=True)
def _session_cache(tmp_path_factory):
    """Cached SFT adapters and built models go to a per-session directory, never the user's cache."""
    if "ESSAFLOW_CACHE_DIR" not in os.environ:
        os.environ["ESSAFLOW_CACHE_DIR"] = str(tmp_path_factory.mktemp("essaflow-cache"))
    yield


@pytest.fixture(scope="session")
def prefect_server(tmp_path_factory) -> Iterator[Server]:
    """`prefect server start` with its own home and sqlite database; the scheduler is off (tests trigger runs)."""
    from devstack import free_port, start_prefect_server

    sd = tmp_path_factory.mktemp("prefect-server")
    svc, took = timed_start(start_prefect_server, sd, free_port(), scheduler=False)
    try:
        yield Server(svc, sd, took)
    finally:
        svc.stop()
