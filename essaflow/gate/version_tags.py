"""The registered version's tags: how it was trained and on what, its pass@k before and after with the protocol,
what a later run's gate needs to reuse its per-problem counts (essaflow/gate/champion.py), and where the run's
artifacts are. The gate's own evidence tags (`essaflow.gate_*`) are GateEvidence.tags."""

from __future__ import annotations

import json

from essaflow import tracking
from essaflow.config import PipelineConfig
from essaflow.gate.candidate import Candidate, GateDecision
from essaflow.gate.champion import eval_identity_tags
from essaflow.methods.tags import trained_method_tags
from essaflow.refs import RunRef
from essaflow.tracking.protocol import protocol_tags


def registration_tags(
    config: PipelineConfig, run: RunRef, candidate: Candidate, decision: GateDecision
) -> dict[str, str]:
    """The version's tags: how it was trained and on what, its pass@k before and after with the protocol, what a
    later run's gate needs to reuse its per-problem counts, and where the run's artifacts are."""
    adapter, after, before, dataset = candidate.adapter, candidate.after, candidate.before, candidate.dataset
    return {
        "method": adapter.kind,
        **trained_method_tags(adapter),
        "base_model": config.model.name_or_path,
        **base_digest_tag(config.model.name_or_path),
        "dataset_hash": dataset.hash,
        "dataset_uri": dataset.uri,
        "adapter_uri": adapter.uri,
        "adapter_digest": adapter.digest,
        "pass_at_k": json.dumps({k: round(v, 4) for k, v in after.summary.items()}),
        "baseline_pass_at_k": json.dumps({k: round(v, 4) for k, v in before.summary.items()}),
        "eval_protocol": f"n={after.samples_per_problem} problems={after.num_problems} seed={config.eval.seed}",
        **config.eval.judged_with(),  # the reward, its digest, the threshold, the sandbox of code
        # what `essaflow eval --model NAME` re-evaluates on by default (essaflow.tracking.protocol)
        **protocol_tags(config.data, config.eval, config.sampling),
        # what a later run's gate needs to reuse this version's per-problem counts (essaflow.gate.champion)
        **eval_identity_tags(decision.problems_digest, decision.protocol_digest, after.uri),
        "git_commit": tracking.git_commit(),
        "storage_run_uri": f"{run.storage_uri.rstrip('/')}/{run.run_prefix}",
        "prefect.flow_run_id": run.flow_run_id or "",
    }


def base_digest_tag(name: str) -> dict[str, str]:
    """`base_model_sha256`: the GGUF file's SHA-256 when the base is one (the bytes its weights came from)."""
    from essaflow.model.gguf import gguf_digest, is_gguf_name

    return {"base_model_sha256": gguf_digest(name)} if is_gguf_name(name) else {}
