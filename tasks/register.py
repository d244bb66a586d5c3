"""Model registration: the adapter as an MLflow pyfunc model, one version per pipeline run, the promotion gate."""

from __future__ import annotations

import json

from prefect import get_run_logger, task
from prefect.artifacts import create_markdown_artifact

from essaflow import tracking
from essaflow.artifacts import fetch_dir, read_dataset, read_eval_report
from essaflow.config import DataConfig, EvalConfig, ModelConfig, SamplingConfig
from essaflow.judging import gate
from essaflow.refs import AdapterRef, ChampionRef, DatasetRef, EvalRef, ModelRef, RegisteredRef, RunRef
from essaflow.timing import Timer
from essaflow.tracking.champion import eval_identity_tags
from essaflow.tracking.protocol import protocol_tags
from essaflow.training.run import trained_method_tags
from tasks.retry import retry_policy
from tasks.run import record_stage, tracked


@task(
    name="register",
    task_run_name="register",
    **retry_policy(retries=3),
    on_completion=[record_stage],
)
def register(
    promotion_metric: str,
    data: DataConfig,
    model: ModelConfig,
    sampling: SamplingConfig,
    eval_cfg: EvalConfig,
    dataset: DatasetRef,
    base: ModelRef,
    adapter: AdapterRef,
    before: EvalRef,
    after: EvalRef,
    run: RunRef,
    registry: gate.GateConfig | None = None,
    champion: ChampionRef | None = None,
) -> RegisteredRef:
    """Register the tuned adapter as `run.name` (idempotent per run); champion only on a paired win over the
    current champion (`champion`: scored on this run's problems and protocol) by the `registry` gate's rule. The
    version keeps what predict needs (model, sampling, data's prompt formatting), the protocol its pass@k was
    measured with (data, eval, sampling), the digests of what it was judged on, and the gate's evidence (tags,
    gate/evidence.json in the MLflow run, the `promotion-gate` markdown artifact)."""
    timer = Timer()
    registry = registry or gate.GateConfig()
    with timer.part("storage"):
        adapter_dir = fetch_dir(adapter.uri, adapter.digest)
        reports = {before.label: read_eval_report(before), after.label: read_eval_report(after)}
        judged = read_dataset(dataset).eval[: eval_cfg.max_problems]
        baseline = read_eval_report(champion.eval) if champion is not None else None
    digests = (gate.protocol_digest(eval_cfg, sampling), gate.problems_digest(judged))
    if champion is None:
        evidence = gate.first_version(reports[after.label], promotion_metric, *digests)
    else:
        evidence = gate.decide(reports[after.label], baseline, promotion_metric, eval_cfg.ks, registry, *digests,
                               champion.version, champion.scored)  # fmt: skip
    tags = {
        "method": adapter.kind,
        **trained_method_tags(adapter),
        "base_model": model.name_or_path,
        "dataset_hash": dataset.hash,
        "dataset_uri": dataset.uri,
        "adapter_uri": adapter.uri,
        "adapter_digest": adapter.digest,
        "pass_at_k": json.dumps({k: round(v, 4) for k, v in after.summary.items()}),
        "baseline_pass_at_k": json.dumps({k: round(v, 4) for k, v in before.summary.items()}),
        "eval_protocol": f"n={after.samples_per_problem} problems={after.num_problems} seed={eval_cfg.seed}",
        # what `essaflow eval --model NAME` re-evaluates on by default (essaflow.tracking.protocol)
        **protocol_tags(data, eval_cfg, sampling),
        # what a later run's gate needs to reuse this version's per-problem counts (essaflow.tracking.champion)
        **eval_identity_tags(digests[1], digests[0], after.uri),
        "git_commit": tracking.git_commit(),
        "storage_run_uri": f"{run.storage_uri.rstrip('/')}/{run.run_prefix}",
        "prefect.flow_run_id": run.flow_run_id or "",
    }
    with timer.part("tracking"):
        tracking.log_comparison(tracked(run), reports)
        reg = tracking.register_adapter(
            tracked(run),
            run.run_id,
            run.name,
            adapter_dir,
            model,
            base.local_path,
            sampling,
            tags,
            promotion_metric,
            after.summary[promotion_metric],
            data=data,
            evidence=evidence,
        )
    get_run_logger().info("registered %s v%s: %s", reg.name, reg.version, reg.decision)
    create_markdown_artifact(
        evidence.markdown(reg.name, reg.version) + f"\nDecision: {reg.decision}\n",
        key="promotion-gate", description=f"{reg.name} v{reg.version}: {evidence.verdict}",
    )  # fmt: skip
    return RegisteredRef(
        name=reg.name,
        version=reg.version,
        aliases=reg.aliases,
        decision=reg.decision,
        model_uri=reg.model_uri,
        gate=evidence.to_dict(),
        stage="register",
        timings=timer.timings(),
    )
