"""Faults during a real pipeline run (in this process, against the real Prefect, MLflow, SeaweedFS and Ray servers):
a registration retried after it succeeded, a train task that crashes once after a checkpoint, an S3 server that
goes away for a few seconds. Each run completes; nothing is duplicated; nothing partial is visible."""

from __future__ import annotations

import logging
import threading
import time

import pytest

from essaflow import tracking
from essaflow.artifacts import manifest_digest
from essaflow.config import parse_config
from essaflow.gate import promotion
from essaflow.methods import ESSA
from essaflow.storage import MANIFEST, open_store
from tests.integration.pipeline_support import task_run_states, tiny
from tests.support.waiting import wait_until

pytestmark = [pytest.mark.integration, pytest.mark.usefixtures("ray_disconnect_after")]


@pytest.fixture
def short_backoff(monkeypatch):
    """The flow's register and train tasks with a tenth of their retry delays (2 s / 5 s before the first retry):
    the same retries, without the waits."""
    import flows.finetune as pipeline

    for name in ("register", "train_adapter"):
        task = getattr(pipeline, name)
        monkeypatch.setattr(
            pipeline, name, task.with_options(retry_delay_seconds=[d / 10 for d in task.retry_delay_seconds])
        )


def _finetune(overrides: dict):
    from flows.finetune import finetune

    return finetune(parse_config(tiny(**overrides)))


def _committed_only(store, prefix: str) -> list[str]:
    """Keys under prefix that belong to no committed artifact (no manifest in any parent); a run's lease is
    coordination, not an artifact."""
    keys = [k for k in store.list(prefix) if "/lease/" not in k]
    committed = {k.rsplit("/", 1)[0] for k in keys if k.endswith("/" + MANIFEST)}
    return [k for k in keys if not any(k.startswith(c + "/") for c in committed)]


def test_a_registration_retried_after_success_makes_no_second_version(stack_in_process, short_backoff, monkeypatch):
    real, calls = promotion.register_with_gate, []

    def lost_reply(*args, **kwargs):  # the version is created, then the connection drops before the reply
        calls.append(real(*args, **kwargs))
        if len(calls) == 1:
            raise ConnectionResetError("connection reset after the registry committed")
        return calls[-1]

    monkeypatch.setattr(promotion, "register_with_gate", lost_reply)
    result = _finetune({"name": "retry-register", "method": "none"})

    assert len(calls) == 2 and calls[0].version == calls[1].version == result.model_version
    versions = tracking.client(stack_in_process.mlflow.url).search_model_versions("name = 'retry-register'")
    assert [v.version for v in versions] == [result.model_version]
    assert task_run_states(result.run_id, {"register"})["register"] == "Completed"


def test_a_train_task_killed_once_resumes_from_its_checkpoint_and_ends_with_the_same_adapter(
    stack_in_process, short_backoff, monkeypatch
):
    cfg = {"method": "essa", "essa": {**tiny()["essa"], "generations": 3, "checkpoint_every": 1}}
    clean = _finetune({"name": "resume-clean", **cfg})

    real, attempts, resumed = ESSA.trainer(), [], []

    def crashes_once(config, splits, sft, out_dir, checkpoint_dir=None, on_metrics=None, on_checkpoint=None):
        attempts.append(sorted(p.name for p in checkpoint_dir.glob("[0-9]*")) if checkpoint_dir.exists() else [])

        def checkpoint_then_die(path):
            on_checkpoint(path)  # synced to storage first, as in a real crash after a checkpoint
            if len(attempts) == 1:
                raise RuntimeError("simulated crash of the training process")

        result = real(config, splits, sft, out_dir, checkpoint_dir, on_metrics, checkpoint_then_die)
        resumed.append(result.resumed_from)
        return result

    monkeypatch.setattr(ESSA, "trainer", lambda: crashes_once)
    crashed = _finetune({"name": "resume-crash", **cfg})

    assert attempts == [[], ["00000001"]]  # the retry found generation 1, downloaded from storage
    assert resumed == [1]
    store = open_store(stack_in_process.storage_uri)
    a, b = (store.read_manifest(f"runs/{r.run_id}/adapter") for r in (clean, crashed))
    assert manifest_digest(a) == manifest_digest(b), "resumed run must end with the uninterrupted run's adapter"
    assert task_run_states(crashed.run_id, {"train"})["train"] == "Completed"


class _RetriedRequests(logging.Handler):
    """Counts refused requests that were retried, from any thread: botocore's own retries (its standard mode logs
    each) and the store's (it logs each attempt it retries; it alone once botocore's retry quota is spent)."""

    def __init__(self):
        super().__init__(logging.DEBUG)
        self.count = 0

    def emit(self, record: logging.LogRecord) -> None:
        message = record.getMessage()
        if message.startswith("Retry needed, retrying request") or "failed (EndpointConnectionError)" in message:
            self.count += 1


RETRY_LOGGERS = ("botocore.retries.standard", "essaflow.storage.s3")


def test_an_s3_outage_of_a_few_seconds_is_ridden_out_and_leaves_nothing_partial(
    stack_in_process, seaweedfs_factory, monkeypatch
):
    server = seaweedfs_factory("outage")
    for key, value in server.env.items():
        monkeypatch.setenv(key, value)
    store = server.store("run")
    retried = _RetriedRequests()
    for name in RETRY_LOGGERS:  # on at DEBUG, also where an earlier logging setup (Prefect's) disabled them
        logger = logging.getLogger(name)
        monkeypatch.setattr(logger, "level", logging.DEBUG)
        monkeypatch.setattr(logger, "disabled", False)
        logger.addHandler(retried)
    outage: dict[str, float] = {}

    def dataset_landed() -> bool:
        return any(k.endswith(MANIFEST) for k in store.list("datasets"))

    def take_server_down_after_the_dataset_lands():
        wait_until(dataset_landed, 120, "the run's dataset in storage", every=0.1)
        before = retried.count
        server.stop()
        down_since = time.monotonic()

        def met() -> bool:  # a few seconds down, and under the run's requests (refused, retried): no longer, so
            # that the store's own retry window (20 s) outlasts the outage however loaded the machine
            return retried.count > before and time.monotonic() - down_since >= 3.0

        try:
            outage["met"] = wait_until(met, 60, "the run's requests to fail")
        finally:
            server.start()
            outage["down_s"] = time.monotonic() - down_since
            print(f"S3 down for {outage['down_s']:.1f} s (restart included)")

    chaos = threading.Thread(target=take_server_down_after_the_dataset_lands, daemon=True)
    chaos.start()
    try:
        result = _finetune({"name": "s3-outage", "method": "none", "storage_uri": "s3://outage/run"})
    finally:
        chaos.join(timeout=130)
        for name in RETRY_LOGGERS:
            logging.getLogger(name).removeHandler(retried)

    assert outage.get("met"), "the outage must have happened during the run, under its requests"
    assert result.model_version and result.aliases
    run = f"runs/{result.run_id}"
    for prefix in (f"{run}/adapter", f"{run}/eval/base", f"{run}/eval/tuned"):
        store.verify(prefix)
    assert _committed_only(store, "") == []
