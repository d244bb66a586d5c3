"""The SFT warm start and the training stage (ESSA or F-GRPO), with checkpoints synced to storage.

A retried `train` starts in a fresh directory, downloads the newest committed checkpoint of this run from storage
and hands it to the trainer, which resumes from it: the retry may run on another machine.
"""

from __future__ import annotations

import importlib
import shutil
import tempfile
import time
from collections.abc import Callable
from contextlib import suppress
from pathlib import Path
from typing import Any

from prefect import get_run_logger, task

from essaflow import tracking
from essaflow.config import PipelineConfig
from essaflow.pipeline_io import (
    AdapterRef,
    DatasetRef,
    RunRef,
    Timer,
    fetch_dir,
    local_digest,
    manifest_digest,
    publish_dir,
    read_dataset,
    restore_checkpoint,
    sync_checkpoint,
)
from essaflow.results import TrainResult
from essaflow.storage import StorageError, open_store
from essaflow.tiny_model import cache_root
from essaflow.warm_start import cached_sft_adapter, sft_key
from tasks.progress import StageProgress
from tasks.retry import retry_policy
from tasks.run import record_stage, tracked

METRICS_EVERY_S = 2.0
#: method -> (module, function); imported only when that method runs.
TRAINERS = {"essa": ("essaflow.essa.trainer", "train_essa"), "fgrpo": ("essaflow.grpo.trainer", "train_grpo")}


def load_trainer(method: str) -> Callable[..., TrainResult]:
    module, fn = TRAINERS[method]
    return getattr(importlib.import_module(module), fn)


def _given_adapter(config: PipelineConfig, store: Any) -> AdapterRef:
    """config.adapter_uri: an essaflow artifact (with manifest) is used in place; a plain directory is published."""
    uri = config.adapter_uri or ""
    if uri.startswith("s3://") or (Path(uri.removeprefix("file://")) / "manifest.json").exists():
        src = open_store(uri)
        return AdapterRef(uri=src.uri, digest=manifest_digest(src.read_manifest("")), kind="given")
    local = Path(uri.removeprefix("file://"))
    if not (local / "adapter_config.json").exists():
        raise StorageError(f"adapter_uri {uri!r} is not a LoRA adapter directory (no adapter_config.json)", "invalid")
    uri, digest = publish_dir(store, f"adapters/given/{local_digest(local)}", local)
    return AdapterRef(uri=uri, digest=digest, kind="given")


@task(
    name="warm_start",
    task_run_name="warm_start",
    **retry_policy(),
    on_completion=[record_stage],
)
def warm_start(config: PipelineConfig, dataset: DatasetRef, run: RunRef) -> AdapterRef:
    """LoRA SFT on the SFT split (ESSA-v3 sec. 3.2), stored once per (model, SFT config, SFT data) hash."""
    timer = Timer()
    store = open_store(run.storage_uri)
    if config.adapter_uri:
        with timer.part("storage"):
            ref = _given_adapter(config, store)
        return ref.model_copy(update={"stage": "warm_start", "timings": timer.timings()})
    with timer.part("storage"):
        splits = read_dataset(dataset)
        prefix = f"adapters/sft/{sft_key(config.model, config.sft, splits.sft)}"
        try:
            uri, digest = store.url(prefix), manifest_digest(store.read_manifest(prefix))
            get_run_logger().info("SFT adapter already in storage: %s", uri)
        except StorageError as e:
            if e.kind != "incomplete":
                raise
            uri = None
    if uri is None:
        with timer.part("compute"):
            local = cached_sft_adapter(config, splits)
        with timer.part("storage"):
            uri, digest = publish_dir(store, prefix, local)
    return AdapterRef(
        uri=uri, digest=digest, kind="sft", steps=config.sft.steps, stage="warm_start", timings=timer.timings()
    )


@task(
    name="train",
    task_run_name="train",
    **retry_policy(backoff_s=5),
    on_completion=[record_stage],
)
def train(config: PipelineConfig, dataset: DatasetRef, sft: AdapterRef, run: RunRef) -> AdapterRef:
    """ESSA or F-GRPO from the SFT adapter; checkpoints go to runs/<run_id>/checkpoints/<step>/ as written."""
    timer = Timer()
    log = get_run_logger()
    store = open_store(run.storage_uri)
    adapter_prefix = f"{run.run_prefix}/adapter"
    with timer.part("storage"):
        sft_dir = fetch_dir(sft.uri, sft.digest)
    if config.method == "none":  # the SFT adapter is the result
        with timer.part("storage"):
            uri, digest = publish_dir(store, adapter_prefix, sft_dir, overwrite=True)
        return AdapterRef(uri=uri, digest=digest, kind="none", stage="train", timings=timer.timings())

    trainer = load_trainer(config.method)
    work = Path(tempfile.mkdtemp(prefix=f"train-{run.run_id[:8]}-", dir=_work_root()))
    try:
        with timer.part("storage"):
            splits = read_dataset(dataset)
            resumed = restore_checkpoint(store, run, work / "checkpoints")
        if resumed is not None:
            log.info("resuming from checkpoint %s of run %s", resumed, run.run_id)
        total = config.essa.generations if config.method == "essa" else config.grpo.steps
        progress = StageProgress("train", total)
        mlrun = tracked(run)

        pending: list[dict[str, Any]] = []
        flushed = [time.monotonic()]

        def flush_metrics() -> None:  # one MLflow call per ~2 s, not one per step
            with timer.part("tracking"):
                tracking.log_step_metrics(mlrun, pending)
            pending.clear()
            flushed[0] = time.monotonic()

        def on_metrics(row: dict[str, Any]) -> None:
            pending.append(row)
            if time.monotonic() - flushed[0] >= METRICS_EVERY_S:
                flush_metrics()
            step = int(row.get("step", row.get("generation", 0)))
            shown = {k: round(v, 4) for k, v in row.items() if isinstance(v, float)}
            progress.update(step, " ".join(f"{k}={v}" for k, v in list(shown.items())[:4]))

        def on_checkpoint(path: Path) -> None:
            with timer.part("storage"):
                log.info("checkpoint %s -> %s", Path(path).name, sync_checkpoint(store, run, Path(path)))

        try:
            with timer.part("compute"):
                result = trainer(
                    config,
                    splits,
                    sft_dir,
                    work / "out",
                    checkpoint_dir=work / "checkpoints",
                    on_metrics=on_metrics,
                    on_checkpoint=on_checkpoint,
                )
        except BaseException:
            with suppress(Exception):  # keep what was measured; the trainer's error is the one to report
                flush_metrics()
            raise
        flush_metrics()
        progress.update(total, "done")
        with timer.part("storage"):
            uri, digest = publish_dir(store, adapter_prefix, Path(result.adapter_dir), overwrite=True)
        if result.work_by_node:
            log.info("work by Ray node: %s; workers lost: %d", result.work_by_node, result.worker_failures)
        with timer.part("tracking"):
            summary = {
                "steps": result.steps,
                "wall_s": result.wall_s,
                "bytes_per_update": result.bytes_per_update,
                "nodes_used": len(result.work_by_node),
                "worker_failures": result.worker_failures,
            }
            if result.resumed_from is not None:
                summary["resumed_from"] = result.resumed_from
            tracking.log_step_metrics(mlrun, [{"step": result.steps, **summary}], prefix="train.summary")
    finally:
        shutil.rmtree(work, ignore_errors=True)
    return AdapterRef(
        uri=uri,
        digest=digest,
        kind=config.method,
        steps=result.steps,
        resumed_from=result.resumed_from,
        work_by_node=result.work_by_node,
        worker_failures=result.worker_failures,
        stage="train",
        timings=timer.timings(),
    )


def _work_root() -> Path:
    root = cache_root() / "work"
    root.mkdir(parents=True, exist_ok=True)
    return root
