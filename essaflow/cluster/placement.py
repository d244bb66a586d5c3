"""What the cluster has and what workers ask of it: resources per worker, capacity checks, placement groups."""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

STRATEGIES = ("PACK", "SPREAD", "STRICT_PACK", "STRICT_SPREAD")


class ClusterCapacityError(RuntimeError):
    """The cluster cannot hold (now, or ever) the workers asked for; the message says what was asked and what exists."""


# ----------------------------------------------------------------------------------------- resources per worker


def _check_quantity(name: str, value: float) -> float:
    value = float(value)
    if value < 0 or not math.isfinite(value):
        raise ValueError(f"{name}={value} must be a finite number >= 0")
    if value > 1 and not value.is_integer():
        raise ValueError(f"{name}={value}: Ray accepts fractions only below 1 (whole numbers above)")
    return value


def worker_resources(num_cpus: float = 1.0, num_gpus: float = 0.0) -> dict[str, float]:
    """Ray options of one worker (``.options(**worker_resources(...))``), validated the way Ray will."""
    return {"num_cpus": _check_quantity("num_cpus", num_cpus), "num_gpus": _check_quantity("num_gpus", num_gpus)}


def gpus_per_worker(workers_per_gpu: int) -> float:
    """GPU share of each worker when ``workers_per_gpu`` model instances share one GPU (1 -> whole GPUs).

    ESSA keeps one model instance per worker (ESSA-v3 sec. 4: each GPU holds a full model); a small model can host
    several population workers per GPU, a quantised large one needs exactly one.
    """
    if int(workers_per_gpu) != workers_per_gpu or workers_per_gpu < 1:
        raise ValueError(f"workers_per_gpu={workers_per_gpu} must be a whole number >= 1")
    return 1.0 / int(workers_per_gpu)


def bundle_for(num_cpus: float = 1.0, num_gpus: float = 0.0, resources: Mapping[str, float] | None = None):
    """One placement-group bundle: the resources of one worker, zero entries left out."""
    b = {"CPU": _check_quantity("num_cpus", num_cpus), "GPU": _check_quantity("num_gpus", num_gpus)}
    b.update({k: float(v) for k, v in (resources or {}).items()})
    b = {k: v for k, v in b.items() if v > 0}
    if not b:
        raise ValueError("a worker must ask for some resource (num_cpus or num_gpus > 0)")
    return b


# -------------------------------------------------------------------------------------------- the cluster's view


@dataclass(frozen=True)
class NodeInfo:
    """One Ray node: id, address, whether it is alive and the head, and its total resources."""

    node_id: str
    address: str
    alive: bool
    is_head: bool
    resources: dict[str, float] = field(default_factory=dict)

    @property
    def cpus(self) -> float:
        return self.resources.get("CPU", 0.0)

    @property
    def gpus(self) -> float:
        return self.resources.get("GPU", 0.0)


def describe_cluster(include_dead: bool = False) -> list[NodeInfo]:
    """The cluster's nodes (alive ones unless ``include_dead``), head first: who holds which CPUs and GPUs."""
    import ray

    nodes = []
    for n in ray.nodes():
        if not (n.get("Alive") or include_dead):
            continue
        res = {k: float(v) for k, v in (n.get("Resources") or {}).items() if not k.startswith("node:")}
        is_head = "node:__internal_head__" in (n.get("Resources") or {})
        nodes.append(NodeInfo(n["NodeID"], n.get("NodeManagerAddress", ""), bool(n.get("Alive")), is_head, res))
    return sorted(nodes, key=lambda n: (not n.is_head, not n.alive, n.node_id))


def node_id() -> str:
    """Id of the Ray node running this process ("local" outside Ray)."""
    import ray

    return ray.get_runtime_context().get_node_id() if ray.is_initialized() else "local"


def unshared_path_message(who: str, what: str, path: str | Path) -> str:
    """The error a Ray worker raises when a path the driver wrote is not on its node."""
    return (
        f"{who} on Ray node {node_id()[:8]} cannot read the {what} at {path}: the driver wrote it on its own disk. "
        "On a multi-machine cluster, ESSAFLOW_CACHE_DIR must be one volume mounted on the driver and every Ray node "
        "(infra/: the run-cache volume, infra/k8s/cache-pvc.yaml)"
    )


def work_by_node(node_ids: Iterable[str]) -> dict[str, int]:
    """How many results came from each node (pass the node id every task reported), most first."""
    return dict(Counter(node_ids).most_common())


def _fmt(res: Mapping[str, float], extra: Iterable[str] = ()) -> str:
    """CPU and GPU (always, 0 included) and the ``extra`` custom resources of ``res``, e.g. ``{CPU: 2, GPU: 0}``."""
    keys = ["CPU", "GPU", *sorted(k for k in extra if k not in ("CPU", "GPU"))]
    return "{" + ", ".join(f"{k}: {res.get(k, 0.0):g}" for k in keys) + "}"


def _asked(workers: int, bundle: Mapping[str, float], strategy: str) -> str:
    return f"{workers} worker{'s' if workers != 1 else ''} x {_fmt(bundle, bundle)} ({strategy})"


def _fits(node: Mapping[str, float], bundle: Mapping[str, float]) -> int:
    """How many copies of ``bundle`` fit on a node with resources ``node``."""
    return min(int(node.get(k, 0.0) / v + 1e-9) for k, v in bundle.items())


def check_capacity(workers: int, bundle: Mapping[str, float], nodes: list[Mapping[str, float]], strategy: str) -> None:
    """Raise ClusterCapacityError when ``workers`` copies of ``bundle`` can never be placed on nodes of these total
    resources under ``strategy`` (a pure check: no Ray call)."""
    if strategy not in STRATEGIES:
        raise ValueError(f"strategy={strategy!r}; one of {STRATEGIES}")
    if workers < 1:
        raise ValueError(f"workers={workers} must be >= 1")
    totals: dict[str, float] = {}
    for n in nodes:
        for k, v in n.items():
            totals[k] = totals.get(k, 0.0) + v
    asked = _asked(workers, bundle, strategy)
    has = f"the cluster has {_fmt(totals, bundle)} on {len(nodes)} alive node(s): " + ", ".join(
        _fmt(n, bundle) for n in nodes
    )
    per_node = [_fits(n, bundle) for n in nodes]
    if not any(per_node):
        raise ClusterCapacityError(f"{asked}: no node can hold even one worker; {has}")
    if strategy == "STRICT_PACK" and max(per_node) < workers:
        raise ClusterCapacityError(f"{asked}: no single node holds them all; {has}")
    if strategy == "STRICT_SPREAD" and sum(1 for f in per_node if f) < workers:
        raise ClusterCapacityError(f"{asked}: needs {workers} distinct nodes that can each hold one; {has}")
    if sum(per_node) < workers:
        raise ClusterCapacityError(f"{asked}: at most {sum(per_node)} fit; {has}")


def placement_group_for(
    workers: int,
    cpus_per_worker: float = 1.0,
    gpus_per_worker: float = 0.0,
    *,
    strategy: str = "SPREAD",
    timeout_s: float = 60.0,
    resources: Mapping[str, float] | None = None,
    autoscaling: bool = False,
    name: str = "",
):
    """Reserve one bundle per worker (ESSA population workers, GRPO train ranks) and wait until it is placed.

    SPREAD puts workers on as many nodes as possible (a node failure takes fewer of them); PACK fills nodes first
    (less cross-node traffic: right for DDP). Before anything is created the request is checked against the alive
    nodes' totals (unless ``autoscaling``: the cluster may grow); if it fits in principle but other work holds the
    resources, the group is removed after ``timeout_s`` and the error says what is available now.
    """
    import ray
    from ray.util.placement_group import placement_group, remove_placement_group

    bundle = bundle_for(cpus_per_worker, gpus_per_worker, resources)
    nodes = describe_cluster()
    if not autoscaling:
        check_capacity(workers, bundle, [n.resources for n in nodes], strategy)
    elif strategy not in STRATEGIES:
        raise ValueError(f"strategy={strategy!r}; one of {STRATEGIES}")
    pg = placement_group([dict(bundle) for _ in range(workers)], strategy=strategy, name=name)
    if not pg.wait(timeout_seconds=timeout_s):
        remove_placement_group(pg)
        raise ClusterCapacityError(
            f"{_asked(workers, bundle, strategy)} not placed within {timeout_s:g}s: available now "
            f"{_fmt(ray.available_resources(), bundle)} of {_fmt(ray.cluster_resources(), bundle)}; "
            "other work holds the rest"
        )
    return pg


def worker_options(pg, index: int, num_cpus: float = 1.0, num_gpus: float = 0.0) -> dict[str, Any]:
    """``.options(**...)`` for the worker in bundle ``index`` of ``pg``: its resources and its place.

    Tasks the worker starts stay in the group (captured), so a worker's helpers never escape onto other nodes.
    """
    from ray.util.scheduling_strategies import PlacementGroupSchedulingStrategy

    return {
        **worker_resources(num_cpus, num_gpus),
        "scheduling_strategy": PlacementGroupSchedulingStrategy(
            placement_group=pg, placement_group_bundle_index=index, placement_group_capture_child_tasks=True
        ),
    }
