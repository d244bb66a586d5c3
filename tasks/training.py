"""The SFT warm start and the training stage (ESSA or F-GRPO), with checkpoints synced to storage.

The training itself is `essaflow.training.run.train`, the same function the CLI jobs call: a retried `train` starts in
a fresh directory and resumes from the newest checkpoint this run stored (the retry may run on another machine).
This task adds the Prefect side: progress artifact, MLflow metrics, timings.
"""

from __future__ import annotations

import shutil
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from prefect import get_run_logger, task

from essaflow import tracking
from essaflow.artifacts import fetch_dir, local_digest, manifest_digest, publish_dir, read_dataset
from essaflow.config import DataConfig, ModelConfig, PipelineConfig, SFTConfig
from essaflow.refs import AdapterRef, DatasetRef, RunRef
from essaflow.storage import StorageError, open_store
from essaflow.storage.cache_dir import cache_root
from essaflow.timing import Timer
from essaflow.tracking.buffer import BufferedStepMetrics
from essaflow.training import run as training
from essaflow.training.contract import TrainCallbacks
from essaflow.training.run import RunStorage, method_tags
from tasks.progress import StageProgress
from tasks.retry import retry_policy
from tasks.run import record_stage, tracked


def _given_adapter(uri: str, store: Any) -> AdapterRef:
    """adapter_uri: an essaflow artifact (with manifest) is used in place; a plain directory is published."""
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
def warm_start(
    data: DataConfig, model: ModelConfig, sft: SFTConfig, adapter_uri: str | None, dataset: DatasetRef, run: RunRef
) -> AdapterRef:
    """LoRA SFT on the SFT split (ESSA-v3 sec. 3.2), stored once per (model, SFT config, SFT data) hash; the
    adapter at adapter_uri instead when one is given. data: the prompt formatting SFT trains with."""
    timer = Timer()
    store = open_store(run.storage_uri)
    if adapter_uri:
        with timer.part("storage"):
            ref = _given_adapter(adapter_uri, store)
        return ref.model_copy(update={"stage": "warm_start", "timings": timer.timings()})
    from essaflow.training.warm_start import cached_sft_adapter, sft_key  # torch, as in tasks/data.py

    with timer.part("storage"):
        splits = read_dataset(dataset)
        prefix = f"adapters/sft/{sft_key(model, sft, splits.sft)}"
        try:
            uri, digest = store.url(prefix), manifest_digest(store.read_manifest(prefix))
            get_run_logger().info("SFT adapter already in storage: %s", uri)
        except StorageError as e:
            if e.kind != "incomplete":
                raise
            uri = None
    if uri is None:
        with timer.part("compute"):
            local = cached_sft_adapter(model, sft, splits, data.prompt_format())
        with timer.part("storage"):
            uri, digest = publish_dir(store, prefix, local)
    steps = sft.steps if sft.trains else 0
    return AdapterRef(uri=uri, digest=digest, kind="sft", steps=steps, stage="warm_start", timings=timer.timings())


#: what the progress line shows of a metrics row: ESSA's fitness, ties and step size; GRPO's reward; held-out accuracy
PROGRESS_KEYS = ("fitness_mean", "tie_share", "sigma", "reward_mean", "zero_variance_share", "loss", "eval_greedy")


@task(
    name="train",
    task_run_name="train",
    **retry_policy(backoff_s=5),
    on_completion=[record_stage],
)
def train(config: PipelineConfig, dataset: DatasetRef, sft: AdapterRef, run: RunRef) -> AdapterRef:
    """ESSA or F-GRPO from the SFT adapter (essaflow.training.run.train); checkpoints go to storage as written.

    The whole pipeline config: the trainers take it (each reads its method's section and the sections its scorer
    or rollouts use, essaflow.config.method_trajectory)."""
    timer = Timer()
    store = open_store(run.storage_uri)
    with timer.part("storage"):
        sft_dir = fetch_dir(sft.uri, sft.digest)
    if config.method == "none":  # the SFT adapter is the result
        with timer.part("storage"):
            uri, digest = publish_dir(store, f"{run.run_prefix}/adapter", sft_dir, overwrite=True)
        return AdapterRef(uri=uri, digest=digest, kind="none", stage="train", timings=timer.timings())
    total = config.essa.generations if config.method == "essa" else config.grpo.steps
    progress = StageProgress("train", total)

    def on_metrics(row: dict[str, Any]) -> None:
        with timer.part("tracking"):
            metrics.add(row)
        shown = [f"{k}={round(row[k], 4)}" for k in PROGRESS_KEYS if isinstance(row.get(k), float | int)]
        progress.update(int(row.get("step", row.get("generation", 0))), " ".join(shown))

    with timer.part("storage"):
        splits = read_dataset(dataset)
    with _scratch(run) as work, BufferedStepMetrics(tracked(run)) as metrics:
        trained = training.train(
            config, splits, sft_dir, RunStorage(store, run.run_prefix), work, TrainCallbacks(on_metrics), timer.part
        )
    progress.update(total, "done")
    result = trained.result
    with timer.part("tracking"):
        summary = {
            "steps": result.steps,
            "wall_s": result.wall_s,
            "bytes_per_update": result.bytes_per_update,
            "nodes_used": len(result.work_by_node),
            "worker_failures": result.worker_failures,
            **result.usage.as_row("usage_"),  # generated/forward/backward tokens, device-seconds
            **{f"memory_per_rank_{k}": v for k, v in result.memory_per_rank.items()},  # bytes one rank holds
        }
        if result.resumed_from is not None:
            summary["resumed_from"] = result.resumed_from
        done = tracking.logged_steps(tracked(run), "train.summary")  # a retried close after this logged it
        tracking.log_step_metrics(tracked(run), [{"step": result.steps, **summary}], "train.summary", done)
        if result.sharding:
            tracking.set_tags(tracked(run), {"essaflow.sharding": result.sharding})
    return AdapterRef(
        uri=trained.uri,
        digest=trained.digest,
        kind=config.method,
        **method_tags(config.method, config.essa, config.grpo),
        output_kind=result.output_kind,
        steps=result.steps,
        resumed_from=result.resumed_from,
        work_by_node=result.work_by_node,
        worker_failures=result.worker_failures,
        wall_s=result.wall_s,
        bytes_per_update=result.bytes_per_update,
        sharding=result.sharding,
        memory_per_rank=result.memory_per_rank,
        usage=result.usage.as_row(),
        metrics_uri=trained.metrics_uri,
        stage="train",
        timings=timer.timings(),
    )


@contextmanager
def _scratch(run: RunRef) -> Iterator[Path]:
    """A fresh local directory for one attempt (a retry may run elsewhere: it restores from storage)."""
    root = cache_root() / "work"
    root.mkdir(parents=True, exist_ok=True)
    work = Path(tempfile.mkdtemp(prefix=f"train-{run.run_id[:8]}-", dir=root))
    try:
        yield work
    finally:
        shutil.rmtree(work, ignore_errors=True)
