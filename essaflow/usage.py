"""What a training run spent, the same way for both methods: tokens generated, tokens through forward passes and
through backward passes, and device-seconds per worker (ESSA-v3 App. B prices an iteration in exactly these:
per-sample inference and forward/backward costs; `essaflow project-scaling --from-run` reads them back).

- generated_tokens: completion tokens decoded (up to and including the stop token).
- forward_tokens: tokens through a forward pass without gradient: prompts and decoded tokens while generating,
  teacher-forced tokens of a gray-box fitness, GRPO's old-policy / reference log-probs.
- backward_tokens: tokens through a forward and backward pass (GRPO's update; 0 for ESSA, which has none).
- device_s: process CPU-seconds on CPU; wall seconds on a GPU (the device is held for the whole call).

ESSA workers send their share's usage with its fitness, 12 bytes (`encode`), followed by the sums of the reward's
named components over the completions the share judged when the reward returns components (`components`: not a
cost, but the one record that already travels with every share, so a generation's component means need no message
of their own); GRPO ranks count their own.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field, fields

import numpy as np

from essaflow.judging.tally import ComponentTally


@dataclass
class Usage:
    generated_tokens: int = 0
    forward_tokens: int = 0
    backward_tokens: int = 0
    device_s: float = 0.0
    components: ComponentTally = field(default_factory=ComponentTally)
    """The reward's named components summed over the completions judged (module docstring)."""

    def add(self, other: Usage) -> Usage:
        self.generated_tokens += other.generated_tokens
        self.forward_tokens += other.forward_tokens
        self.backward_tokens += other.backward_tokens
        self.device_s += other.device_s
        self.components.merge(other.components)
        return self

    def as_row(self, prefix: str = "") -> dict[str, float]:
        """The costs (not the reward components) as a flat row."""
        costs = {f.name: getattr(self, f.name) for f in fields(self) if f.name != "components"}
        return {f"{prefix}{k}": round(v, 4) if isinstance(v, float) else v for k, v in costs.items()}

    def encode(self) -> bytes:
        """12 bytes: generated and forward tokens, device milliseconds (uint32 each; one ESSA share's worth); then
        the component sums, when there are any."""
        head = np.array([self.generated_tokens, self.forward_tokens, round(self.device_s * 1000)], "<u4").tobytes()
        return head + self.components.encode()

    @classmethod
    def decode(cls, data: bytes) -> Usage:
        gen, fwd, ms = (int(v) for v in np.frombuffer(data[:12], "<u4"))
        return cls(generated_tokens=gen, forward_tokens=fwd, device_s=ms / 1000,
                   components=ComponentTally.decode(data[12:]))  # fmt: skip


@contextmanager
def device_time(usage: Usage, on_gpu: bool) -> Iterator[None]:
    """Adds the block's device-seconds to `usage`: wall time holding a GPU, else this process's CPU time."""
    clock = time.perf_counter if on_gpu else time.process_time
    start = clock()
    try:
        yield
    finally:
        usage.device_s += clock() - start
