"""A generation's work handed out over the live workers of a `ScorerPool`, and taken back from those that die
(docs/algorithms.md sec. 6.11).

A population cuts its generation into work items (ranges of candidate indices) and says how many one worker may
hold at a time; what a call carries and what its answer means is its `Transport` (`population_vectors.py`,
`population_seed.py`). Here the live workers are given items up to that limit, the least loaded first, and whenever
one answers it is given the next queued item, so a faster worker takes more.

Dead workers: the work of a worker that dies goes back to the front of the queue and is handed to a live worker, as
does an answer its transport refuses (a replica out of step); the pool waits for Ray to restart the worker
(`ray_pool.py`). Each candidate index is filled exactly once and a late duplicate would be dropped and counted, so
nothing is lost or counted twice in the update. Scores do not depend on which worker computed them (same weights,
same batch, same seed, one torch thread), so results are identical for any number of workers.
"""

from __future__ import annotations

import logging
import time
from collections import deque
from typing import Any, Protocol

import numpy as np

from essaflow.essa.metrics import GenerationStats, payload_bytes
from essaflow.essa.ray_pool import ScorerPool
from essaflow.essa.scorer import NotLoaded

# The Ray population's one logger, as before it was split into modules: one name to follow or filter.
log = logging.getLogger("essaflow.essa.distributed")


class Transport(Protocol):
    """What a population's calls carry and what their answers mean, for the generation being handed out."""

    def send(self, w: int, item: range, stats: GenerationStats) -> tuple[Any, Any]:
        """Submit `item` to worker w, its bytes counted in `stats`: (the call's ObjectRef, a ticket handed back to
        `receive` with the answer)."""
        ...

    def receive(self, w: int, item: range, ticket: Any, reply: tuple, stats: GenerationStats) -> np.ndarray | None:
        """The fitness of `item` in worker w's answer (already checked to be for `item`); None when it must be
        scored again."""
        ...

    def lost(self, w: int) -> None:
        """Worker w was seen dead: what the transport knew of it is gone with it."""
        ...


def hand_out(
    pool: ScorerPool, transport: Transport, items: list[range], per_worker: int
) -> tuple[np.ndarray, GenerationStats]:
    """One fitness per candidate of `items` (in index order) and what scoring them cost, each live worker holding
    at most `per_worker` items at a time; survives workers dying mid-generation."""
    import ray

    start = time.perf_counter()
    stats = GenerationStats(per_worker=[0] * len(pool.actors), device_s_per_worker=[0.0] * len(pool.actors))
    size = sum(len(item) for item in items)
    queue = deque(items)
    fitness: dict[int, float] = {}
    running: dict[Any, tuple[int, range, Any]] = {}  # ObjectRef -> (worker, candidates, the transport's ticket)
    load = [0] * len(pool.actors)

    def send_queued() -> None:
        for w in sorted(pool.live, key=lambda w: load[w]):
            while queue and load[w] < per_worker:
                item = queue.popleft()
                ref, ticket = transport.send(w, item, stats)
                running[ref] = (w, item, ticket)
                load[w] += 1

    send_queued()
    while len(fitness) < size:
        pings = pool.pings()
        if not running and not pings:
            raise RuntimeError("every ESSA worker is dead and none is restarting; cannot finish the generation")
        (ref,), _ = ray.wait(list(running) + pings, num_returns=1)
        if ref not in running:  # a restarting worker's `ready` ping
            pool.answered(ref)
        else:
            w, item, ticket = running.pop(ref)
            load[w] -= 1
            values = _collect(pool, transport, ref, (w, item, ticket), stats)
            if values is None:  # lost with its worker, or refused by the transport: score it again
                queue.appendleft(item)
            else:
                _fill(pool, fitness, item, values, w, stats)
        send_queued()
    stats.wall_s = time.perf_counter() - start
    return np.array([fitness[i] for i in range(size)]), stats


def _collect(pool: ScorerPool, transport: Transport, ref: Any, call: tuple, stats: GenerationStats):
    """The fitness of a call's item from its answer; None when it must be scored again (died, refused)."""
    import ray
    from ray.exceptions import RayActorError

    w, item, ticket = call
    try:
        reply = ray.get(ref)
    except (RayActorError, NotLoaded):
        # The worker died with this work (or had died and been restarted by Ray unseen, so it holds no model): give
        # the work to someone else (front of the queue).
        stats.redispatched += len(item)
        if w in pool.live:
            pool.lost(w)
            stats.worker_failures += 1
            log.warning("ESSA worker %d died mid-generation; re-dispatching its candidates", w)
            transport.lost(w)
        return None
    stats.bytes_received += payload_bytes(reply)
    if reply[0] != item.start:
        raise RuntimeError(f"worker {w} answered for candidate {reply[0]}, not {item.start}")
    return transport.receive(w, item, ticket, reply, stats)


def _fill(pool: ScorerPool, fitness: dict[int, float], item: range, values, w: int, stats: GenerationStats) -> None:
    """Record an answer's fitnesses; a candidate already filled (a late duplicate) is dropped and counted."""
    for i, value in zip(item, values):
        if i in fitness:
            stats.duplicates_dropped += 1
            continue
        fitness[i] = float(value)
        stats.per_worker[w] += 1
        node = pool.worker_nodes[w]
        stats.per_node[node] = stats.per_node.get(node, 0) + 1
