"""One ESSA generation: minibatch -> ask -> evaluate -> tell -> record (ESSA-v3 sec. 3.2, App. A Algorithm 1).

`run_generation` is the step the loop (`loop.py`), the benchmarks and the tests all run, so a search on any population
(in process, a Ray pool in seed or vectors mode, a pool with injected faults) is the loop's search. What a
caller adds around it (held-out evaluation, checkpoints, timing over many generations) stays the caller's.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Protocol

import numpy as np

from essaflow.essa.config import ESSAConfig
from essaflow.essa.metrics import GenerationMetrics, GenerationStats
from essaflow.essa.prompt_sampler import MinibatchSampler, generation_seed
from essaflow.essa.strategy import Strategy, make_strategy


class Population(Protocol):
    """Scores the candidates it is sent: `LocalPopulation` (population.py), `VectorsPopulation`
    (population_vectors.py, sync "vectors")."""

    sync: str

    def evaluate(
        self, candidates: np.ndarray, prompt_idx: np.ndarray, seed: int
    ) -> tuple[np.ndarray, GenerationStats]: ...


class ReplicatedPopulation(Protocol):
    """Scores candidates its workers draw themselves from replicas of the driver's strategy and sampler:
    `SeedPopulation` (population_seed.py, replica.py; sync "seed")."""

    sync: str

    def evaluate_replicated(
        self, generation: int, strategy: Strategy, sampler: MinibatchSampler, candidates, prompt_idx, seed: int
    ) -> tuple[np.ndarray, GenerationStats]: ...


def start_search(e: ESSAConfig, dimension: int, num_train: int) -> tuple[Strategy, MinibatchSampler]:
    """A fresh search from essa.seed: the strategy (mean at the SFT point) and the shared-minibatch sampler."""
    return make_strategy(e, dimension), MinibatchSampler(num_train, e.minibatch, e.seed)


@dataclass(frozen=True)
class Generation:
    """What one generation produced: its fitnesses, what scoring cost, and its metrics record."""

    fitness: np.ndarray
    stats: GenerationStats
    metrics: GenerationMetrics
    """`generation` in it counts the generations told so far, this one included."""
    wall_s: float
    """Seconds from drawing the minibatch to telling the strategy."""


def run_generation(
    population: Population | ReplicatedPopulation,
    strategy: Strategy,
    sampler: MinibatchSampler,
    seed: int,
    generation: int,
) -> Generation:
    """Generation `generation` (0-based) of the search: every candidate is scored on the same minibatch with the
    same sampling seed (common random numbers), and the strategy is told the fitnesses (maximised)."""
    t0 = time.perf_counter()
    prompts = sampler.next()
    candidates = strategy.ask()
    sampling_seed = generation_seed(seed, generation)
    if population.sync == "seed":  # the workers draw the same candidates from replicas of strategy and sampler
        fitness, stats = population.evaluate_replicated(
            generation, strategy, sampler, candidates, prompts, sampling_seed
        )
    else:
        fitness, stats = population.evaluate(candidates, prompts, sampling_seed)
    strategy.tell(candidates, fitness)
    wall_s = time.perf_counter() - t0
    return Generation(fitness, stats, GenerationMetrics.of(generation + 1, fitness, stats, strategy, wall_s), wall_s)
