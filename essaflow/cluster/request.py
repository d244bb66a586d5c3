"""What a training method asks of Ray: `TrainingRequest`, stated by each method's config (`cluster_request()`) and
checked by this package against what the cluster has (`preflight.py`, `placement.py`)."""

from __future__ import annotations

from dataclasses import dataclass, replace

from essaflow.cluster.placement import bundle_for


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
