"""What a training method asks of Ray: `TrainingRequest`, stated by each method's config (`cluster_request()`) and
checked against what the cluster has (:func:`check_fits` here, `placement.py`; before any compute,
essaflow/checks/cluster.py)."""

from __future__ import annotations

from dataclasses import dataclass, replace

from essaflow.cluster.placement import bundle_for, check_capacity, describe_cluster


@dataclass(frozen=True)
class TrainingRequest:
    """The Ray workers a run's training stage will ask for."""

    workers: int
    cpus: float
    gpus: float | None
    """GPUs per worker; None: one whole GPU each where the cluster has GPUs, else none (`on`)."""
    strategy: str
    """The placement-group strategy over the nodes (SPREAD, PACK, STRICT_SPREAD, STRICT_PACK)."""

    def on(self, cluster_has_gpus: bool) -> TrainingRequest:
        """This request on a cluster with (or without) GPUs: `gpus` settled."""
        if self.gpus is not None:
            return self
        return replace(self, gpus=1.0 if cluster_has_gpus else 0.0)

    @property
    def bundle(self) -> dict[str, float]:
        """The Ray resources of one worker (a placement-group bundle); `gpus` must be settled."""
        return bundle_for(self.cpus, self.gpus)

    def __str__(self) -> str:
        gpus = "auto" if self.gpus is None else f"{self.gpus:g}"
        return f"{self.workers} x {{CPU: {self.cpus:g}, GPU: {gpus}}} ({self.strategy})"


def check_fits(request: TrainingRequest) -> TrainingRequest:
    """``request`` against the connected cluster's alive nodes; ClusterCapacityError if its workers can never be
    placed. Returns the request with its GPUs settled for this cluster."""
    nodes = describe_cluster()
    settled = request.on(any(n.gpus for n in nodes))
    check_capacity(settled.workers, settled.bundle, [n.resources for n in nodes], settled.strategy)
    return settled
