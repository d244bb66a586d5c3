"""Population evaluation: one fitness per candidate, what it cost, and the in-process population (ESSA-v3 sec. 3.2,
App. A; docs/algorithms.md sec. 6).

Each scorer loads the base model, the SFT adapter and the frozen SVD bases once (`scorer.py`); per generation the
driver sends only what changes. The Ray actor pool, its two transports (essa.sync) and its handling of dead workers
are in `distributed.py`; `LocalPopulation` here scores in the driver process.

- Shared minibatch (sec. 6.6): every candidate of a generation is scored on the same b prompts, and, when the fitness
  decodes with temperature > 0, with the same sampling seed (common random numbers), so candidates are ranked on
  equal terms. The minibatch changes every generation.
- Bytes: the pickle-protocol-5 size of each call's arguments and each reply (`payload_bytes`: the payload Ray
  serialises, without its fixed per-call envelope). The in-process path counts the payloads vectors mode would
  carry, so figures compare across modes.
"""

from __future__ import annotations

import pickle
import time
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from essaflow.essa.scorer import CandidateScorer
from essaflow.essa.scoring_spec import ScoringSpec
from essaflow.usage import Usage


def payload_bytes(obj: Any) -> int:
    """Serialized size of a call's arguments or reply (pickle protocol 5, as Ray's serializer uses)."""
    return len(pickle.dumps(obj, protocol=5))


@dataclass
class GenerationStats:
    """What one population evaluation cost."""

    bytes_sent: int = 0
    bytes_received: int = 0
    wall_s: float = 0.0
    redispatched: int = 0
    """Candidates re-queued because their worker died."""
    worker_failures: int = 0
    duplicates_dropped: int = 0
    per_worker: list[int] = field(default_factory=list)
    """Candidates each worker scored (dynamic hand-out shows here)."""
    per_node: dict[str, int] = field(default_factory=dict)
    """Candidates scored on each Ray node (node id -> count): how the work spread over the cluster."""
    resyncs: int = 0
    """Seed mode: strategy states sent to a worker whose replica disagreed, restarted or started a resumed run."""
    resync_bytes: int = 0
    """The part of bytes_sent that those states took."""
    stale_answers: int = 0
    """Seed mode: answers dropped (and their candidates re-queued) because the replica disagreed with the driver."""
    usage: Usage = field(default_factory=Usage)
    """What the accepted scores cost (tokens, device-seconds), summed over workers."""
    device_s_per_worker: list[float] = field(default_factory=list)
    """Device-seconds each worker spent on accepted scores."""

    def charge(self, w: int, cost: bytes) -> None:
        usage = Usage.decode(cost)
        self.usage.add(usage)
        self.device_s_per_worker[w] += usage.device_s

    @property
    def bytes_total(self) -> int:
        return self.bytes_sent + self.bytes_received


class LocalPopulation:
    """Scores candidates in the driver process, one after another (no Ray): for tests, debugging, one core.

    Nothing crosses a process boundary, so the vectors are handed over as they are: whatever essa.sync says, the bytes
    counted are those of vectors mode."""

    sync = "vectors"

    def __init__(self, spec: ScoringSpec):
        self.scorer = CandidateScorer(spec)
        self.dimension, self.node = self.scorer.ready()

    def evaluate(self, candidates: np.ndarray, prompt_idx: np.ndarray, seed: int) -> tuple[np.ndarray, GenerationStats]:
        """One fitness per candidate, in order."""
        start = time.perf_counter()
        stats = GenerationStats(per_worker=[0], device_s_per_worker=[0.0])
        fitness = np.empty(len(candidates))
        if self.scorer.batched:  # the whole population at once (vLLM, or transformers with batched_scoring)
            return self._evaluate_batched(candidates.astype(np.float32), prompt_idx, seed, stats, start)
        for i, x in enumerate(candidates.astype(np.float32)):
            args = (i, x, prompt_idx, seed)
            stats.bytes_sent += payload_bytes(args)
            reply = self.scorer.score(*args)
            stats.bytes_received += payload_bytes(reply)
            fitness[i] = reply[1]
            stats.per_worker[0] += 1
            stats.charge(0, reply[2])
        stats.per_node = {self.node: len(candidates)}
        stats.wall_s = time.perf_counter() - start
        return fitness, stats

    def _evaluate_batched(
        self, xs: np.ndarray, prompt_idx: np.ndarray, seed: int, stats: GenerationStats, start: float
    ) -> tuple[np.ndarray, GenerationStats]:
        values, usage = self.scorer.score_range(xs, 0, prompt_idx, seed)
        for i, x in enumerate(xs):  # the payloads vectors mode would carry, so the figures compare
            stats.bytes_sent += payload_bytes((i, x, prompt_idx, seed))
            stats.bytes_received += payload_bytes((i, values[i], b""))
        stats.per_worker[0] = len(xs)
        stats.charge(0, usage.encode())
        stats.per_node = {self.node: len(xs)}
        stats.wall_s = time.perf_counter() - start
        return np.asarray(values, dtype=np.float64), stats

    def close(self) -> None:
        pass
