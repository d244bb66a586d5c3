"""What a run's training asks of Ray, checked against the cluster before any compute.

A run that joins an existing cluster (`ray_address`, else RAY_ADDRESS) and asks for more workers than its nodes can
ever hold would otherwise evaluate the base model and train the SFT adapter first, then fail at the train stage.
The pipeline's first task calls :func:`check_training_fits` with the request its config states
(`PipelineConfig.cluster_request()`), which connects and raises ClusterCapacityError naming what was asked and what
the cluster has. A new local Ray is sized for the run when it starts, so nothing is checked then.
"""

from __future__ import annotations

import os

from essaflow import cluster
from essaflow.cluster.request import TrainingRequest, check_fits


def joins_existing_cluster(ray_address: str | None) -> bool:
    """True when training will join a running cluster (ray_address, else RAY_ADDRESS) rather than start a local Ray."""
    address = ray_address or os.environ.get("RAY_ADDRESS") or "local"
    return address != "local"


def probe_cluster(request: TrainingRequest | None, ray_address: str | None) -> None:
    """ClusterUnreachable within seconds when training will join a cluster where nothing answers: what a job
    checks before its first evaluation (joining, and the capacity check, come with training)."""
    if request is None or not joins_existing_cluster(ray_address):
        return
    address, source = (ray_address, "ray_address") if ray_address else (os.environ["RAY_ADDRESS"], "RAY_ADDRESS")
    cluster.check_reachable(address, source)


def check_training_fits(request: TrainingRequest | None, ray_address: str | None) -> TrainingRequest | None:
    """Connect to the run's cluster and raise ClusterCapacityError if the requested workers can never be placed.

    Returns the checked request, its GPUs settled (None when nothing was checked: no Ray in training, or a new local
    Ray).
    """
    if request is None or not joins_existing_cluster(ray_address):
        return None
    cluster.connect(ray_address, log_to_driver=False)
    return check_fits(request)


def cluster_report(request: TrainingRequest | None, ray_address: str | None) -> list[str]:
    """`essaflow check-config --cluster`: the run's Ray head answers and its nodes hold the training workers (as
    check_training_fits); one line per node, then the verdict. ClusterUnreachable or ClusterCapacityError
    otherwise. Nothing to check (a line saying so) when training starts a local Ray."""
    if not joins_existing_cluster(ray_address):
        return ["no cluster to check: neither ray_address nor RAY_ADDRESS is set (a local Ray starts)"]
    checked = check_training_fits(request, ray_address)
    cluster.connect(ray_address, log_to_driver=False)  # method none: joined here, for the node listing
    nodes = [f"node {n.node_id[:8]} {'head' if n.is_head else 'worker'}: {n.cpus:g} CPU, {n.gpus:g} GPU"
             for n in cluster.describe_cluster()]  # fmt: skip
    return [*nodes, f"training workers fit: {checked or 'training uses no Ray workers'}"]
