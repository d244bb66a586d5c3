"""What a run's training asks of Ray, and a preflight that checks it against the cluster before any compute.

A run that joins an existing cluster (`ray_address`, else RAY_ADDRESS) and asks for more workers than its nodes can
ever hold would otherwise evaluate the base model and train the SFT adapter first, then fail at the train stage.
The pipeline's first task calls :func:`check_training_fits`, which connects and raises ClusterCapacityError
naming what was asked and what the cluster has. A new local Ray is sized for the run when it starts, so nothing is
checked then.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import dataclass

from essaflow import cluster
from essaflow.config import ESSAConfig, GRPOConfig


@dataclass(frozen=True)
class TrainingRequest:
    """The Ray workers a run's training stage will ask for."""

    workers: int
    cpus: float
    gpus: float
    strategy: str

    @property
    def bundle(self) -> dict[str, float]:
        """The Ray resources of one worker (a placement-group bundle)."""
        return cluster.bundle_for(self.cpus, self.gpus)

    def __str__(self) -> str:
        return f"{self.workers} x {{CPU: {self.cpus:g}, GPU: {self.gpus:g}}} ({self.strategy})"


def essa_request(essa: ESSAConfig, cluster_has_gpus: bool) -> TrainingRequest:
    """ESSA's population workers: essa.workers.gpus unset = one whole GPU each where the cluster has GPUs."""
    w = essa.workers
    gpus = w.gpus if w.gpus is not None else (1.0 if cluster_has_gpus else 0.0)
    return TrainingRequest(w.count, w.cpus, gpus, w.placement_strategy)


def grpo_request(grpo: GRPOConfig, cluster_has_gpus: bool) -> TrainingRequest:
    """F-GRPO's Ray Train ranks: one whole GPU each with device=cuda, or auto on a cluster with GPUs."""
    use_gpu = grpo.device == "cuda" or (grpo.device == "auto" and cluster_has_gpus)
    w = grpo.workers
    return TrainingRequest(w.count, w.cpus, 1.0 if use_gpu else 0.0, w.placement_strategy)


def training_request(method: str, essa: ESSAConfig, grpo: GRPOConfig, cluster_has_gpus: bool) -> TrainingRequest | None:
    """The workers `method`'s training asks for on a cluster with (or without) GPUs; None when it uses no Ray."""
    if method == "essa" and essa.backend == "ray":
        return essa_request(essa, cluster_has_gpus)
    if method == "fgrpo" and (grpo.workers.count > 1 or grpo.ray_for_single_worker):
        return grpo_request(grpo, cluster_has_gpus)
    return None


def joins_existing_cluster(ray_address: str | None) -> bool:
    """True when training will join a running cluster (ray_address, else RAY_ADDRESS) rather than start a local Ray."""
    address = ray_address or os.environ.get("RAY_ADDRESS") or "local"
    return address != "local"


def check_training_fits(
    method: str, essa: ESSAConfig, grpo: GRPOConfig, ray_address: str | None
) -> TrainingRequest | None:
    """Connect to the run's cluster and raise ClusterCapacityError if its training workers can never be placed.

    Returns the checked request (None when nothing was checked: no Ray in training, or a new local Ray).
    """
    if not joins_existing_cluster(ray_address) or training_request(method, essa, grpo, cluster_has_gpus=False) is None:
        return None
    cluster.connect(ray_address, log_to_driver=False)
    return check_fits(lambda has_gpus: training_request(method, essa, grpo, has_gpus))


def check_fits(make_request: Callable[[bool], TrainingRequest | None]) -> TrainingRequest | None:
    """``make_request(cluster_has_gpus)`` against the connected cluster's alive nodes; ClusterCapacityError if the
    workers can never be placed. Returns the checked request (None when there was nothing to place)."""
    nodes = cluster.describe_cluster()
    request = make_request(any(n.gpus for n in nodes))
    if request is not None:
        cluster.check_capacity(request.workers, request.bundle, [n.resources for n in nodes], request.strategy)
    return request
