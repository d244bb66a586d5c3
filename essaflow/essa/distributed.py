"""The ESSA population on Ray: a pool of scorer actors, its two transports (essa.sync) and dead workers (ESSA-v3
App. A; docs/algorithms.md sec. 2.8, 6.11).

`essa.sync: seed` (default, the paper's scheme, ESSA-v3 App. A): each worker holds a replica of the strategy and the
minibatch sampler (`replica.py`) and draws the generation's prompts, seed and candidates itself, so the driver makes
one call per worker, `(generation, start, stop)` plus, on its first call of a generation, the previous generation's
fitness of the candidates it did not score (float32 bytes); a scorer answers (start, the share's float32 fitness,
replica digest, its cost in tokens and device time): a few hundred bytes a generation in all. `essa.sync: vectors`:
each call carries one candidate's offsets (float32), the prompt indices and the seed; a scorer answers (candidate
index, fitness). No weights or gradients move. Bytes are counted as `metrics.payload_bytes` counts them.

Decisions where the paper is silent (docs/algorithms.md sec. 6):
- Scheduling (sec. 6.11): seed mode cuts the population into one contiguous share per live worker (equal workers
  finish together; one call a generation is what keeps the bytes at a few hundred). Vectors mode hands out single
  candidates dynamically: each worker holds at most `inflight` of them and the next queued one goes to the worker
  that just finished, so a fast worker takes more. Scores do not depend on which worker computed them (same
  weights, same batch, same seed, one torch thread), so results are identical for any number of workers.
- Dead workers: the work of a worker that dies (its share, or its candidate) goes back to the front of the queue
  and is handed to a live worker; Ray restarts the actor (`max_restarts`), which rejoins once its `ready` call
  answers; a restart gets as long to load its model as the first start (`start_timeout_s`: minutes for a 7B model),
  and one slower than that is given up while the others go on. A run may end before a restarting worker is back:
  `close` logs which were still restarting. Calls are never retried by Ray itself (`max_task_retries=0`), each
  candidate index is filled exactly once, and a late duplicate would be dropped and counted, so nothing is lost or
  counted twice in the update. In seed mode a re-dispatched share is just its index range; the restarted worker's
  fresh replica is sent the driver's search state with its first call.
"""

from __future__ import annotations

import logging
import os
import time
from collections import Counter, deque
from typing import Any

import numpy as np

from essaflow import cluster
from essaflow.essa.metrics import GenerationStats, payload_bytes
from essaflow.essa.prompt_sampler import MinibatchSampler
from essaflow.essa.replica import ReplicaTracker, decode_fitness
from essaflow.essa.scorer import CandidateScorer
from essaflow.essa.scoring_spec import ScoringSpec
from essaflow.essa.strategy import Strategy

log = logging.getLogger(__name__)


def ensure_ray(num_cpus: int | None = None, address: str | None = None) -> None:
    """Connect to ``address`` (default RAY_ADDRESS), else start a new local Ray; no-op when already connected.

    Goes through `essaflow.cluster.connect`, so workers get the driver's settings (runtime env, secrets through a
    setup hook) and a bare local start never joins a stale `ray start` cluster recorded on this machine.
    """
    import ray

    if not ray.is_initialized():
        # worker stdout (model-loading bars) stays in Ray's log files; exceptions still reach the driver
        cluster.connect(address, num_cpus=num_cpus, log_to_driver=False)


class RayPopulation:
    """A pool of scorer actors with dynamic hand-out and re-dispatch of a dead worker's candidates.

    The actors live in one placement group (one bundle each, `strategy` over the nodes): a request the cluster
    cannot meet fails at once with a ClusterCapacityError instead of waiting, and when a node dies Ray re-places
    the lost bundles wherever they fit, so restarted workers rejoin on the surviving nodes.

    Args:
        spec: what every worker loads once.
        workers: number of actors (one per GPU, or per CPU slot).
        inflight: candidates queued per worker at a time; 2 hides the driver round trip behind the current score.
        max_restarts: how often Ray may restart each actor.
        cpus_per_worker, gpus_per_worker: Ray resources of each actor; gpus None = 1 if the cluster has GPUs, else 0.
        strategy: placement-group strategy (SPREAD: a lost node takes as few workers as possible).
        placement_timeout_s: how long to wait for the resources before a ClusterCapacityError.
        worker_class: the scorer class wrapped as the actor (tests pass a subclass that injects faults).
        start_timeout_s: how long a worker may take to load its model: at start (else a clear error) and after Ray
            restarts it (else the pool goes on without it).
        address: Ray cluster to join when this process is not connected yet (None: RAY_ADDRESS, else local).
        sync: "vectors" ships each candidate's offsets (`evaluate`); "seed" lets every worker regenerate them from
            its strategy replica and ships only (generation, index) plus one header per worker per generation
            (`evaluate_replicated`; ESSA-v3 App. A; `essaflow.essa.replica`). Same fitnesses either way; seed mode
            needs `spec.search`.
    """

    def __init__(
        self,
        spec: ScoringSpec,
        workers: int,
        inflight: int = 2,
        max_restarts: int = 3,
        cpus_per_worker: float = 1.0,
        gpus_per_worker: float | None = None,
        strategy: str = "SPREAD",
        placement_timeout_s: float = 120.0,
        worker_class: type = CandidateScorer,
        start_timeout_s: float = 600.0,
        address: str | None = None,
        sync: str = "vectors",
    ):
        if sync not in ("seed", "vectors") or (sync == "seed" and spec.search is None):
            raise ValueError(f"sync={sync!r}: use 'vectors', or 'seed' with ScoringSpec.search set")
        self.sync = sync
        ensure_ray(num_cpus=max(os.cpu_count() or 1, int(np.ceil(workers * cpus_per_worker))), address=address)
        self.inflight = inflight
        self.start_timeout_s = start_timeout_s
        if gpus_per_worker is None:  # auto: one model instance per GPU where there are GPUs
            gpus_per_worker = 1.0 if any(n.gpus for n in cluster.describe_cluster()) else 0.0
        self._pg = cluster.placement_group_for(
            workers, cpus_per_worker, gpus_per_worker, strategy=strategy, timeout_s=placement_timeout_s
        )
        self._start_actors(spec, workers, worker_class, cpus_per_worker, gpus_per_worker, max_restarts)
        self.dimension = self._await_ready(workers)
        log.info("ESSA: %d workers on %d node(s): %s", workers, len(set(self.worker_nodes)), self.placement())
        self._live = set(range(workers))
        self._rejoining: dict[Any, int] = {}  # ObjectRef of a `ready` call -> worker being restarted by Ray
        self._lost_at: dict[int, float] = {}  # worker -> when it was seen dead (monotonic), until it is back
        self._replicas = ReplicaTracker(workers) if sync == "seed" else None

    def _start_actors(self, spec, workers: int, worker_class: type, cpus: float, gpus: float, max_restarts: int):
        """One `worker_class` actor per bundle of the placement group, each handed the spec by reference."""
        import ray

        actor_cls = ray.remote(worker_class)
        # One copy in the object store, however many workers read it. Held for the pool's lifetime: Ray re-runs the
        # constructor with it when it restarts a worker, and a released argument makes that restart fail.
        self._spec_ref = ray.put(spec)
        self.actors = [
            actor_cls.options(
                **cluster.worker_options(self._pg, i, cpus, gpus), max_restarts=max_restarts, max_task_retries=0
            ).remote(self._spec_ref)
            for i in range(workers)
        ]

    def _await_ready(self, workers: int) -> int:
        """Wait for every actor to load its model; the search dimension they agree on (the pool is closed and the
        error raised when one is too slow or they disagree)."""
        import ray
        from ray.util.placement_group import remove_placement_group

        try:
            hello = ray.get([a.ready.remote() for a in self.actors], timeout=self.start_timeout_s)
        except ray.exceptions.GetTimeoutError:
            self.close()
            raise RuntimeError(
                f"{workers} ESSA workers did not load the model within {self.start_timeout_s:.0f}s (essa.workers.count)"
            ) from None
        except BaseException:
            remove_placement_group(self._pg)
            raise
        dims = {d for d, _ in hello}
        if len(dims) != 1:
            self.close()
            raise RuntimeError(f"workers disagree on the search dimension: {sorted(dims)}")
        self.worker_nodes = [node for _, node in hello]
        """The Ray node of each worker (updated when a restarted worker rejoins, possibly elsewhere)."""
        return dims.pop()

    def placement(self) -> dict[str, int]:
        """Workers per node (short node ids), e.g. {"3f2a9c1b": 1, "77d0e412": 1}."""
        return dict(Counter(n[:8] for n in self.worker_nodes))

    def evaluate(self, candidates: np.ndarray, prompt_idx: np.ndarray, seed: int) -> tuple[np.ndarray, GenerationStats]:
        """Vectors mode: one fitness per candidate (in candidate order); survives workers dying mid-generation."""
        if self._replicas is not None:
            raise ValueError("essa.sync=seed: score a generation with evaluate_replicated")
        return self._score(candidates, np.asarray(prompt_idx, dtype=np.int32), seed, None)

    def evaluate_replicated(
        self,
        generation: int,
        strategy: Strategy,
        sampler: MinibatchSampler,
        candidates: np.ndarray,
        prompt_idx: np.ndarray,
        seed: int,
    ) -> tuple[np.ndarray, GenerationStats]:
        """Seed mode: one fitness per candidate of `generation`, which the driver's `strategy` and `sampler` have
        just drawn (`candidates`, `prompt_idx`): their digest is what every replica must show, their state what a
        disagreeing one is sent. Survives workers dying mid-generation."""
        if self._replicas is None:
            raise ValueError("essa.sync=vectors: score candidates with evaluate")
        prompt_idx = np.asarray(prompt_idx, dtype=np.int32)
        self._replicas.begin(generation, strategy, sampler, candidates, prompt_idx, seed)
        fitness, stats = self._score(candidates, prompt_idx, seed, generation)
        self._replicas.finish(fitness)
        return fitness, stats

    def _score(
        self, candidates: np.ndarray, prompt_idx: np.ndarray, seed: int, generation: int | None
    ) -> tuple[np.ndarray, GenerationStats]:
        """Hand the work items out, collect the answers, re-queue what a dead or stale worker held."""
        import ray

        start = time.perf_counter()
        stats = GenerationStats(per_worker=[0] * len(self.actors), device_s_per_worker=[0.0] * len(self.actors))
        payload = candidates.astype(np.float32)
        queue = deque(self._work_items(len(payload)))
        fitness: dict[int, float] = {}
        running: dict[Any, tuple[int, range, int]] = {}  # ObjectRef -> (worker, candidates, replica epoch)
        load = [0] * len(self.actors)
        per_worker = self.inflight if self._replicas is None else 1  # a share is a worker's whole generation

        def hand_out() -> None:
            for w in sorted(self._live, key=lambda w: load[w]):
                while queue and load[w] < per_worker:
                    item = queue.popleft()
                    ref = self._submit(w, item, generation, payload, prompt_idx, seed, stats)
                    running[ref] = (w, item, self._replicas.epoch[w] if self._replicas else 0)
                    load[w] += 1

        hand_out()
        while len(fitness) < len(payload):
            if not running and not self._rejoining:
                raise RuntimeError("every ESSA worker is dead and none is restarting; cannot finish the generation")
            (ref,), _ = ray.wait(list(running) + list(self._rejoining), num_returns=1)
            if ref in self._rejoining:
                self._check_rejoin(ref, self._rejoining.pop(ref))
            else:
                w, item, epoch = running.pop(ref)
                load[w] -= 1
                values = self._collect(ref, w, item, epoch, stats)
                if values is None:  # lost with its worker, or from a replica out of step: score it again
                    queue.appendleft(item)
                else:
                    self._fill(fitness, item, values, w, stats)
            hand_out()
        stats.wall_s = time.perf_counter() - start
        return np.array([fitness[i] for i in range(len(payload))]), stats

    def _work_items(self, population: int) -> list[range]:
        """Vectors mode: one candidate per call. Seed mode: one contiguous share per live worker (one call each a
        generation: the fewest bytes; docs/algorithms.md sec. 6.11)."""
        if self._replicas is None:
            return [range(i, i + 1) for i in range(population)]
        cuts = np.linspace(0, population, min(len(self._live), population) + 1).round().astype(int)
        return [range(a, b) for a, b in zip(cuts[:-1], cuts[1:])]

    def _fill(self, fitness: dict[int, float], item: range, values: np.ndarray, w: int, stats: GenerationStats):
        """Record an answer's fitnesses; a candidate already filled (a late duplicate) is dropped and counted."""
        for i, value in zip(item, values):
            if i in fitness:
                stats.duplicates_dropped += 1
                continue
            fitness[i] = float(value)
            stats.per_worker[w] += 1
            node = self.worker_nodes[w]
            stats.per_node[node] = stats.per_node.get(node, 0) + 1

    def _submit(self, w: int, item: range, generation, payload, prompt_idx, seed: int, stats: GenerationStats) -> Any:
        """Send work to worker w: a candidate's offsets (vectors mode), or a share of indices with the previous
        fitness or the state when due (seed mode)."""
        if self._replicas is None:
            args: tuple = (item.start, payload[item.start], prompt_idx, seed)
            stats.bytes_sent += payload_bytes(args)
            return self.actors[w].score.remote(*args)
        others, state = self._replicas.brief(w)
        args = (generation, item.start, item.stop, others, state)
        stats.bytes_sent += payload_bytes(args)
        if state is not None:
            stats.resyncs += 1
            stats.resync_bytes += payload_bytes(state)
            log.info("ESSA worker %d is sent the search state of generation %d (replica unknown or out of step)",
                     w, generation)  # fmt: skip
        return self.actors[w].score_share.remote(*args)

    def _collect(self, ref: Any, w: int, item: range, epoch: int, stats: GenerationStats) -> np.ndarray | None:
        """The fitnesses of `item` from worker w's answer; None when they must be scored again (died, stale)."""
        import ray
        from ray.exceptions import RayActorError

        try:
            reply = ray.get(ref)
        except RayActorError:
            # The worker died with this work: give it to someone else (front of the queue).
            stats.redispatched += len(item)
            if w in self._live:
                self._live.discard(w)
                self._lost_at[w] = time.monotonic()
                stats.worker_failures += 1
                log.warning("ESSA worker %d died mid-generation; re-dispatching its candidates", w)
                self._rejoining[self.actors[w].ready.remote()] = w
                if self._replicas is not None:
                    self._replicas.lost(w)  # Ray restarts it with a fresh replica: it gets the state on return
            return None
        stats.bytes_received += payload_bytes(reply)
        if reply[0] != item.start:
            raise RuntimeError(f"worker {w} answered for candidate {reply[0]}, not {item.start}")
        if self._replicas is None:
            stats.charge(w, reply[2])
            return np.array([reply[1]])
        if not self._replicas.accept(w, epoch, item, reply):
            stats.stale_answers += len(item)
            return None
        stats.charge(w, reply[3])
        return decode_fitness(reply[1])

    def _check_rejoin(self, ref: Any, w: int) -> None:
        """A restarted worker answered its ready() ping: back in the pool, still restarting, or gone for good."""
        import ray
        from ray.exceptions import ActorUnavailableError, RayActorError

        try:
            _, self.worker_nodes[w] = ray.get(ref)
            self._live.add(w)
            away = time.monotonic() - self._lost_at.pop(w)
            log.warning("ESSA worker %d is back, on node %s, after %.1f s", w, self.worker_nodes[w][:8], away)
        except ActorUnavailableError:  # still restarting: ask again, briefly spaced
            if time.monotonic() - self._lost_at[w] < self.start_timeout_s:
                time.sleep(0.1)
                self._rejoining[self.actors[w].ready.remote()] = w
            else:
                log.error("ESSA worker %d not back after %.0f s; going on without it", w, self.start_timeout_s)
        except RayActorError:
            log.error("ESSA worker %d is dead for good (restarts exhausted?)", w)

    def close(self) -> None:
        import ray
        from ray.util.placement_group import remove_placement_group

        restarting = sorted(getattr(self, "_rejoining", {}).values())  # absent when the pool failed to start
        if restarting:
            log.warning("ESSA worker(s) %s still restarting when the pool closed (the search ended first)", restarting)
        for actor in self.actors:
            ray.kill(actor, no_restart=True)
        self.actors = []
        self._spec_ref = None
        if self._pg is not None:
            remove_placement_group(self._pg)
            self._pg = None
