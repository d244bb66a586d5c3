"""The Ray workers a training method asks for: one sub-config shared by ESSA's population and F-GRPO's ranks.

`essa.workers` and `grpo.workers` are both a :class:`RayWorkersConfig`; each method's subclass only changes the
defaults that suit it (ESSA spreads its scorers, F-GRPO packs its DDP ranks). None of these settings changes what a
run computes, so none is a trajectory field: a resumed run may use more or fewer workers.
"""

from __future__ import annotations

from typing import Literal

from pydantic import Field, field_validator

from essaflow.config_base import StrictConfig, ray_quantity

PlacementStrategy = Literal["SPREAD", "PACK", "STRICT_SPREAD", "STRICT_PACK"]


class RayWorkersConfig(StrictConfig):
    """How many Ray workers train, what each takes, where they go and how failures are handled."""

    ray: bool | None = None
    """Where the workers run: true on Ray, false in this process without Ray; None (unset) the method's default
    (the subclass says which)."""
    count: int = Field(1, ge=1)
    """Number of workers: ESSA population scorers (one per GPU or CPU slot) or F-GRPO DDP ranks."""
    cpus: float = Field(1.0, gt=0.0)
    """CPUs per worker (below 1: several workers share a core, e.g. a small test cluster)."""
    gpus: float | None = Field(None, ge=0.0)
    """GPUs per worker; None (auto) = one whole GPU when the cluster has GPUs, else 0. ESSA: 1/k packs k small
    models on one GPU. F-GRPO: leave None, `grpo.device` decides (one whole GPU per rank on CUDA)."""
    placement_strategy: PlacementStrategy = "SPREAD"
    """Ray placement-group strategy over the nodes: SPREAD, PACK, STRICT_SPREAD or STRICT_PACK."""
    placement_timeout_s: float = Field(120.0, gt=0)
    """How long to wait for the workers' resources before a ClusterCapacityError (ESSA; Ray Train ranks are checked
    against the cluster before launch instead)."""
    max_restarts: int = Field(3, ge=-1)
    """How often a lost worker is restarted (-1: no limit). ESSA: per actor, its candidates go to live workers
    meanwhile; F-GRPO: restarts of the whole Ray Train group, resumed from the latest checkpoint."""
    start_timeout_s: float = Field(600.0, gt=0)
    """How long a worker may take to load its model, at start (then the run fails) and after a restart (then
    ESSA goes on without it)."""

    _whole_resources = field_validator("cpus", "gpus")(ray_quantity)


class ESSAWorkersConfig(RayWorkersConfig):
    """ESSA's population workers: spread over nodes, so a lost node takes few scorers with it."""

    ray: bool | None = None
    """true or unset: score the population on a Ray actor pool (any count); false: in the driver process, no Ray
    (tests, debugging; count and the Ray settings unused)."""

    placement_strategy: PlacementStrategy = "SPREAD"
    """SPREAD (ESSA default: a lost node takes as few workers as possible), PACK, STRICT_SPREAD or STRICT_PACK."""
    max_restarts: int = Field(3, ge=-1)
    """How often Ray restarts a dead scorer actor (-1: no limit); its candidates go to live workers meanwhile."""


class GRPOWorkersConfig(RayWorkersConfig):
    """F-GRPO's Ray Train DDP ranks: packed, so all-reduces cross as few nodes as possible."""

    ray: bool | None = None
    """Unset: ranks on Ray Train from count=2, one rank in this process (the same loop, world size 1) for count=1;
    true: on Ray Train for one rank too; false: in this process (count must be 1)."""

    placement_strategy: PlacementStrategy = "PACK"
    """PACK (F-GRPO default: fewer cross-node all-reduce hops), SPREAD, STRICT_SPREAD or STRICT_PACK."""
    max_restarts: int = Field(2, ge=-1)
    """How often Ray Train restarts the worker group after a rank or node dies (-1: no limit); each restart
    resumes from the latest checkpoint in the run's checkpoint directory, which every node must be able to read."""
    gpu_memory_gib: float | None = Field(None, gt=0)
    """Memory of each rank's GPU in GiB (an H100 80GB: 80), for `essaflow check-config`'s memory plan: the config is
    refused when a rank's estimated peak does not fit (docs/scaling.md, "Memory plan"). None: no plan is made.
    Nothing at run time reads it."""
