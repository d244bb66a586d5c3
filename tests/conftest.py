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

#: The modules that take longest, slowest first (the durations `make test` prints). With `--dist loadfile
#: --no-loadscope-reorder` the test workers take files in collection order, so the long ones start at once and the
#: many short files fill in beside them, instead of one long file starting last and running alone.
SLOWEST_FIRST = (
    "tests/integration/test_unattended.py",
    "tests/e2e/test_recipe_rehearsals.py",
    "tests/integration/test_pipeline_resume.py",
    "tests/learning/test_essa_learning.py",
    "tests/integration/test_essa_seedsync.py",
    "tests/integration/multinode/test_pipelines_on_cluster.py",
    "tests/learning/test_countdown_essa_learning.py",
    "tests/learning/test_countdown_fgrpo_learning.py",
    "tests/e2e/test_cli_finetune.py",
    "tests/vllm/test_vllm_ray.py",
    "tests/vllm/test_vllm_engine.py",
    "tests/integration/test_pipeline_deployment.py",
    "tests/integration/test_compare_flow.py",
    "tests/e2e/test_own_task.py",
    "tests/learning/test_grpo_learning.py",
    "tests/integration/test_pipeline_faults.py",
    "tests/integration/test_essa_ray.py",
    "tests/integration/test_gc.py",
    "tests/e2e/test_browser_ui_run.py",
    "tests/e2e/test_cli_stack.py",
)


def pytest_collection_modifyitems(config, items):
    """Slowest modules first (SLOWEST_FIRST); the rest keep their order. Each module's tests stay together."""
    rank = {path: i for i, path in enumerate(SLOWEST_FIRST)}
    items.sort(key=lambda item: rank.get(item.nodeid.split("::")[0], len(rank)))


@pytest.fixture(scope="session", autouse=True)
def _session_cache(tmp_path_factory):
    """Cached SFT adapters and built models go to a per-session directory, never the user's cache. The test workers
    (pytest-xdist) share it, so an SFT start one worker trained serves the others: entries are content-keyed and
    written atomically, so two workers filling one key at once both end with a whole copy."""
    if "ESSAFLOW_CACHE_DIR" not in os.environ:
        if os.environ.get("PYTEST_XDIST_WORKER"):  # basetemp is <session>/popen-gwN: the session dir is shared
            shared = tmp_path_factory.getbasetemp().parent / "essaflow-cache"
            shared.mkdir(exist_ok=True)
            os.environ["ESSAFLOW_CACHE_DIR"] = str(shared)
        else:
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
