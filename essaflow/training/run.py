"""One training path for both methods: restore the latest checkpoint, train ESSA or F-GRPO, publish the result.

The Prefect `train` task and the CLI jobs (`essaflow essa`, `essaflow grpo`) both call :func:`train`, so every
option behaves the same everywhere. A run keeps its checkpoints in storage under `<run_prefix>/checkpoints/<step>/`
as they are written; a new call for the same run (a retried task, perhaps on another machine) downloads the newest
complete one and the trainer resumes from it. The trained policy is published to `<run_prefix>/adapter`
(a peft LoRA adapter) or, for F-GRPO with grpo.parameters=full, `<run_prefix>/model` (a full checkpoint).
"""

from __future__ import annotations

import importlib
import json
import logging
from collections.abc import Callable
from contextlib import AbstractContextManager, nullcontext
from dataclasses import dataclass
from pathlib import Path

from essaflow.artifacts import publish_dir, restore_checkpoint, sync_checkpoint
from essaflow.config import ESSAConfig, GRPOConfig, PipelineConfig
from essaflow.data import Splits
from essaflow.refs import AdapterRef
from essaflow.storage import ArtifactStore
from essaflow.training.contract import TrainCallbacks, TrainResult

log = logging.getLogger(__name__)

SFT_ONLY = "SFT only"
"""The label of method none: the SFT adapter is the result."""

#: method -> (module, function); imported only when that method runs
TRAINERS = {"essa": ("essaflow.essa.trainer", "train_essa"), "fgrpo": ("essaflow.grpo.trainer", "train_grpo")}


def method_label(method: str, essa: ESSAConfig, grpo: GRPOConfig) -> str:
    """The method variant as results show it: 'ESSA(es, accuracy)', 'GRPO', 'F-GRPO(gamma=0.5)', 'F-DAPO(...)'."""
    if method == "essa":
        return f"ESSA({essa.strategy}, {essa.fitness})"
    if method == "none":
        return SFT_ONLY
    base = grpo.loss.upper()
    return base if grpo.gamma == 0 else f"F-{base}(gamma={grpo.gamma:g})"


def method_tags(method: str, essa: ESSAConfig, grpo: GRPOConfig) -> dict[str, str]:
    """What every reported result carries about how it was obtained: the method variant and, for ESSA, the
    kind of fitness ('black-box reward' from the task reward alone, or 'gray-box: needs reference answers')."""
    tags = {"method_label": method_label(method, essa, grpo)}
    if method == "essa":
        tags["fitness_kind"] = essa.fitness_kind
    return tags


def trained_method_tags(adapter: AdapterRef) -> dict[str, str]:
    """method_tags of the run that trained `adapter`, read from the train stage's reference (which records the
    label of a trained method, and kind "none" when the SFT adapter is the result)."""
    tags = {"method_label": SFT_ONLY if adapter.kind == "none" else adapter.method_label}
    if adapter.fitness_kind:
        tags["fitness_kind"] = adapter.fitness_kind
    return tags


def load_trainer(method: str) -> Callable[..., TrainResult]:
    module, fn = TRAINERS[method]
    return getattr(importlib.import_module(module), fn)


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


Part = Callable[[str], AbstractContextManager]


def _no_timer(name: str) -> AbstractContextManager:
    return nullcontext()


def train(
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
    trainer = load_trainer(cfg.method)
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
