"""The ESSA population on Ray: `ray_population` gives the one `essa.sync` names (ESSA-v3 App. A; docs/algorithms.md
sec. 2.8, 6.11).

- `ray_pool.py`            the scorer actors in a placement group: start, restarts of dead workers, close
- `handout.py`             a generation's work over the live workers, a dead worker's work re-dispatched
- `population_seed.py`     `essa.sync: seed` (default): each worker draws its share from a replica of the search
- `population_vectors.py`  `essa.sync: vectors`: each call carries one candidate's offsets

No weights or gradients move in either mode. Scores do not depend on which worker computed them, so both modes give
the same fitnesses for any number of workers (tests/integration/test_essa_seedsync.py).
"""

from __future__ import annotations

from typing import Any

from essaflow.essa.population_seed import SeedPopulation
from essaflow.essa.population_vectors import VectorsPopulation
from essaflow.essa.ray_pool import ScorerPool
from essaflow.essa.scoring_spec import ScoringSpec


def ray_population(
    spec: ScoringSpec, workers: int, *, sync: str, inflight: int = 2, **pool: Any
) -> SeedPopulation | VectorsPopulation:
    """The Ray population of `sync` on a fresh `ScorerPool` of `workers` actors.

    Args:
        spec: what every worker loads once; seed mode needs `spec.search`.
        workers: number of actors.
        sync: "vectors" ships each candidate's offsets (`VectorsPopulation.evaluate`); "seed" lets every worker
            regenerate them from its strategy replica and ships only (generation, index) plus one header per worker
            per generation (`SeedPopulation.evaluate_replicated`; `essaflow.essa.replica`).
        inflight: vectors mode's candidates queued per worker at a time (seed mode sends one share a worker).
        pool: `ScorerPool`'s other arguments (resources, restarts, timeouts, worker class, address).
    """
    if sync not in ("seed", "vectors") or (sync == "seed" and spec.search is None):
        raise ValueError(f"sync={sync!r}: use 'vectors', or 'seed' with ScoringSpec.search set")
    started = ScorerPool(spec, workers, **pool)
    return SeedPopulation(started) if sync == "seed" else VectorsPopulation(started, inflight)
