"""The gate's baseline: the current champion scored on this run's eval problems under this run's protocol
(essaflow/gate/champion.py)."""

from __future__ import annotations

from prefect import task

from essaflow.config import EvalConfig, SamplingConfig
from essaflow.gate.champion import score_champion
from essaflow.gate.config import GateConfig
from essaflow.refs import ChampionRef, DatasetRef, RunRef
from tasks.failures import masked_errors
from tasks.retry import retry_policy
from tasks.run import record_stage


@task(name="evaluate_champion", task_run_name="evaluate-champion", **retry_policy(), on_completion=[record_stage])
@masked_errors
def evaluate_champion(
    gate: GateConfig, eval_cfg: EvalConfig, sampling: SamplingConfig, dataset: DatasetRef, run: RunRef
) -> ChampionRef | None:
    """models:/<run.name>@champion on this run's eval split and protocol: its own stored per-problem counts when
    its problem set and protocol digests equal this run's (and gate.reuse_counts), else evaluated again here
    (runs/<id>/eval/champion/). None when there is no champion, or it is this run's own version (a retried flow)."""
    return score_champion(gate, eval_cfg, sampling, dataset, run)
