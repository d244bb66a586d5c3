"""The gate's verdict applied in MLflow's model registry: alias `champion` moves on the gate's evidence, and that
evidence is recorded.

The verdict itself is computed in essaflow/gate/decision.py from both models' per-problem outcomes on the same
problems under the same protocol. Here the version is registered (once per pipeline run, essaflow/tracking/
registration.py) and the verdict applied (a champion that moved since it was evaluated is not overruled: the new
version stays challenger) and written where a user looks: the version's `essaflow.gate_*` tags, the `promotion`
tag, and `gate/evidence.json` in the version's MLflow run.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass

from essaflow.gate.champion import CHALLENGER, CHAMPION
from essaflow.gate.evidence import GateEvidence
from essaflow.secrets import scrub
from essaflow.tracking.aliases import alias_version
from essaflow.tracking.registration import VersionRequest, register_version
from essaflow.tracking.server import client

log = logging.getLogger(__name__)

EVIDENCE_ARTIFACT = "gate/evidence.json"
"""The evidence artifact in the registering MLflow run."""
PROMOTION_TAG = "promotion"
"""The version tag holding the decision sentence."""


@dataclass(frozen=True)
class Registration:
    """A registered version and what the gate made of it: its aliases and the decision, in words."""

    name: str
    version: str
    aliases: list[str]
    decision: str

    @property
    def model_uri(self) -> str:
        return f"models:/{self.name}/{self.version}"


def register_with_gate(request: VersionRequest, evidence: GateEvidence | None = None) -> Registration:
    """Register the adapter once per pipeline run (`request`), then apply the gate's `evidence` (None: only a first
    version becomes champion) and record it on the version (tags, gate/evidence.json in the run)."""
    name, version = request.name, register_version(request)
    c = client(request.run.tracking_uri)
    aliases, decision = promote(c, name, version, request.metric, request.score, evidence)
    c.set_model_version_tag(name, version, PROMOTION_TAG, decision)
    if evidence is not None and decision != f"already {CHAMPION}":  # a retry after the alias moved keeps its evidence
        record_evidence(c, name, version, request.run.run_id, evidence, decision)
    return Registration(name, version, aliases, decision)


def promote(c, name: str, version: str, metric: str, score: float, evidence: GateEvidence | None):
    """Move `champion` to `version` when `evidence` promotes against the champion it was measured against; else
    tag `challenger`. Returns (aliases, decision sentence). No evidence promotes only a first version."""
    champ = alias_version(c, name, CHAMPION)
    if champ is not None and str(champ.version) == version:
        return sorted(champ.aliases or [CHAMPION]), f"already {CHAMPION}"
    current = None if champ is None else str(champ.version)
    measured = None if evidence is None else evidence.champion_version
    if evidence is not None and measured != current:
        why = f"the champion is v{current} now, the gate measured against {f'v{measured}' if measured else 'none'}"
        return _challenger(c, name, version, f"{CHALLENGER}: {metric}={score:.4f}: {why}")
    if champ is None or (evidence is not None and evidence.promotes):
        c.set_registered_model_alias(name, CHAMPION, version)
        if (v := alias_version(c, name, CHALLENGER)) is not None and str(v.version) == version:
            c.delete_registered_model_alias(name, CHALLENGER)
        if champ is None:
            return [CHAMPION], f"{CHAMPION}: {metric}={score:.4f} (no champion)"
        e = evidence
        return [CHAMPION], (
            f"{CHAMPION}: {metric}={score:.4f} (v{current} had {metric}={e.champion:.4f} on the "
            f"same {e.n_problems} problems; paired {e.diff:+.4f} [{e.ci_low:+.4f}, {e.ci_high:+.4f}])"
        )
    champ_score = "no paired evidence" if evidence is None else f"{evidence.champion:.4f}"
    reason = "no paired evidence was measured" if evidence is None else evidence.reason
    return _challenger(
        c, name, version, f"{CHALLENGER}: {metric}={score:.4f} does not beat v{current} ({champ_score}): {reason}"
    )


def _challenger(c, name: str, version: str, decision: str):
    c.set_registered_model_alias(name, CHALLENGER, version)
    return [CHALLENGER], decision


def record_evidence(c, name: str, version: str, mlflow_run_id: str, evidence: GateEvidence, decision: str) -> None:
    """The evidence as the version's `essaflow.gate_*` tags and as gate/evidence.json in its MLflow run."""
    for key, value in evidence.tags().items():
        c.set_model_version_tag(name, version, key, scrub(value)[:5000])
    c.log_dict(mlflow_run_id, {"model": name, "version": version, "decision": decision, **evidence.to_dict()},
               EVIDENCE_ARTIFACT)  # fmt: skip
    log.info("gate evidence for %s v%s: %s", name, version, evidence.reason)
