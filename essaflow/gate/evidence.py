"""The gate's evidence: what it decided and why, as the version's `essaflow.gate_*` tags, gate/evidence.json in its
MLflow run (essaflow/gate/promotion.py), the run's JSON line and the Prefect page."""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field
from typing import Any

PROMOTE, KEEP = "promote", "keep"


@dataclass
class GateEvidence:
    """What the gate decided and why: the numbers that go to the version's tags, an artifact and the summary."""

    verdict: str
    """promote or keep."""
    reason: str
    metric: str
    challenger: float
    champion: float | None
    """None when there was no champion to compare with."""
    diff: float | None
    ci_low: float | None
    ci_high: float | None
    confidence: float
    min_delta: float
    n_problems: int
    protocol_digest: str
    problems_digest: str
    champion_version: str | None = None
    champion_scored: str = "none"
    """How the champion's outcomes were obtained: re-evaluated, stored counts, or none (no champion)."""
    guards: dict[str, dict[str, float | bool]] = field(default_factory=dict)
    """Per guard metric: challenger, champion, diff, ci_low, ci_high, max_drop, ok."""

    @property
    def promotes(self) -> bool:
        return self.verdict == PROMOTE

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    def tags(self) -> dict[str, str]:
        """Model version tags, `essaflow.gate_*` (numbers rounded to 4 places; guards as JSON)."""
        body = {k: v for k, v in self.to_dict().items() if k != "guards"}
        out = {f"essaflow.gate_{k}": "" if v is None else str(round(v, 4) if isinstance(v, float) else v)
               for k, v in body.items()}  # fmt: skip
        out["essaflow.gate_guards"] = json.dumps(_rounded(self.guards), sort_keys=True)
        return out

    def markdown(self, name: str, version: str) -> str:
        """The Prefect summary: the verdict, both scores, the paired difference and its interval, the guards."""
        pct = self.confidence * 100
        lines = [f"# Promotion gate: {name} v{version}", "", f"**{self.verdict}**: {self.reason}", "",
                 "| metric | challenger | champion | paired diff | interval | rule |", "|---|" * 6]  # fmt: skip
        if self.champion is None:
            lines.append(f"| {self.metric} | {self.challenger:.4f} | none | | | first version |")
        else:
            lines.append(f"| {self.metric} | {self.challenger:.4f} | {self.champion:.4f} | {self.diff:+.4f} | "
                         f"[{self.ci_low:+.4f}, {self.ci_high:+.4f}] ({pct:g}%) | >= {self.min_delta:g}, "
                         "interval above 0 |")  # fmt: skip
        for g, v in self.guards.items():
            lines.append(f"| {g} (guard) | {v['challenger']:.4f} | {v['champion']:.4f} | {v['diff']:+.4f} | "
                         f"[{v['ci_low']:+.4f}, {v['ci_high']:+.4f}] | drop <= {v['max_drop']:g}: "
                         f"{'ok' if v['ok'] else 'BLOCKS'} |")  # fmt: skip
        champ = f"v{self.champion_version} ({self.champion_scored})" if self.champion_version else "none"
        lines += ["", f"Champion: {champ}; {self.n_problems} problems; protocol `{self.protocol_digest}`, "
                  f"problems `{self.problems_digest}`."]  # fmt: skip
        return "\n".join(lines) + "\n"


def _rounded(guards: dict[str, dict[str, Any]]) -> dict[str, dict[str, Any]]:
    return {g: {k: round(v, 4) if isinstance(v, float) else v for k, v in row.items()} for g, row in guards.items()}
