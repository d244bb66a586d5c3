"""What one ESSA generation cost and records: the population evaluation's counters (`GenerationStats`: bytes each way,
re-dispatched and stale work, tokens and device-seconds) and the generation's row (`GenerationMetrics`: MLflow
metrics `train.*`, metrics.jsonl, the job's JSON).

Bytes are the pickle-protocol-5 size of each call's arguments and each reply (`payload_bytes`: the payload Ray
serialises, without its fixed per-call envelope). The in-process path counts the payloads vectors mode would carry,
so figures compare across modes.
"""

from __future__ import annotations

import pickle
from dataclasses import asdict, dataclass, field
from typing import Any

import numpy as np

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
