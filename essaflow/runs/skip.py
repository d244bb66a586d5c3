"""Nothing new, nothing run: a run whose inputs equal those of the pipeline's last completed run is skipped.

A run's inputs are three digests (`run_inputs`):

- `data`: the data snapshot, the content hash of the prepared splits the trainer would read (`data_snapshot`; the
  splits are content-addressed, so a source file changed in place or a new data config is a new snapshot);
- `config`: the whole pipeline config less where it runs (`WHERE_IT_RUNS`: storage, tracking and Ray addresses):
  every other field, a budget such as `essa.generations` included, can change the adapter or its report;
- `base`: the base model's identity by content (essaflow/model/identity.py).

A completed run records them as MLflow tags (`essaflow.inputs.*`, with `essaflow.outcome=trained`); the next run
compares its own with the newest such run's before the base model is even resolved and, when all three are equal,
ends at once as skipped (`essaflow.outcome=skipped`, the reason in `essaflow.skipped`). `force` (`--force`, the
flow parameter) trains anyway; a resume never skips. Never imports prefect.
"""

from __future__ import annotations

from dataclasses import dataclass

from essaflow import tracking
from essaflow.config import PipelineConfig
from essaflow.model.identity import model_identity
from essaflow.refs import DatasetRef, RunInputs, RunRef
from essaflow.storage.sha256 import sha256_bytes
from essaflow.timing import Timer

WHERE_IT_RUNS = frozenset({"storage_uri", "tracking_uri", "ray_address"})
"""Config fields that say where a run happens, not what it computes: not part of its inputs."""
OUTCOME_TAG = "essaflow.outcome"
TRAINED, SKIPPED = "trained", "skipped"
SKIPPED_TAG = "essaflow.skipped"
INPUT_TAG = "essaflow.inputs."


def data_snapshot(dataset: DatasetRef) -> str:
    """The digest of the data snapshot the run read (every file with its digest or ETag, essaflow.data.prepare),
    or the prepared splits' content hash for a dataset that recorded no snapshot."""
    return dataset.snapshot.get("digest") or dataset.hash


def config_identity(cfg: PipelineConfig) -> str:
    """Digest of the config less WHERE_IT_RUNS."""
    body = cfg.model_dump_json(exclude=set(WHERE_IT_RUNS))
    return sha256_bytes(body.encode())[:16]


def run_inputs(cfg: PipelineConfig, dataset: DatasetRef) -> dict[str, str]:
    """{"data", "config", "base"}: what decides whether a run has anything new to train on."""
    return {"data": data_snapshot(dataset), "config": config_identity(cfg), "base": model_identity(cfg.model)}


def input_tags(inputs: dict[str, str]) -> dict[str, str]:
    return {f"{INPUT_TAG}{k}": v for k, v in inputs.items()}


@dataclass(frozen=True)
class LastCompleted:
    """The pipeline's newest completed (trained) run and the inputs it recorded."""

    run_id: str
    mlflow_run_id: str
    ended: str
    inputs: dict[str, str]


def last_completed(tracking_uri: str, name: str) -> LastCompleted | None:
    """The newest FINISHED MLflow run of pipeline `name` that trained (skipped runs and failed ones do not count)."""
    from datetime import datetime, timezone

    c = tracking.client(tracking_uri)
    exp = c.get_experiment_by_name(name)
    if exp is None:
        return None
    found = c.search_runs(
        [exp.experiment_id],
        filter_string=f"attributes.status = 'FINISHED' and tags.`{OUTCOME_TAG}` = '{TRAINED}'",
        order_by=["attributes.end_time DESC"],
        max_results=1,
    )
    if not found:
        return None
    run = found[0]
    tags = run.data.tags
    ended = datetime.fromtimestamp((run.info.end_time or 0) / 1000, timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
    inputs = {k.removeprefix(INPUT_TAG): v for k, v in tags.items() if k.startswith(INPUT_TAG)}
    return LastCompleted(tags.get(tracking.RUN_TAG, ""), run.info.run_id, ended, inputs)


def unchanged_since(inputs: dict[str, str], last: LastCompleted | None) -> str | None:
    """Why this run has nothing new (the reason a skipped run reports), or None when it should train."""
    if last is None or last.inputs != inputs:
        return None
    return (
        f"nothing new since run {last.run_id} (completed {last.ended}): the same data snapshot {inputs['data']}, "
        f"config {inputs['config']} and base model {inputs['base']}; pass force to train anyway"
    )


def compare_inputs(cfg: PipelineConfig, dataset: DatasetRef, run: RunRef, may_skip: bool) -> RunInputs:
    """The run's inputs, recorded as MLflow tags on its run; with `may_skip` (not forced, not a resume), the reason
    to skip when the pipeline's last completed run had the same ones."""
    timer = Timer()
    with timer.part("compute"):
        inputs = run_inputs(cfg, dataset)
    with timer.part("tracking"):
        tracking.set_tags(tracking.tracked(run), input_tags(inputs))
        last = last_completed(run.tracking_uri, run.name) if may_skip else None
    reason = unchanged_since(inputs, last)
    same_as = last.run_id if reason and last else None
    return RunInputs(inputs=inputs, skip_reason=reason, same_as=same_as, stage="check_inputs", timings=timer.timings())
