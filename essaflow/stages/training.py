"""The two training stages against the run's storage: the SFT warm start and the training.

- Warm start: LoRA SFT on the SFT split (ESSA-v3 sec. 3.2), stored once per (model, SFT config, SFT data) hash
  under adapters/sft/; an adapter given by URI is used instead (an essaflow artifact in place, a plain directory
  published first).
- Training: ESSA or F-GRPO from the SFT adapter (essaflow.training.run.train_method) in a fresh scratch directory,
  resuming from the newest checkpoint this run stored (a retry may run on another machine); the per-step rows go to
  MLflow in batches, the training summary once at the end. Method none publishes the SFT adapter as the result.

Never imports prefect; the model stack (torch) is imported only where a stage trains.
"""

from __future__ import annotations

import shutil
import tempfile
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, contextmanager, nullcontext
from pathlib import Path
from typing import Any

from essaflow import tracking
from essaflow.artifacts import fetch_dir, local_digest, manifest_digest, publish_dir, read_dataset
from essaflow.config import DataConfig, ModelConfig, PipelineConfig, SFTConfig
from essaflow.methods import method_of
from essaflow.refs import AdapterRef, DatasetRef, RunRef, TrainingSummary
from essaflow.storage import ArtifactStore, StorageError, open_store
from essaflow.storage.cache_dir import cache_root
from essaflow.timing import Timer
from essaflow.tracking.buffer import BufferedStepMetrics
from essaflow.trainer_io import TrainCallbacks
from essaflow.training.run import RunStorage, train_method

PROGRESS_KEYS = ("fitness_mean", "tie_share", "sigma", "reward_mean", "zero_variance_share", "loss", "eval_greedy")
"""What a progress line shows of a metrics row: ESSA's fitness, ties and step size; GRPO's reward; held-out
accuracy."""


def given_adapter(uri: str, store: ArtifactStore) -> AdapterRef:
    """adapter_uri: an essaflow artifact (with manifest) is used in place; a plain directory is published."""
    if uri.startswith("s3://") or (Path(uri.removeprefix("file://")) / "manifest.json").exists():
        src = open_store(uri)
        return AdapterRef(uri=src.uri, digest=manifest_digest(src.read_manifest("")), kind="given")
    local = Path(uri.removeprefix("file://"))
    if not (local / "adapter_config.json").exists():
        raise StorageError(f"adapter_uri {uri!r} is not a LoRA adapter directory (no adapter_config.json)", "invalid")
    uri, digest = publish_dir(store, f"adapters/given/{local_digest(local)}", local)
    return AdapterRef(uri=uri, digest=digest, kind="given")


def stored_adapter(store: ArtifactStore, prefix: str) -> tuple[str, str] | None:
    """(uri, digest) of the complete adapter artifact at `prefix`, or None when the store holds none there."""
    try:
        return store.url(prefix), manifest_digest(store.read_manifest(prefix))
    except StorageError as e:
        if e.kind != "incomplete":
            raise
        return None


def warm_start_stage(
    data: DataConfig, model: ModelConfig, sft: SFTConfig, adapter_uri: str | None, dataset: DatasetRef, run: RunRef
) -> AdapterRef:
    """The adapter training starts from: the one at adapter_uri, else the SFT adapter of this model, SFT config and
    SFT split (from storage when stored, else trained here and published). data: the prompt formatting."""
    timer, store = Timer(), open_store(run.storage_uri)
    if adapter_uri:
        with timer.part("storage"):
            ref = given_adapter(adapter_uri, store)
        return ref.model_copy(update={"stage": "warm_start", "timings": timer.timings()})
    from essaflow.training.warm_start import cached_sft_adapter, sft_key  # torch: only where a stage trains

    with timer.part("storage"):
        splits = read_dataset(dataset)
        prefix = f"adapters/sft/{sft_key(model, sft, splits.sft)}"
        found = stored_adapter(store, prefix)
    reused = found is not None
    if found is None:
        with timer.part("compute"):
            local = cached_sft_adapter(model, sft, splits, data.prompt_format())
        with timer.part("storage"):
            found = publish_dir(store, prefix, local)
    summary = TrainingSummary(steps=sft.steps if sft.trains else 0)
    return AdapterRef(uri=found[0], digest=found[1], kind="sft", training=summary, stage="warm_start",
                      timings=timer.timings(), reused=reused)  # fmt: skip


def planned_steps(cfg: PipelineConfig) -> int:
    """Generations (ESSA) or optimizer steps (F-GRPO) the training runs at most."""
    return method_of(cfg).planned_steps(cfg)


def progress_note(row: dict[str, Any]) -> tuple[int, str]:
    """(step or generation, `key=value` of the PROGRESS_KEYS the row has) of a trainer's metrics row."""
    shown = [f"{k}={round(row[k], 4)}" for k in PROGRESS_KEYS if isinstance(row.get(k), float | int)]
    return int(row.get("step", row.get("generation", 0))), " ".join(shown)


@contextmanager
def scratch_dir(run_id: str) -> Iterator[Path]:
    """A fresh local directory for one attempt under the cache dir, removed afterwards (a retry may run elsewhere:
    it restores from storage)."""
    root = cache_root() / "work"
    root.mkdir(parents=True, exist_ok=True)
    work = Path(tempfile.mkdtemp(prefix=f"train-{run_id[:8]}-", dir=root))
    try:
        yield work
    finally:
        shutil.rmtree(work, ignore_errors=True)


def step_metrics(run: RunRef) -> AbstractContextManager[BufferedStepMetrics | None]:
    """The run's per-step rows, sent to MLflow in batches; None for a CLI job's run (no MLflow run)."""
    return BufferedStepMetrics(tracking.tracked(run)) if run.mlflow_run_id else nullcontext()


def train_stage(
    config: PipelineConfig,
    dataset: DatasetRef,
    sft: AdapterRef,
    run: RunRef,
    on_row: Callable[[dict[str, Any]], None] | None = None,
) -> AdapterRef:
    """Train config.method from the SFT adapter (method none: the SFT adapter is the result), publish the result
    under the run's prefix, log its rows and summary to MLflow; `on_row` sees each metrics row too."""
    timer, store = Timer(), open_store(run.storage_uri)
    with timer.part("storage"):
        sft_dir = fetch_dir(sft.uri, sft.digest)
    if not method_of(config).trains:
        with timer.part("storage"):
            uri, digest = publish_dir(store, f"{run.run_prefix}/adapter", sft_dir, overwrite=True)
        return AdapterRef(uri=uri, digest=digest, kind="none", stage="train", timings=timer.timings())
    with timer.part("storage"):
        splits = read_dataset(dataset)
    with scratch_dir(run.run_id) as work, step_metrics(run) as metrics:

        def on_metrics(row: dict[str, Any]) -> None:
            if metrics is not None:
                with timer.part("tracking"):
                    metrics.add(row)
            if on_row is not None:
                on_row(row)

        storage, callbacks = RunStorage(store, run.run_prefix), TrainCallbacks(on_metrics)
        trained = train_method(config, splits, sft_dir, storage, work, callbacks, timer.part)
    ref = trained.adapter_ref(config)
    if run.mlflow_run_id:
        with timer.part("tracking"):
            tracking.log_training_summary(tracking.tracked(run), ref.training)
    return ref.model_copy(update={"stage": "train", "timings": timer.timings()})
