"""Population evaluation: one fitness per candidate and the in-process population (ESSA-v3 sec. 3.2, App. A;
docs/algorithms.md sec. 6); what an evaluation cost is counted in `metrics.py`.

Each scorer loads the base model, the SFT adapter and the frozen SVD bases once (`scorer.py`); per generation the
driver sends only what changes. The Ray actor pool, its two transports (essa.sync) and its handling of dead workers
are in `distributed.py` and the modules it lists; `LocalPopulation` here scores in the driver process.

- Shared minibatch (sec. 6.6): every candidate of a generation is scored on the same b prompts, and, when the fitness
  decodes with temperature > 0, with the same sampling seed (common random numbers), so candidates are ranked on
  equal terms. The minibatch changes every generation.
- Bytes: counted as `metrics.payload_bytes` counts them; the in-process path counts the payloads vectors mode
  would carry, so figures compare across modes.
"""

from __future__ import annotations

import time

import numpy as np

from essaflow.essa.metrics import GenerationStats, payload_bytes
from essaflow.essa.scorer import CandidateScorer
from essaflow.essa.scoring_spec import ScoringSpec


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
