"""The `gate` section: the promotion gate's metric and its paired, noise-aware rule (docs/compare.md, "The promotion
gate"). No torch here, so reading a config stays cheap.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from pydantic import Field

from essaflow.config_base import StrictConfig

#: the guard name standing for pass@k at the largest k of eval.ks
LARGEST_K = "pass@max"

#: the pipeline config's keys the `gate` section replaced -> the error naming what to write instead
MOVED_KEYS = {
    "registry": "the promotion gate's settings are the `gate` section (gate.min_delta, gate.confidence, "
    "gate.guard_metrics, ...): rename the section to gate",
    "promotion_metric": "the metric the gate promotes on is gate.metric: write gate: {metric: ...}",
}


class GateConfig(StrictConfig):
    """The promotion gate: alias `champion` moves to a new version only on a paired win over the current champion,
    both scored on this run's problems under this run's protocol; otherwise the new version becomes challenger."""

    metric: str = "pass@1"
    """The eval metric the gate promotes on: greedy, or pass@k with k in eval.ks (or 1). Rules 1-2 decide on it: a mean
    paired gain of at least min_delta whose interval lies above 0."""
    min_delta: float = Field(0.01, ge=0.0, le=1.0)
    """Smallest mean paired gain on the metric that promotes (absolute: 0.01 is one point of pass@1). One problem
    of 128 is 0.78 points, so the default asks for more than one problem's worth on a small eval set."""
    confidence: float = Field(0.95, gt=0.5, lt=1.0)
    """Level of the two-sided paired bootstrap interval of the gain; its lower end must be above 0."""
    guard_metrics: list[str] = ["greedy", LARGEST_K]
    """Metrics that must not drop by more than guard_max_drop: greedy, pass@k (k in eval.ks), or pass@max (the
    largest k in eval.ks). The gate's metric itself is not guarded (rules 1-2 decide on it)."""
    guard_max_drop: float = Field(0.02, ge=0.0, le=1.0)
    """Largest mean paired drop allowed on each guard metric (absolute)."""
    bootstrap_resamples: int = Field(2000, ge=100)
    """Bootstrap resamples of the problem set for the interval."""
    bootstrap_seed: int = 0
    """Seed of the resampling, so one pair of evaluations always gets the same interval and verdict."""
    reuse_counts: bool = True
    """Reuse the champion's stored per-problem counts when its problem set and protocol digests equal this run's
    (the counts a fresh evaluation would give, with the same seed); false re-evaluates the champion every run."""

    def guards(self, ks: Sequence[int]) -> list[str]:
        """The guard metrics as measured names (pass@max resolved against `ks`), without the gate's metric."""
        names = [f"pass@{max(ks)}" if g == LARGEST_K else g for g in self.guard_metrics]
        return [g for g in dict.fromkeys(names) if g != self.metric]

    def unmeasured(self, ks: Sequence[int]) -> str | None:
        """What the gate names that eval.ks does not measure, in words (a config error), else None."""
        measured = {"greedy", *(f"pass@{k}" for k in {1, *ks})}
        if self.metric not in measured:
            return f"gate.metric {self.metric!r} is not measured; choose from {sorted(measured)}"
        unknown = [g for g in self.guard_metrics if g not in measured | {LARGEST_K}]
        if unknown:
            return f"gate.guard_metrics {unknown} are not measured; choose from {sorted(measured | {LARGEST_K})}"
        return None


def moved_keys(tree: Any) -> str | None:
    """The pipeline config's keys that moved into the `gate` section, each with the key that replaces it, else
    None (a config still writing one is refused naming the new key)."""
    if not isinstance(tree, dict):
        return None
    found = [f"{old} is gone: {new}" for old, new in MOVED_KEYS.items() if old in tree]
    return "; ".join(found) or None
