"""`essa.sync: vectors`: every call carries one candidate's offsets (docs/algorithms.md sec. 2.8, 6.11).

A call is (candidate index, its offsets as float32, the prompt indices, the sampling seed); a scorer answers
(candidate index, fitness, its cost in tokens and device time). No weights or gradients move. Bytes are counted as
`metrics.payload_bytes` counts them.

Scheduling (sec. 6.11): single candidates are handed out dynamically, each worker holding at most `inflight` of
them, so a faster worker takes more (the better choice for unequal GPUs, at the price of the offsets on every call).
The candidate of a worker that dies is sent to another as it is: the call carries everything it needs.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from essaflow.essa.handout import hand_out
from essaflow.essa.metrics import GenerationStats, payload_bytes
from essaflow.essa.ray_pool import ScorerPool


class VectorsPopulation:
    """Scores the candidates it is sent on a `ScorerPool`, one candidate a call.

    Args:
        pool: the started scorer actors (closed with this population).
        inflight: candidates queued per worker at a time; 2 hides the driver round trip behind the current score.
    """

    sync = "vectors"

    def __init__(self, pool: ScorerPool, inflight: int = 2):
        self.pool = pool
        self.inflight = inflight
        self.dimension = pool.dimension
        self._drawn: tuple[np.ndarray, np.ndarray, int] | None = None
        """The generation being scored: offsets as float32, prompt indices, sampling seed."""

    def evaluate(self, candidates: np.ndarray, prompt_idx: np.ndarray, seed: int) -> tuple[np.ndarray, GenerationStats]:
        """One fitness per candidate (in candidate order); survives workers dying mid-generation."""
        self._drawn = (candidates.astype(np.float32), np.asarray(prompt_idx, dtype=np.int32), seed)
        singles = [range(i, i + 1) for i in range(len(candidates))]
        return hand_out(self.pool, self, singles, self.inflight)

    def send(self, w: int, item: range, stats: GenerationStats) -> tuple[Any, None]:
        """Worker w scores candidate `item.start` from its offsets."""
        offsets, prompt_idx, seed = self._drawn
        args = (item.start, offsets[item.start], prompt_idx, seed)
        stats.bytes_sent += payload_bytes(args)
        return self.pool.actors[w].score.remote(*args), None

    def receive(self, w: int, item: range, ticket: None, reply: tuple, stats: GenerationStats) -> np.ndarray:
        """The candidate's fitness; its cost charged to w."""
        stats.charge(w, reply[2])
        return np.array([reply[1]])

    def lost(self, w: int) -> None:
        """Nothing to forget: a worker keeps no state between calls in this mode."""

    def close(self) -> None:
        self.pool.close()
