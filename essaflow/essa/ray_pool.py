"""The ESSA scorers as Ray actors in one placement group: their start, their restarts, their close (ESSA-v3 App. A;
docs/algorithms.md sec. 2.8, 6.11).

Both transports (`population_vectors.py`, `population_seed.py`) score on this pool; what they send is theirs, and
how a generation's work is handed out over the live workers is `handout.py`'s.

Actors are built without arguments and load the spec with their first `ready` call, which carries it by reference
(`scorer.py` says why). Dead workers: Ray restarts a dead actor (`max_restarts`), empty, which rejoins the pool once
its `ready` call, carrying the spec again, has loaded the model (a worker restarted unseen answers its next work
with `scorer.NotLoaded`, handled as a death); a process Ray is still restarting after `start_timeout_s` (minutes for
a 7B model) is given up while the others go on. A run may end before a restarting worker is back: `close` logs
which were still restarting. Calls are never retried by Ray itself (`max_task_retries=0`): the work a dead worker
held is re-dispatched by the hand-out, so that each candidate is scored once.
"""

from __future__ import annotations

import logging
import os
import time
from collections import Counter
from typing import Any

import numpy as np

from essaflow import cluster
from essaflow.essa.scorer import CandidateScorer
from essaflow.essa.scoring_spec import ScoringSpec

# The Ray population's one logger, as before it was split into modules: one name to follow or filter.
log = logging.getLogger("essaflow.essa.distributed")


def ensure_ray(num_cpus: int | None = None, address: str | None = None) -> None:
    """Connect to ``address`` (default RAY_ADDRESS), else start a new local Ray; no-op when already connected.

    Goes through `essaflow.cluster.connect`, so workers get the driver's settings (runtime env, secrets through a
    setup hook) and a bare local start never joins a stale `ray start` cluster recorded on this machine.
    """
    import ray

    if not ray.is_initialized():
        # worker stdout (model-loading bars) stays in Ray's log files; exceptions still reach the driver
        cluster.connect(address, num_cpus=num_cpus, log_to_driver=False)


class ScorerPool:
    """Scorer actors, one per bundle of a placement group, and which of them are live.

    The placement group (`strategy` over the nodes) makes a request the cluster cannot meet fail at once with a
    ClusterCapacityError instead of waiting, and when a node dies Ray re-places the lost bundles wherever they fit,
    so restarted workers rejoin on the surviving nodes.

    Args:
        spec: what every worker loads once.
        workers: number of actors (one per GPU, or per CPU slot).
        max_restarts: how often Ray may restart each actor.
        cpus_per_worker, gpus_per_worker: Ray resources of each actor; gpus None = 1 if the cluster has GPUs, else 0.
        strategy: placement-group strategy (SPREAD: a lost node takes as few workers as possible).
        placement_timeout_s: how long to wait for the resources before a ClusterCapacityError.
        worker_class: the scorer class wrapped as the actor (tests pass a subclass that injects faults).
        start_timeout_s: how long a worker may take to load its model: at start (else a clear error) and after Ray
            restarts it (else the pool goes on without it).
        address: Ray cluster to join when this process is not connected yet (None: RAY_ADDRESS, else local).
    """

    def __init__(
        self,
        spec: ScoringSpec,
        workers: int,
        max_restarts: int = 3,
        cpus_per_worker: float = 1.0,
        gpus_per_worker: float | None = None,
        strategy: str = "SPREAD",
        placement_timeout_s: float = 120.0,
        worker_class: type = CandidateScorer,
        start_timeout_s: float = 600.0,
        address: str | None = None,
    ):
        ensure_ray(num_cpus=max(os.cpu_count() or 1, int(np.ceil(workers * cpus_per_worker))), address=address)
        self.start_timeout_s = start_timeout_s
        self._rejoining: dict[Any, int] = {}  # ObjectRef of a `ready` call -> worker being restarted by Ray
        self._lost_at: dict[int, float] = {}  # worker -> when it was seen dead (monotonic), until it is back
        if gpus_per_worker is None:  # auto: one model instance per GPU where there are GPUs
            gpus_per_worker = 1.0 if any(n.gpus for n in cluster.describe_cluster()) else 0.0
        self._pg = cluster.placement_group_for(
            workers, cpus_per_worker, gpus_per_worker, strategy=strategy, timeout_s=placement_timeout_s
        )
        self._start_actors(spec, workers, worker_class, cpus_per_worker, gpus_per_worker, max_restarts)
        self.dimension = self._await_ready(workers)
        """The search dimension every worker loaded."""
        log.info("ESSA: %d workers on %d node(s): %s", workers, len(set(self.worker_nodes)), self.placement())
        self.live = set(range(workers))
        """The workers that take work: not dead, or back from a restart."""

    def _start_actors(self, spec, workers: int, worker_class: type, cpus: float, gpus: float, max_restarts: int):
        """One `worker_class` actor per bundle of the placement group, built without arguments: each loads the spec
        with its first `ready` call."""
        import ray

        actor_cls = ray.remote(worker_class)
        # One copy in the object store, however many workers read it, held for the pool's lifetime: every `ready`
        # call carries it, so a worker Ray restarts loads it again.
        self._spec_ref = ray.put(spec)
        self.actors = [
            actor_cls.options(
                **cluster.worker_options(self._pg, i, cpus, gpus), max_restarts=max_restarts, max_task_retries=0
            ).remote()
            for i in range(workers)
        ]

    def _await_ready(self, workers: int) -> int:
        """Wait for every actor to load its model; the search dimension they agree on (the pool is closed and the
        error raised when one is too slow or they disagree)."""
        import ray
        from ray.util.placement_group import remove_placement_group

        try:
            hello = ray.get([a.ready.remote(self._spec_ref) for a in self.actors], timeout=self.start_timeout_s)
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

    def lost(self, w: int) -> None:
        """Worker w was seen dead: out of the pool until its `ready` call answers after Ray restarted it."""
        self.live.discard(w)
        self._lost_at[w] = time.monotonic()
        self._rejoining[self.actors[w].ready.remote(self._spec_ref)] = w

    def pings(self) -> list[Any]:
        """The `ready` calls of the workers Ray is restarting, to wait on beside the scoring calls."""
        return list(self._rejoining)

    def answered(self, ref: Any) -> None:
        """A restarted worker answered its `ready` ping (`ref`): back in the pool, still restarting, or gone for
        good."""
        import ray
        from ray.exceptions import ActorUnavailableError, RayActorError

        w = self._rejoining.pop(ref)
        try:
            _, self.worker_nodes[w] = ray.get(ref)
            self.live.add(w)
            away = time.monotonic() - self._lost_at.pop(w)
            log.warning("ESSA worker %d is back, on node %s, after %.1f s", w, self.worker_nodes[w][:8], away)
        except ActorUnavailableError:  # still restarting: ask again, briefly spaced
            if time.monotonic() - self._lost_at[w] < self.start_timeout_s:
                time.sleep(0.1)
                self._rejoining[self.actors[w].ready.remote(self._spec_ref)] = w
            else:
                log.error("ESSA worker %d not back after %.0f s; going on without it", w, self.start_timeout_s)
        except RayActorError:
            log.error("ESSA worker %d is dead for good (restarts exhausted?)", w)

    def close(self) -> None:
        """Kill the actors (no restart) and free the placement group; say which workers were still restarting."""
        import ray
        from ray.util.placement_group import remove_placement_group

        restarting = sorted(self._rejoining.values())
        if restarting:
            log.warning("ESSA worker(s) %s still restarting when the pool closed (the search ended first)", restarting)
        for actor in self.actors:
            ray.kill(actor, no_restart=True)
        self.actors = []
        self._spec_ref = None
        if self._pg is not None:
            remove_placement_group(self._pg)
            self._pg = None
