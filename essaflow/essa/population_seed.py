"""`essa.sync: seed` (the default, the paper's scheme): every worker draws its share of the candidates from a replica
of the search (ESSA-v3 App. A; docs/algorithms.md sec. 2.8, 6.11).

Each worker holds a replica of the strategy and the minibatch sampler (`replica.py`) and draws the generation's
prompts, seed and candidates itself, so the driver makes one call per worker, `(generation, start, stop)` plus, on
its first call of a generation, the previous generation's fitness of the candidates it did not score (float32
bytes); a scorer answers (start, the share's float32 fitness, replica digest, its cost in tokens and device time): a
few hundred bytes a generation in all. No weights or gradients move. Bytes are counted as `metrics.payload_bytes`
counts them.

Scheduling (sec. 6.11): the population is cut into one contiguous share per live worker (equal workers finish
together; one call a generation is what keeps the bytes at a few hundred). The share of a worker that dies goes
back to the queue as just its index range; Ray restarts the worker with a fresh replica, which is sent the driver's
search state with its first call (`ReplicaTracker`).
"""

from __future__ import annotations

import logging
from typing import Any

import numpy as np

from essaflow.essa.handout import hand_out
from essaflow.essa.metrics import GenerationStats, payload_bytes
from essaflow.essa.prompt_sampler import MinibatchSampler
from essaflow.essa.ray_pool import ScorerPool
from essaflow.essa.replica import ReplicaTracker, decode_fitness
from essaflow.essa.strategy import Strategy

# The Ray population's one logger, as before it was split into modules: one name to follow or filter.
log = logging.getLogger("essaflow.essa.distributed")


class SeedPopulation:
    """Scores generations whose candidates the workers draw from their replicas, one share per live worker.

    Args:
        pool: the started scorer actors (closed with this population); their spec must carry `search`.
    """

    sync = "seed"

    def __init__(self, pool: ScorerPool):
        self.pool = pool
        self.dimension = pool.dimension
        self.replicas = ReplicaTracker(len(pool.actors))
        """The driver's view of each worker's replica: what its next call carries, whether its answers count."""

    def evaluate_replicated(
        self,
        generation: int,
        strategy: Strategy,
        sampler: MinibatchSampler,
        candidates: np.ndarray,
        prompt_idx: np.ndarray,
        seed: int,
    ) -> tuple[np.ndarray, GenerationStats]:
        """One fitness per candidate of `generation`, which the driver's `strategy` and `sampler` have just drawn
        (`candidates`, `prompt_idx`): their digest is what every replica must show, their state what a disagreeing
        one is sent. Survives workers dying mid-generation."""
        prompt_idx = np.asarray(prompt_idx, dtype=np.int32)
        self.replicas.begin(generation, strategy, sampler, candidates, prompt_idx, seed)
        fitness, stats = hand_out(self.pool, self, self._shares(len(candidates)), per_worker=1)
        self.replicas.finish(fitness)
        return fitness, stats

    def _shares(self, population: int) -> list[range]:
        """One contiguous share per live worker: one call each a generation, the fewest bytes."""
        cuts = np.linspace(0, population, min(len(self.pool.live), population) + 1).round().astype(int)
        return [range(a, b) for a, b in zip(cuts[:-1], cuts[1:])]

    def send(self, w: int, item: range, stats: GenerationStats) -> tuple[Any, int]:
        """Worker w scores the share `item`, with the previous fitness or the search state when due; the ticket is
        w's replica epoch (an answer from before a state was sent is known to be stale)."""
        generation = self.replicas.generation
        others, state = self.replicas.brief(w)
        args = (generation, item.start, item.stop, others, state)
        stats.bytes_sent += payload_bytes(args)
        if state is not None:
            stats.resyncs += 1
            stats.resync_bytes += payload_bytes(state)
            log.info("ESSA worker %d is sent the search state of generation %d (replica unknown or out of step)",
                     w, generation)  # fmt: skip
        return self.pool.actors[w].score_share.remote(*args), self.replicas.epoch[w]

    def receive(self, w: int, item: range, epoch: int, reply: tuple, stats: GenerationStats) -> np.ndarray | None:
        """The share's fitness, or None when w's replica did not hold the generation or disagrees (scored again)."""
        if not self.replicas.accept(w, epoch, item, reply):
            stats.stale_answers += len(item)
            return None
        stats.charge(w, reply[3])
        return decode_fitness(reply[1])

    def lost(self, w: int) -> None:
        """Ray restarts w with a fresh replica: it gets the state with its first call back."""
        self.replicas.lost(w)

    def close(self) -> None:
        self.pool.close()
