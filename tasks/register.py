"""Model registration: the adapter as an MLflow pyfunc model, one version per pipeline run, the promotion gate
(essaflow/gate/register.py)."""

from __future__ import annotations

from prefect import get_run_logger, task
from prefect.artifacts import create_markdown_artifact

from essaflow.config import PipelineConfig
from essaflow.gate.candidate import Candidate
from essaflow.gate.register import register_candidate
from essaflow.refs import AdapterRef, ChampionRef, DatasetRef, EvalRef, ModelRef, RegisteredRef, RunRef
from tasks.failures import masked_errors
from tasks.retry import retry_policy
from tasks.run import record_stage


@task(name="register", task_run_name="register", **retry_policy(retries=3), on_completion=[record_stage])
@masked_errors
def register(
    config: PipelineConfig, dataset: DatasetRef, base: ModelRef, adapter: AdapterRef, before: EvalRef,
    after: EvalRef, champion: ChampionRef | None, run: RunRef,
) -> RegisteredRef:  # fmt: skip
    """Register the tuned adapter as `run.name` (idempotent per run); champion only on a paired win over the
    current champion (`champion`: scored on this run's problems and protocol) by config.gate's rule. The gate's
    evidence goes to the version's tags, gate/evidence.json in the MLflow run and the `promotion-gate` artifact."""
    registered = register_candidate(config, run, Candidate(dataset, base, adapter, before, after, champion))
    ref = registered.ref
    get_run_logger().info("registered %s v%s: %s", ref.name, ref.version, ref.decision)
    create_markdown_artifact(registered.gate_markdown(), key="promotion-gate",
                             description=f"{ref.name} v{ref.version}: {registered.evidence.verdict}")  # fmt: skip
    return ref
