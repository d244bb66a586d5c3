"""The promotion gate in the registry: move alias `champion` on the gate's evidence, and record that evidence.

The verdict itself is computed in essaflow/judging/gate.py from both models' per-problem outcomes on the same
problems under the same protocol. Here the verdict is applied (a champion that moved since it was evaluated is
not overruled: the new version stays challenger) and written where a user looks: the version's `essaflow.gate_*`
tags, the `promotion` tag, and `gate/evidence.json` in the version's MLflow run.
"""

from __future__ import annotations

import logging

from essaflow.judging.gate import GateEvidence
from essaflow.secrets import scrub

log = logging.getLogger(__name__)

CHAMPION, CHALLENGER = "champion", "challenger"
#: the evidence artifact in the registering MLflow run
EVIDENCE_ARTIFACT = "gate/evidence.json"


def alias_version(c, name: str, alias: str):
    """The model version `alias` points to, or None."""
    from mlflow.exceptions import MlflowException

    try:
        return c.get_model_version_by_alias(name, alias)
    except MlflowException:
        return None


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
