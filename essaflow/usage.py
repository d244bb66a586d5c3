"""What a training run spent, the same way for both methods: tokens generated, tokens through forward passes and
through backward passes, and device-seconds per worker (ESSA-v3 App. B prices an iteration in exactly these:
per-sample inference and forward/backward costs; `essaflow project-scaling --from-run` reads them back).

- generated_tokens: completion tokens decoded (up to and including the stop token).
- forward_tokens: tokens through a forward pass without gradient: prompts and decoded tokens while generating,
  teacher-forced tokens of a gray-box fitness, GRPO's old-policy / reference log-probs.
- backward_tokens: tokens through a forward and backward pass (GRPO's update; 0 for ESSA, which has none).
- device_s: process CPU-seconds on CPU; wall seconds on a GPU (the device is held for the whole call).

ESSA workers send their share's usage with its fitness, 12 bytes (`encode`); GRPO ranks count their own.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import asdict, dataclass

import numpy as np


@dataclass
class Usage:
    generated_tokens: int = 0
    forward_tokens: int = 0
    backward_tokens: int = 0
    device_s: float = 0.0

    def add(self, other: Usage) -> Usage:
        self.generated_tokens += other.generated_tokens
        self.forward_tokens += other.forward_tokens
        self.backward_tokens += other.backward_tokens
        self.device_s += other.device_s
        return self

    def as_row(self, prefix: str = "") -> dict[str, float]:
        return {f"{prefix}{k}": round(v, 4) if isinstance(v, float) else v for k, v in asdict(self).items()}

    def encode(self) -> bytes:
        """12 bytes: generated and forward tokens, device milliseconds (uint32 each; one ESSA share's worth)."""
        return np.array([self.generated_tokens, self.forward_tokens, round(self.device_s * 1000)], "<u4").tobytes()

    @classmethod
    def decode(cls, data: bytes) -> Usage:
        gen, fwd, ms = (int(v) for v in np.frombuffer(data, "<u4"))
        return cls(generated_tokens=gen, forward_tokens=fwd, device_s=ms / 1000)


@contextmanager
def device_time(usage: Usage, on_gpu: bool) -> Iterator[None]:
    """Adds the block's device-seconds to `usage`: wall time holding a GPU, else this process's CPU time."""
    clock = time.perf_counter if on_gpu else time.process_time
    start = clock()
    try:
        yield
    finally:
        usage.device_s += clock() - start
