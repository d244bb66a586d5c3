"""Suite-wide settings: one torch thread (2-core machines), offline hub, a private cache per session."""

import os

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ.setdefault("HF_DATASETS_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
os.environ.setdefault("MLFLOW_DISABLE_TELEMETRY", "true")
os.environ.setdefault("PREFECT_SERVER_ANALYTICS_ENABLED", "false")

import pytest  # noqa: E402
import torch  # noqa: E402

torch.set_num_threads(1)


@pytest.fixture(scope="session", autouse=True)
def _session_cache(tmp_path_factory):
    """Cached SFT adapters and built models go to a per-session directory, never the user's cache."""
    if "ESSAFLOW_CACHE_DIR" not in os.environ:
        os.environ["ESSAFLOW_CACHE_DIR"] = str(tmp_path_factory.mktemp("essaflow-cache"))
    yield
