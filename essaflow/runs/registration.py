"""The register step of a pipeline run: the promotion gate's decision, the version's tags, the registration.

The gate judges the tuned adapter against the current champion, both scored on this run's problems under this
run's protocol (essaflow/judging/gate.py; a first version promotes unconditionally). The version keeps what
`predict` needs (model, sampling, the data's prompt formatting), the protocol its pass@k was measured with (data,
eval, sampling: essaflow/tracking/protocol.py), the digests of what it was judged on (essaflow/tracking/champion.py)
and the gate's evidence. Registration is idempotent per run (essaflow/tracking/registration.py). Never imports
prefect.
"""

from __future__ import annotations

import json
from dataclasses import dataclass

from essaflow import tracking
from essaflow.artifacts import fetch_dir, read_dataset, read_eval_report
from essaflow.config import PipelineConfig
from essaflow.judging import gate
from essaflow.judging.evaluation import EvalReport
from essaflow.refs import AdapterRef, ChampionRef, DatasetRef, EvalRef, ModelRef, RegisteredRef, RunRef
from essaflow.runs.method_tags import trained_method_tags
from essaflow.timing import Timer
from essaflow.tracking.champion import eval_identity_tags
from essaflow.tracking.protocol import protocol_tags


@dataclass(frozen=True)
class Candidate:
    """What the register step judges and registers: the tuned adapter on its base, its scores before and after
    training, and the champion's on the same problems (None: there is no champion yet)."""

    dataset: DatasetRef
    base: ModelRef
    adapter: AdapterRef
    before: EvalRef
    after: EvalRef
    champion: ChampionRef | None = None


@dataclass(frozen=True)
class Judged:
    """The gate's verdict and the digests of what it judged (recorded on the version for reuse)."""

    evidence: gate.GateEvidence
    protocol_digest: str
    problems_digest: str


@dataclass(frozen=True)
class RegisteredVersion:
    """The registered version and the gate's evidence behind its aliases."""

    ref: RegisteredRef
    evidence: gate.GateEvidence

    def gate_markdown(self) -> str:
        """The gate's page: its evidence and the decision that was applied."""
        return self.evidence.markdown(self.ref.name, self.ref.version) + f"\nDecision: {self.ref.decision}\n"


def judge(config: PipelineConfig, candidate: Candidate, challenger: EvalReport, timer: Timer) -> Judged:
    """The gate's verdict on the candidate (`challenger`: its after-training report): against the champion on the
    same problems by config.registry's rule, or a first version's (promotes)."""
    champion = candidate.champion
    with timer.part("storage"):
        judged = read_dataset(candidate.dataset).eval[: config.eval.max_problems]
        baseline = read_eval_report(champion.eval) if champion is not None else None
    protocol, problems = gate.protocol_digest(config.eval, config.sampling), gate.problems_digest(judged)
    if champion is None or baseline is None:
        evidence = gate.first_version(challenger, config.promotion_metric, protocol, problems)
    else:
        evidence = gate.decide(challenger, baseline, config.promotion_metric, config.eval.ks, config.registry,
                               protocol, problems, champion.version, champion.scored)  # fmt: skip
    return Judged(evidence, protocol, problems)


def registration_tags(config: PipelineConfig, run: RunRef, candidate: Candidate, judged: Judged) -> dict[str, str]:
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
        # what a later run's gate needs to reuse this version's per-problem counts (essaflow.tracking.champion)
        **eval_identity_tags(judged.problems_digest, judged.protocol_digest, after.uri),
        "git_commit": tracking.git_commit(),
        "storage_run_uri": f"{run.storage_uri.rstrip('/')}/{run.run_prefix}",
        "prefect.flow_run_id": run.flow_run_id or "",
    }


def register_candidate(config: PipelineConfig, run: RunRef, candidate: Candidate) -> RegisteredVersion:
    """Judge the candidate, log the before/after comparison, register the adapter as `run.name` (once per run) and
    apply the gate's verdict to its aliases."""
    timer = Timer()
    with timer.part("storage"):
        adapter_dir = fetch_dir(candidate.adapter.uri, candidate.adapter.digest)
        reports = {r.label: read_eval_report(r) for r in (candidate.before, candidate.after)}
    judged = judge(config, candidate, reports[candidate.after.label], timer)
    metric = config.promotion_metric
    with timer.part("tracking"):
        tracking.log_comparison(tracking.tracked(run), reports)
        reg = tracking.register_adapter(
            tracking.tracked(run), run.run_id, run.name, adapter_dir, config.model, candidate.base.local_path,
            config.sampling, registration_tags(config, run, candidate, judged), metric,
            candidate.after.summary[metric], data=config.data, evidence=judged.evidence,
        )  # fmt: skip
    ref = RegisteredRef(name=reg.name, version=reg.version, aliases=reg.aliases, decision=reg.decision,
                        model_uri=reg.model_uri, gate=judged.evidence.to_dict(), stage="register",
                        timings=timer.timings())  # fmt: skip
    return RegisteredVersion(ref, judged.evidence)


def base_digest_tag(name: str) -> dict[str, str]:
    """`base_model_sha256`: the GGUF file's SHA-256 when the base is one (the bytes its weights came from)."""
    from essaflow.model.gguf import gguf_digest, is_gguf_name

    return {"base_model_sha256": gguf_digest(name)} if is_gguf_name(name) else {}
