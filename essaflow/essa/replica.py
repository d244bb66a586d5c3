"""Seed-synchronised scoring: every worker holds a replica of the search strategy (ESSA-v3 App. A Algorithm 1;
docs/algorithms.md sec. 2.8).

The driver's strategy stays the authoritative copy (checkpoints, held-out evaluation, export). Each Ray worker
builds the same strategy from the same seed (`make_strategy(essa config, d)`) and keeps its own generation counter;
per generation and worker the driver sends one header, piggybacked on the worker's first candidate of the
generation: the minibatch's prompt indices, the sampling seed and the previous generation's full fitness vector.
The replica applies the identical `tell` and `ask`s the same candidates as the driver, so a work item is just
(generation, candidate index) and no vector travels.

Agreement proof: every answer carries `state_digest` of the replica (the first 8 bytes of sha256 over the mean and
the generation's candidates: a different RNG, step size or covariance shows in the candidates, a different update
in the mean). The driver compares it with its own strategy's; an answer that disagrees (another CPU's floats, a
restart Ray did silently) is dropped and its candidate re-queued, and the worker's next header carries the full
strategy state (`Strategy.state_dict()`: JSON text + numpy arrays, no pickled code) with the generation's
candidates, counted as a resync. A worker restarted by Ray, or the workers of a resumed run, start from the state
the same way.
"""

from __future__ import annotations

import hashlib
import json
from typing import Any

import numpy as np

from essaflow.essa.config import ESSAConfig
from essaflow.essa.strategy import Strategy, make_strategy

#: a worker that disagrees again after this many states sent in one generation is a bug, not float noise (deaths
#: and restarts do not count: those are Ray's max_restarts to bound)
MAX_RESYNCS_PER_GENERATION = 2

State = tuple[int, str, dict[str, np.ndarray], np.ndarray]
"""A resync: (generation, strategy meta as JSON, strategy arrays, the generation's candidates)."""
Header = tuple[np.ndarray, int, np.ndarray | None, State | None]
"""Once per worker per generation: (prompt indices, sampling seed, previous fitness vector or None, state or None)."""


def state_digest(mean: np.ndarray, candidates: np.ndarray) -> bytes:
    """8 bytes that differ when two strategies would not ask or update alike: sha256 of the mean and candidates."""
    h = hashlib.sha256(np.ascontiguousarray(mean, dtype=np.float64).tobytes())
    h.update(np.ascontiguousarray(candidates, dtype=np.float64).tobytes())
    return h.digest()[:8]


def strategy_state(strategy: Strategy, generation: int, candidates: np.ndarray) -> State:
    """The driver's strategy after asking `generation`, with what it asked (CMA's tell needs the candidates)."""
    meta, arrays = strategy.state_dict()
    return generation, json.dumps(meta), dict(arrays), np.asarray(candidates, dtype=np.float64)


class StrategyReplica:
    """A worker's copy of the strategy: starts at generation 0 with the candidates the seed gives."""

    def __init__(self, search: dict[str, Any], dimension: int):
        self.strategy = make_strategy(ESSAConfig.model_validate(search), dimension)
        self.generation = 0
        self.candidates = self.strategy.ask()
        self.context: tuple[int, np.ndarray, int] | None = None
        """(generation, prompt indices, seed) of the last header: what this worker's candidates are scored on."""

    def apply(self, generation: int, header: Header) -> None:
        """Bring the replica to `generation` from a header: load the state, or tell the previous fitness and ask."""
        prompt_idx, seed, fitness, state = header
        if state is not None:
            self.load(state)
        elif fitness is not None and self.generation == generation - 1:
            self.strategy.tell(self.candidates, fitness)
            self.candidates = self.strategy.ask()
            self.generation += 1
        if self.generation == generation:
            self.context = (generation, prompt_idx, seed)

    def load(self, state: State) -> None:
        """Take the driver's state (a resync): the replica then asks and tells exactly as the driver."""
        generation, meta, arrays, candidates = state
        self.strategy.load_state_dict(json.loads(meta), arrays)
        self.generation, self.candidates = generation, candidates.copy()

    def ready_for(self, generation: int) -> bool:
        """Whether this replica holds `generation`'s candidates and its minibatch (else it must not score)."""
        return self.generation == generation and self.context is not None and self.context[0] == generation

    def digest(self) -> bytes:
        return state_digest(self.strategy.mean, self.candidates)


class ReplicaTracker:
    """The driver's view of every worker's replica: what header to send it, and whether its answers count.

    held[w]: the generation whose candidates worker w's replica holds, as far as the driver knows (None: unknown,
    after a restart or a disagreement: the next header carries the state). Fresh workers hold generation 0.
    briefed[w]: the generation whose header w has been sent. epoch[w] rises with every state sent, so answers to
    calls made before it (already known to be stale) do not trigger another resync.
    """

    def __init__(self, workers: int):
        self.held: list[int | None] = [0] * workers
        self.briefed: list[int | None] = [None] * workers
        self.epoch = [0] * workers
        self.previous: tuple[int, np.ndarray] | None = None  # the last finished generation's (number, fitness)

    def begin(self, generation: int, strategy: Strategy, candidates: np.ndarray, prompt_idx: np.ndarray, seed: int):
        """A new generation, asked by the driver's `strategy` (its digest is what every answer must show)."""
        self.generation, self.prompt_idx, self.seed = generation, prompt_idx, seed
        self.strategy, self.candidates = strategy, candidates
        self.expected = state_digest(strategy.mean, candidates)
        self.disagreed = [0] * len(self.held)  # stale answers that triggered a resync, this generation
        self._state: State | None = None

    def header(self, w: int) -> tuple[Header | None, State | None]:
        """What w's next call must carry (None when it was briefed this generation) and the state if it is a resync."""
        g = self.generation
        if self.briefed[w] == g:
            return None, None
        self.briefed[w] = g
        if self.held[w] == g:
            return (self.prompt_idx, self.seed, None, None), None
        if self.held[w] == g - 1 and self.previous is not None and self.previous[0] == g - 1:
            self.held[w] = g
            return (self.prompt_idx, self.seed, self.previous[1], None), None
        if self._state is None:  # built once a generation, only when some worker needs it
            self._state = strategy_state(self.strategy, g, self.candidates)
        self.held[w] = g
        return (self.prompt_idx, self.seed, None, self._state), self._state

    def accept(self, w: int, epoch: int, reply: tuple[int, float | None, bytes]) -> bool:
        """Whether an answer counts: scored, and by a replica in agreement. Else w gets the state next (once)."""
        _, value, digest = reply
        if value is not None and digest == self.expected:
            return True
        if epoch == self.epoch[w]:  # the first stale answer since w's last state: send it the state again
            self.disagreed[w] += 1
            if self.disagreed[w] > MAX_RESYNCS_PER_GENERATION:
                raise RuntimeError(f"ESSA worker {w}'s strategy replica still disagrees after its state was re-sent")
            self.lost(w)
        return False

    def lost(self, w: int) -> None:
        """w's replica is unknown (died, restarted, disagreed): its next call carries the state."""
        self.held[w] = self.briefed[w] = None
        self.epoch[w] += 1

    def finish(self, fitness: np.ndarray) -> None:
        """The generation's fitness vector, every replica's next `tell`."""
        self.previous = (self.generation, np.asarray(fitness, dtype=np.float64))
