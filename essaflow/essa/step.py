"""One ESSA generation: minibatch -> ask -> evaluate -> tell -> record (ESSA-v3 sec. 3.2, App. A Algorithm 1).

`run_generation` is the step the loop (`loop.py`), the benchmarks and the tests all run, so a search on any population
(in process, a Ray pool in seed or vectors mode, a pool with injected faults) is the loop's search. What a
caller adds around it (held-out evaluation, checkpoints, timing over many generations) stays the caller's.
"""

from __future__ import annotations

import time
from dataclasses import asdict, dataclass
from typing import Any, Protocol

import numpy as np

from essaflow.essa.config import ESSAConfig
from essaflow.essa.population import GenerationStats
from essaflow.essa.prompt_sampler import MinibatchSampler, generation_seed
from essaflow.essa.strategy import Strategy, make_strategy


class Population(Protocol):
    """Scores the candidates it is sent: `LocalPopulation` (population.py), `RayPopulation` with sync "vectors"
    (distributed.py)."""

    sync: str

    def evaluate(
        self, candidates: np.ndarray, prompt_idx: np.ndarray, seed: int
    ) -> tuple[np.ndarray, GenerationStats]: ...


class ReplicatedPopulation(Protocol):
    """Scores candidates its workers draw themselves from replicas of the driver's strategy and sampler:
    `RayPopulation` with sync "seed" (distributed.py, replica.py)."""

    sync: str

    def evaluate_replicated(
        self, generation: int, strategy: Strategy, sampler: MinibatchSampler, candidates, prompt_idx, seed: int
    ) -> tuple[np.ndarray, GenerationStats]: ...


def start_search(e: ESSAConfig, dimension: int, num_train: int) -> tuple[Strategy, MinibatchSampler]:
    """A fresh search from essa.seed: the strategy (mean at the SFT point) and the shared-minibatch sampler."""
    return make_strategy(e, dimension), MinibatchSampler(num_train, e.minibatch, e.seed)


@dataclass
class GenerationMetrics:
    """One generation's record (MLflow metrics `train.*`, metrics.jsonl, the job's JSON)."""

    generation: int
    fitness_mean: float | None = None
    fitness_max: float | None = None
    fitness_min: float | None = None
    fitness_std: float | None = None
    distinct_fitness: int | None = None
    tie_share: float | None = None
    sigma: float | None = None
    mean_norm: float | None = None
    wall_s: float | None = None
    candidates_per_s: float | None = None
    bytes_sent: int | None = None
    bytes_received: int | None = None
    bytes: int | None = None
    redispatched: int | None = None
    worker_failures: int | None = None
    resyncs: int | None = None
    generated_tokens: int | None = None
    forward_tokens: int | None = None
    device_s: float | None = None
    """Device-seconds of scoring summed over workers (CPU time on CPU, wall time on a GPU; essaflow/usage.py)."""
    device_s_per_worker: list[float] | None = None
    nodes_active: int | None = None
    per_worker: list[int] | None = None
    per_node: dict[str, int] | None = None
    eval_greedy: float | None = None
    stopped_early: bool | None = None
    reward_components: dict[str, float] | None = None
    """Mean of each named reward component over the generation's judged completions, every candidate's (rows
    `reward.<name>`; absent when the reward returns a number or the fitness is gray-box)."""

    @classmethod
    def of(cls, generation: int, fitness: np.ndarray, stats: GenerationStats, strategy, wall_s: float):
        per_node = {node[:8]: n for node, n in stats.per_node.items()}
        distinct = len(np.unique(fitness))
        return cls(
            generation=generation,
            fitness_mean=float(fitness.mean()),
            fitness_max=float(fitness.max()),
            fitness_min=float(fitness.min()),
            fitness_std=float(fitness.std()),
            distinct_fitness=distinct,
            tie_share=round(1.0 - distinct / len(fitness), 4),
            sigma=strategy.sigma,
            mean_norm=float(np.linalg.norm(strategy.mean)),
            wall_s=round(wall_s, 4),
            candidates_per_s=round(len(fitness) / stats.wall_s, 2),
            bytes_sent=stats.bytes_sent,
            bytes_received=stats.bytes_received,
            bytes=stats.bytes_total,
            redispatched=stats.redispatched,
            worker_failures=stats.worker_failures,
            resyncs=stats.resyncs,
            generated_tokens=stats.usage.generated_tokens,
            forward_tokens=stats.usage.forward_tokens,
            device_s=round(stats.usage.device_s, 3),
            device_s_per_worker=[round(x, 3) for x in stats.device_s_per_worker],
            nodes_active=len(stats.per_node),
            per_worker=stats.per_worker,
            per_node=per_node,
            reward_components=stats.usage.components.means() or None,
        )

    def as_row(self) -> dict[str, Any]:
        row = {k: v for k, v in asdict(self).items() if v is not None and k != "reward_components"}
        return row | {f"reward.{name}": v for name, v in (self.reward_components or {}).items()}


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
