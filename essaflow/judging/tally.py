"""Running sums of a reward's named components (format, correctness, ...) over the completions judged, so that a
GRPO step or an ESSA generation reports each component's mean beside its reward."""

from __future__ import annotations

import json
from dataclasses import dataclass, field


@dataclass
class ComponentTally:
    """Sum of each named component and how many completions were judged (a completion that did not return a
    component counts 0 for it, as `Judge.score` fills it)."""

    sums: dict[str, float] = field(default_factory=dict)
    judged: int = 0

    def add_scores(self, components: dict[str, list[float]], judged: int) -> None:
        """One scored batch: `Scores.components` over `judged` completions."""
        for name, col in components.items():
            self.sums[name] = self.sums.get(name, 0.0) + sum(col)
        self.judged += judged

    def merge(self, other: ComponentTally) -> ComponentTally:
        for name, total in other.sums.items():
            self.sums[name] = self.sums.get(name, 0.0) + total
        self.judged += other.judged
        return self

    def means(self) -> dict[str, float]:
        """Each component's mean over the completions judged (empty when the reward returned plain numbers)."""
        return {name: total / self.judged for name, total in sorted(self.sums.items())} if self.judged else {}

    def encode(self) -> bytes:
        """Nothing for a reward without components; else its sums as compact JSON (a few dozen bytes)."""
        return json.dumps([self.judged, self.sums], separators=(",", ":")).encode() if self.sums else b""

    @classmethod
    def decode(cls, data: bytes) -> ComponentTally:
        if not data:
            return cls()
        judged, sums = json.loads(data)
        return cls({str(k): float(v) for k, v in sums.items()}, int(judged))
