"""The candidate a pipeline run registers, and the gate's decision on it: the tuned adapter against the current
champion, both scored on this run's problems under this run's protocol (essaflow/gate/decision.py), or a first
version's (it promotes unconditionally). Never imports prefect.
"""

from __future__ import annotations

from dataclasses import dataclass

from essaflow.artifacts import read_dataset, read_eval_report
from essaflow.config import PipelineConfig
from essaflow.gate.decision import decide, first_version
from essaflow.gate.digests import problems_digest, protocol_digest
from essaflow.gate.evidence import GateEvidence
from essaflow.judging.evaluation import EvalReport
from essaflow.refs import AdapterRef, ChampionRef, DatasetRef, EvalRef, ModelRef
from essaflow.timing import Timer


@dataclass(frozen=True)
class Candidate:
    """What the register step decides on and registers: the tuned adapter on its base, its scores before and after
    training, and the champion's on the same problems (None: there is no champion yet)."""

    dataset: DatasetRef
    base: ModelRef
    adapter: AdapterRef
    before: EvalRef
    after: EvalRef
    champion: ChampionRef | None = None


@dataclass(frozen=True)
class GateDecision:
    """The gate's evidence and the digests of what it compared (recorded on the version for reuse)."""

    evidence: GateEvidence
    protocol_digest: str
    problems_digest: str


def decide_candidate(
    config: PipelineConfig, candidate: Candidate, challenger: EvalReport, timer: Timer
) -> GateDecision:
    """The gate's decision on the candidate (`challenger`: its after-training report): against the champion on the
    same problems by config.gate's rule, or a first version's (promotes)."""
    champion = candidate.champion
    with timer.part("storage"):
        problems = read_dataset(candidate.dataset).eval[: config.eval.max_problems]
        baseline = read_eval_report(champion.eval) if champion is not None else None
    protocol, problem_set = protocol_digest(config.eval, config.sampling), problems_digest(problems)
    if champion is None or baseline is None:
        evidence = first_version(challenger, config.gate.metric, protocol, problem_set)
    else:
        evidence = decide(challenger, baseline, config.eval.ks, config.gate, protocol, problem_set, champion.version,
                          champion.scored)  # fmt: skip
    return GateDecision(evidence, protocol, problem_set)
