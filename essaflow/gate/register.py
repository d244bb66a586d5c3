"""The register step of a pipeline run: the gate's decision on the tuned adapter (essaflow/gate/candidate.py), the
version's tags, the registration and the verdict applied to its aliases.

The version keeps what `predict` needs (model, sampling, the data's prompt formatting), the protocol its pass@k was
measured with (data, eval, sampling: essaflow/tracking/protocol.py), the digests of what it was scored on and the
gate's evidence (essaflow/gate/version_tags.py). Registration is idempotent per run (essaflow/tracking/
registration.py). Never imports prefect.
"""

from __future__ import annotations

from dataclasses import dataclass

from essaflow import tracking
from essaflow.artifacts import fetch_dir, read_eval_report
from essaflow.config import PipelineConfig
from essaflow.gate import promotion
from essaflow.gate.candidate import Candidate, decide_candidate
from essaflow.gate.evidence import GateEvidence
from essaflow.gate.version_tags import registration_tags
from essaflow.refs import RegisteredRef, RunRef
from essaflow.timing import Timer


@dataclass(frozen=True)
class RegisteredVersion:
    """The registered version and the gate's evidence behind its aliases."""

    ref: RegisteredRef
    evidence: GateEvidence

    def gate_markdown(self) -> str:
        """The gate's page: its evidence and the decision that was applied."""
        return self.evidence.markdown(self.ref.name, self.ref.version) + f"\nDecision: {self.ref.decision}\n"


def register_candidate(config: PipelineConfig, run: RunRef, candidate: Candidate) -> RegisteredVersion:
    """Decide on the candidate, log the before/after comparison, register the adapter as `run.name` (once per run)
    and apply the gate's verdict to its aliases."""
    timer = Timer()
    with timer.part("storage"):
        adapter_dir = fetch_dir(candidate.adapter.uri, candidate.adapter.digest)
        reports = {r.label: read_eval_report(r) for r in (candidate.before, candidate.after)}
    decision = decide_candidate(config, candidate, reports[candidate.after.label], timer)
    metric = config.gate.metric
    with timer.part("tracking"):
        tracking.log_comparison(tracking.tracked(run), reports)
        request = tracking.VersionRequest(
            run=tracking.tracked(run),
            pipeline_run_id=run.run_id,
            name=run.name,
            adapter_dir=adapter_dir,
            model_cfg=config.model,
            base_dir=candidate.base.local_path,
            sampling=config.sampling,
            tags=registration_tags(config, run, candidate, decision),
            metric=metric,
            score=candidate.after.summary[metric],
            data=config.data,
        )
        reg = promotion.register_with_gate(request, evidence=decision.evidence)
    ref = RegisteredRef(name=reg.name, version=reg.version, aliases=reg.aliases, decision=reg.decision,
                        model_uri=reg.model_uri, gate=decision.evidence.to_dict(), stage="register",
                        timings=timer.timings())  # fmt: skip
    return RegisteredVersion(ref, decision.evidence)
