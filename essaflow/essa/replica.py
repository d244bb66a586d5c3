"""Seed-synchronised scoring: every worker holds a replica of the search (ESSA-v3 App. A Algorithm 1;
docs/algorithms.md sec. 2.8).

The driver's strategy and minibatch sampler stay the authoritative copy (checkpoints, held-out evaluation, export).
Each Ray worker builds the same strategy and the same sampler from the same seed and keeps its own generation
counter, so it draws the generation's minibatch, its sampling seed and its candidates itself. Per generation and
worker the driver makes one call, `(generation, start, stop)`: score the candidates start..stop-1 (the worker's
share). The worker's first call of a generation also carries the previous generation's fitness of the candidates
it did not score itself (float32 bytes, in index order; it kept its own): the replica rebuilds the vector, applies
the identical `tell`, then draws the next minibatch and `ask`s. The answer is `(start, the share's fitness as
float32 bytes, replica digest, what scoring cost: essaflow.usage, 12 bytes, plus the reward components' sums when
the reward returns components)`. No vector and no prompt index travels.

Agreement proof: `state_digest` of the replica, 8 bytes of sha256 over the mean, the generation's candidates,
prompt indices and sampling seed (a different RNG, step size or covariance shows in the candidates, a different
update in the mean). The driver compares it with its own; an answer that disagrees (another CPU's floats, a restart
Ray did silently) is dropped and its share re-queued, and the worker's next call carries the full `ReplicaState`
(strategy and sampler as JSON text + numpy arrays, no pickled code, plus the generation's candidates), counted as a
resync. A worker restarted by Ray, or the workers of a resumed run, start from the state the same way.

Fitness travels as float32 in every mode (the scorer rounds it, `engine.py`), so the driver's `tell` and every
replica's see the same numbers whatever the transport.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np

from essaflow.essa.config import ESSAConfig
from essaflow.essa.prompt_sampler import MinibatchSampler, generation_seed
from essaflow.essa.strategy import Strategy, make_strategy

#: a worker that disagrees again after this many states sent in one generation is a bug, not float noise (deaths
#: and restarts do not count: those are Ray's max_restarts to bound)
MAX_RESYNCS_PER_GENERATION = 2

Reply = tuple[int, bytes | None, bytes, bytes]
"""A worker's answer to one share: (start, fitness as float32 bytes or None when it could not score, digest,
usage)."""


def encode_fitness(values: Any) -> bytes:
    """Fitness on the wire: float32, 4 bytes a candidate (exact for accuracy k/b; the scorer rounds the others)."""
    return np.asarray(values, dtype="<f4").tobytes()


def decode_fitness(data: bytes) -> np.ndarray:
    return np.frombuffer(data, dtype="<f4").astype(np.float64)


def state_digest(mean: np.ndarray, candidates: np.ndarray, prompt_idx: np.ndarray, seed: int) -> bytes:
    """8 bytes that differ when two replicas would not score, ask or update alike."""
    h = hashlib.sha256(np.ascontiguousarray(mean, dtype=np.float64).tobytes())
    h.update(np.ascontiguousarray(candidates, dtype=np.float64).tobytes())
    h.update(np.ascontiguousarray(prompt_idx, dtype=np.int64).tobytes())
    h.update(int(seed).to_bytes(8, "little"))
    return h.digest()[:8]


@dataclass(frozen=True)
class ReplicaState:
    """A resync: the driver's search after drawing `generation` (strategy and sampler), with what it drew."""

    generation: int
    meta: str
    """Strategy and sampler settings and scalars, as JSON text."""
    arrays: dict[str, np.ndarray]
    candidates: np.ndarray
    prompt_idx: np.ndarray

    @classmethod
    def of(cls, strategy: Strategy, sampler: MinibatchSampler, generation: int, candidates, prompt_idx):
        s_meta, s_arrays = strategy.state_dict()
        m_meta, m_arrays = sampler.state_dict()
        arrays = {f"strategy.{k}": v for k, v in s_arrays.items()} | {f"sampler.{k}": v for k, v in m_arrays.items()}
        meta = json.dumps({"strategy": s_meta, "sampler": m_meta})
        return cls(generation, meta, arrays, np.asarray(candidates, dtype=np.float64), np.asarray(prompt_idx))

    def part(self, name: str) -> tuple[dict[str, Any], dict[str, np.ndarray]]:
        prefix = f"{name}."
        arrays = {k[len(prefix) :]: v for k, v in self.arrays.items() if k.startswith(prefix)}
        return json.loads(self.meta)[name], arrays


class StrategyReplica:
    """A worker's copy of the search: starts at generation 0 with the minibatch and candidates the seed gives."""

    def __init__(self, search: dict[str, Any], dimension: int, train_size: int):
        cfg = ESSAConfig.model_validate(search)
        self.seed = cfg.seed
        self.strategy = make_strategy(cfg, dimension)
        self.sampler = MinibatchSampler(train_size, cfg.minibatch, cfg.seed)
        self.population = cfg.population
        self.generation = 0
        self._draw()

    def _draw(self) -> None:
        """The generation's inputs, in the driver's order: minibatch, then candidates (separate RNGs)."""
        self.prompt_idx = self.sampler.next()
        self.candidates = self.strategy.ask()
        self.own: dict[int, float] = {}  # this generation's fitness that this worker scored (not sent back to it)

    @property
    def sampling_seed(self) -> int:
        return generation_seed(self.seed, self.generation)

    def scored(self, indices: range, values: list[float]) -> None:
        """Remember this worker's own fitnesses: the driver leaves them out of the next brief."""
        self.own.update(zip(indices, values))

    def advance(self, generation: int, others: bytes | None, state: ReplicaState | None) -> None:
        """Bring the replica to `generation`: load the state, or tell the previous fitness (the others' plus its
        own) and draw. A brief that does not fit what it scored leaves it behind, and the driver sends the state."""
        if state is not None:
            self.load(state)
        elif others is not None and self.generation == generation - 1:
            rest = decode_fitness(others)
            if len(rest) + len(self.own) != self.population:
                return
            fitness = np.empty(self.population)
            mine = np.zeros(self.population, dtype=bool)
            mine[list(self.own)] = True
            fitness[mine] = [self.own[i] for i in np.flatnonzero(mine)]
            fitness[~mine] = rest
            self.strategy.tell(self.candidates, fitness)
            self.generation += 1
            self._draw()

    def load(self, state: ReplicaState) -> None:
        """Take the driver's state (a resync): the replica then draws and tells exactly as the driver."""
        self.strategy.load_state_dict(*state.part("strategy"))
        self.sampler.load_state_dict(*state.part("sampler"))
        self.generation = state.generation
        self.candidates, self.prompt_idx = state.candidates.copy(), state.prompt_idx.copy()
        self.own = {}

    def holds(self, generation: int) -> bool:
        """Whether this replica holds `generation`'s candidates (else it must not score)."""
        return self.generation == generation

    def digest(self) -> bytes:
        return state_digest(self.strategy.mean, self.candidates, self.prompt_idx, self.sampling_seed)


class ReplicaScorer:
    """A worker's side of seed mode: its `StrategyReplica`, built on first use (not at load: vectors mode never
    needs it), brought to each generation, and the share of that generation's candidates it scores."""

    def __init__(self, search: dict[str, Any] | None, dimension: int, train_size: int):
        self.search = search
        self.dimension = dimension
        self.train_size = train_size
        self.replica: StrategyReplica | None = None

    def replica_at(self, generation: int, others: bytes | None, state: ReplicaState | None) -> StrategyReplica:
        """The replica brought to `generation` by the brief (`StrategyReplica.advance`)."""
        if self.replica is None:
            if self.search is None:
                raise RuntimeError("essa.sync=seed needs ScoringSpec.search (the essa config) to build the replica")
            self.replica = StrategyReplica(self.search, self.dimension, self.train_size)
        self.replica.advance(generation, others, state)
        return self.replica

    def score_share(
        self,
        generation: int,
        start: int,
        stop: int,
        others: bytes | None,
        state: ReplicaState | None,
        score_range: Callable[[np.ndarray, int, np.ndarray, int], tuple[list[float], Any]],
    ) -> Reply:
        """Candidates start..stop-1 of `generation`, drawn by the replica, scored by `score_range`.

        The worker's first call of a generation carries the previous generation's fitness of the candidates this
        worker did not score (or, after a restart or a disagreement, the driver's `state`). Answers (start, float32
        fitness bytes, replica digest, usage); the fitness is None when the replica does not hold `generation` (a
        restart the driver has not seen yet), and the driver then sends the state.
        """
        replica = self.replica_at(generation, others, state)
        if not replica.holds(generation):
            return start, None, replica.digest(), b""
        x = replica.candidates.astype(np.float32)
        values, usage = score_range(x[start:stop], start, replica.prompt_idx, replica.sampling_seed)
        replica.scored(range(start, stop), values)
        return start, encode_fitness(values), replica.digest(), usage.encode()


class ReplicaTracker:
    """The driver's view of every worker's replica: what each call must carry, and whether its answers count.

    held[w]: the generation worker w's replica holds, as far as the driver knows (None: unknown, after a restart or
    a disagreement: the next call carries the state). Fresh workers hold generation 0. briefed[w]: the generation
    whose fitness or state w has been sent. epoch[w] rises with every state sent, so answers to calls made before it
    (already known to be stale) do not trigger another resync.
    """

    def __init__(self, workers: int):
        self.held: list[int | None] = [0] * workers
        self.briefed: list[int | None] = [None] * workers
        self.epoch = [0] * workers
        self.previous: tuple[int, np.ndarray, list[list[int]]] | None = None
        """The last finished generation: (number, fitness, the indices each worker scored and kept)."""

    def begin(self, generation: int, strategy: Strategy, sampler: MinibatchSampler, candidates, prompt_idx, seed):
        """A new generation, drawn by the driver's `strategy` and `sampler` (their digest is what answers show)."""
        self.generation = generation
        self._drawn = (strategy, sampler, candidates, prompt_idx)
        self.expected = state_digest(strategy.mean, candidates, prompt_idx, seed)
        self.disagreed = [0] * len(self.held)  # stale answers that triggered a resync, this generation
        self.scored_by: list[list[int]] = [[] for _ in self.held]  # accepted indices per worker, this generation
        self._state: ReplicaState | None = None

    def brief(self, w: int) -> tuple[bytes | None, ReplicaState | None]:
        """What w's next call carries besides its share: (the previous fitness w did not score, state), both None
        once briefed."""
        g = self.generation
        if self.briefed[w] == g:
            return None, None
        self.briefed[w] = g
        if self.held[w] == g:
            return None, None
        if self.held[w] == g - 1 and self.previous is not None and self.previous[0] == g - 1:
            self.held[w] = g
            _, fitness, scored_by = self.previous
            return encode_fitness(np.delete(fitness, scored_by[w])), None
        if self._state is None:  # built once a generation, only when some worker needs it
            self._state = ReplicaState.of(*self._drawn[:2], g, *self._drawn[2:])
        self.held[w] = g
        return None, self._state

    def accept(self, w: int, epoch: int, share: range, reply: Reply) -> bool:
        """Whether an answer counts: scored, and by a replica in agreement. Else w gets the state next (once)."""
        _, fitness, digest, _ = reply
        if fitness is not None and digest == self.expected:
            self.scored_by[w].extend(share)
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
        """The generation's fitness vector, every replica's next `tell` (each is sent the part it did not score)."""
        self.previous = (self.generation, np.asarray(fitness, dtype=np.float64), self.scored_by)
