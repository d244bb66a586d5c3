"""One training path for both methods: restore the latest checkpoint, train ESSA or F-GRPO, publish the result.

The Prefect `train` task and the CLI jobs (`essaflow essa`, `essaflow grpo`) both call :func:`train_method`, so every
option behaves the same everywhere. A run keeps its checkpoints in storage under `<run_prefix>/checkpoints/<step>/`
as they are written; a new call for the same run (a retried task, perhaps on another machine) downloads the newest
complete one and the trainer resumes from it. The trained policy is published to `<run_prefix>/adapter`
(a peft LoRA adapter) or, for F-GRPO with grpo.parameters=full, `<run_prefix>/model` (a full checkpoint).
"""

from __future__ import annotations

import json
import logging
from collections.abc import Callable
from contextlib import AbstractContextManager, nullcontext
from dataclasses import dataclass
from pathlib import Path

from essaflow.artifacts import publish_dir, restore_checkpoint, sync_checkpoint
from essaflow.config import PipelineConfig
from essaflow.data import Splits
from essaflow.methods import method_of
from essaflow.refs import AdapterRef, TrainingSummary
from essaflow.storage import ArtifactStore
from essaflow.trainer_io import TrainCallbacks, TrainResult

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class RunStorage:
    """Where one training run keeps its checkpoints and publishes its result."""

    store: ArtifactStore
    run_prefix: str
    """E.g. runs/<run_id>: checkpoints go under <run_prefix>/checkpoints, the result to <run_prefix>/adapter."""


@dataclass(frozen=True)
class Trained:
    """A finished training call: what the trainer returned and where its result now lives in storage."""

    result: TrainResult
    uri: str
    digest: str
    restored_from: str | None
    """Name of the stored checkpoint this call started from (None: a fresh start)."""
    metrics_uri: str
    """<run_prefix>/train/metrics.jsonl: one row per generation/step, as the trainer recorded them (what the
    compare report's curves and `essaflow project-scaling --from-run` read)."""

    def adapter_ref(self, cfg: PipelineConfig) -> AdapterRef:
        """The train stage's reference: where the result lives, and the training summary built once from the
        trainer's result (the method tags of cfg, steps, resume point, work per node, usage, sharding, memory)."""
        r = self.result
        summary = TrainingSummary(
            **method_of(cfg).tags(cfg),
            steps=r.steps,
            resumed_from=r.resumed_from,
            work_by_node=r.work_by_node,
            worker_failures=r.worker_failures,
            wall_s=r.wall_s,
            bytes_per_update=r.bytes_per_update,
            sharding=r.sharding,
            memory_per_rank=r.memory_per_rank,
            usage=r.usage.as_row(),
        )
        return AdapterRef(uri=self.uri, digest=self.digest, kind=cfg.method, output_kind=r.output_kind,
                          training=summary, metrics_uri=self.metrics_uri)  # fmt: skip


Part = Callable[[str], AbstractContextManager]


def _no_timer(name: str) -> AbstractContextManager:
    return nullcontext()


def train_method(
    cfg: PipelineConfig,
    splits: Splits,
    sft_dir: Path,
    storage: RunStorage,
    work_dir: Path,
    callbacks: TrainCallbacks = TrainCallbacks(),
    part: Part = _no_timer,
) -> Trained:
    """Train cfg.method from the SFT adapter in `sft_dir`, resuming from the run's newest stored checkpoint.

    `work_dir` is this call's scratch directory (checkpoints and the result are written there first). `part(name)`
    is an optional timer context ("compute", "storage") so callers can split the stage's time.
    """
    trainer = method_of(cfg).trainer()
    checkpoints = Path(work_dir) / "checkpoints"
    with part("storage"):
        restored = restore_checkpoint(storage.store, storage, checkpoints)
    if restored is not None:
        log.info("resuming from checkpoint %s of %s", restored, storage.run_prefix)

    def on_checkpoint(path: Path) -> None:  # every checkpoint goes to storage as soon as it is complete
        with part("storage"):
            log.info("checkpoint %s -> %s", Path(path).name, sync_checkpoint(storage.store, storage, Path(path)))
        callbacks.checkpoint(path)

    with part("compute"):
        result = trainer(
            cfg,
            splits,
            sft_dir,
            Path(work_dir) / "out",
            checkpoint_dir=checkpoints,
            on_metrics=callbacks.on_metrics,
            on_checkpoint=on_checkpoint,
        )
    with part("storage"):
        uri, digest = publish_dir(
            storage.store, f"{storage.run_prefix}/{result.output_dir.name}", result.output_dir, overwrite=True
        )
        rows_dir = Path(work_dir) / "train-rows"  # a directory artifact, so its manifest vouches for it
        rows_dir.mkdir(parents=True, exist_ok=True)
        (rows_dir / "metrics.jsonl").write_text("".join(json.dumps(m) + "\n" for m in result.metrics))
        publish_dir(storage.store, f"{storage.run_prefix}/train", rows_dir, overwrite=True)
        metrics_key = f"{storage.run_prefix}/train/metrics.jsonl"
    if result.work_by_node:
        log.info("work by Ray node: %s; workers lost: %d", result.work_by_node, result.worker_failures)
    return Trained(result, uri, digest, restored, storage.store.url(metrics_key))
