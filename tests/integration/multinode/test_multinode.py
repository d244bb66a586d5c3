"""Two real Ray nodes on one machine (conftest.py beside this file), joined with token auth.

Proves: SPREAD places workers on both nodes and STRICT_PACK on one; workers on every node get the driver's
settings through the job's runtime_env while no secret reaches any Ray log; a request the cluster cannot meet fails
at once (or after its timeout when other work holds the resources) naming what exists; a node whose raylet is killed
mid-task is detected, and the retried task completes on the head.
"""

from __future__ import annotations

import os
import time
from collections import Counter
from pathlib import Path

import pytest
import ray
from ray.util.placement_group import remove_placement_group
from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

from essaflow import cluster
from essaflow.cluster import ClusterCapacityError
from tests.support.waiting import wait_until

pytestmark = [pytest.mark.integration, pytest.mark.timeout(300)]


@ray.remote(num_cpus=0.5)
def where(delay: float = 0.0) -> str:
    time.sleep(delay)
    return ray.get_runtime_context().get_node_id()


@ray.remote(num_cpus=0.5)
def worker_view(keys: list[str]) -> tuple[str, dict[str, str | None]]:
    return ray.get_runtime_context().get_node_id(), {k: os.environ.get(k) for k in keys}


@ray.remote(num_cpus=1, max_retries=2)
def slow_on(victim: str, marker_dir: str) -> str:
    """Takes forever on ``victim``, returns at once elsewhere; each attempt leaves a marker file."""
    node = ray.get_runtime_context().get_node_id()
    Path(marker_dir, f"{node}.{os.getpid()}").touch()
    if node == victim:
        time.sleep(600)
    return node


def _wait_until_all_cpus_are_free(timeout_s: float = 30.0) -> None:
    wait_until(lambda: ray.available_resources().get("CPU", 0) >= ray.cluster_resources()["CPU"], timeout_s,
               "every CPU free after the groups were removed", every=0.1)  # fmt: skip


def test_two_nodes_join_with_token_auth(two_nodes):
    nodes = cluster.describe_cluster()
    assert [n.is_head for n in nodes] == [True, False]
    assert [n.cpus for n in nodes] == [1.0, 1.0]
    assert two_nodes.connection.auth_mode == "token"
    starts = {n.name: round(n.start_s, 1) for n in two_nodes.cluster.nodes}
    print(f"\nstart-up: {starts} s until each answered; driver joined and saw 2 nodes after {two_nodes.join_s:.1f} s")


def test_spread_places_workers_on_both_nodes_and_strict_pack_on_one(two_nodes):
    nodes = {n.node_id for n in cluster.describe_cluster()}
    spread = cluster.placement_group_for(2, cpus_per_worker=0.5, strategy="SPREAD", timeout_s=60)
    try:
        ids = ray.get([where.options(**cluster.worker_options(spread, i, num_cpus=0.5)).remote(0.5) for i in range(2)])
    finally:
        remove_placement_group(spread)
    assert set(ids) == nodes
    # STRICT_PACK, not PACK: PACK is best effort and spreads while the group above is still being removed
    pack = cluster.placement_group_for(2, cpus_per_worker=0.5, strategy="STRICT_PACK", timeout_s=60)
    try:
        packed = ray.get([where.options(**cluster.worker_options(pack, i, num_cpus=0.5)).remote() for i in range(2)])
    finally:
        remove_placement_group(pack)
    assert len(set(packed)) == 1
    _wait_until_all_cpus_are_free()  # a removed group frees its node's CPU asynchronously; SPREAD skips a full node
    counts: Counter[str] = Counter()
    rounds = 0

    def a_round_reached_both_nodes() -> bool:  # SPREAD is best effort: at load 8 one round of 6 all ran on the head
        nonlocal rounds
        counts.update(cluster.work_by_node(ray.get([where.options(scheduling_strategy="SPREAD").remote(0.3)
                                                    for _ in range(6)])))  # fmt: skip
        rounds += 1
        return set(counts) == nodes

    wait_until(a_round_reached_both_nodes, 30, lambda: f"SPREAD tasks on both nodes: {dict(counts)}", every=1.0)
    print(f"\nSPREAD bundles on {len(set(ids))} nodes, STRICT_PACK on 1; tasks per node: {list(counts.values())} "
          f"after {rounds} round(s) of 6")  # fmt: skip


def test_workers_on_every_node_get_driver_settings_and_no_secret_reaches_ray_logs(two_nodes):
    keys = sorted(two_nodes.worker_env)
    pg = cluster.placement_group_for(2, cpus_per_worker=0.5, strategy="STRICT_SPREAD", timeout_s=60)
    try:
        views = ray.get([worker_view.options(**cluster.worker_options(pg, i, 0.5)).remote(keys) for i in range(2)])
    finally:
        remove_placement_group(pg)
    assert len({node for node, _ in views}) == 2
    for _, seen in views:
        assert seen == two_nodes.worker_env  # secrets included: they arrive through the setup hook
    assert set(two_nodes.connection.secret_keys) == {"AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY"}
    assert "PREFECT_API_URL" in two_nodes.connection.env_keys

    secrets = [two_nodes.secret, two_nodes.worker_env["AWS_ACCESS_KEY_ID"]]
    files = two_nodes.cluster.log_files()
    texts = {p: p.read_bytes().decode(errors="replace") for p in files}
    assert not [str(p) for p, t in texts.items() if any(s in t for s in secrets)]
    # the scan does read what Ray logs about runtime envs: the plain settings are there, on both nodes
    plain = two_nodes.worker_env["PREFECT_API_URL"]
    assert len([p for p, t in texts.items() if p.name == "runtime_env_agent.log" and plain in t]) == 2
    driver_log = "\n".join(two_nodes.log_lines)
    assert "AWS_SECRET_ACCESS_KEY" in driver_log and not any(s in driver_log for s in secrets)


def test_requests_the_cluster_cannot_meet_fail_naming_what_it_has(two_nodes):
    t0 = time.monotonic()
    with pytest.raises(ClusterCapacityError, match=r"no node can hold even one worker.*CPU: 2"):
        cluster.placement_group_for(1, cpus_per_worker=1, gpus_per_worker=1)
    with pytest.raises(ClusterCapacityError, match="at most 2 fit"):
        cluster.placement_group_for(3, cpus_per_worker=1)
    with pytest.raises(ClusterCapacityError, match="no single node holds them all"):
        cluster.placement_group_for(2, cpus_per_worker=1, strategy="STRICT_PACK")
    assert time.monotonic() - t0 < 5  # checked before anything is created: no waiting

    hold = cluster.placement_group_for(1, cpus_per_worker=1, timeout_s=60)  # other work holds one node's CPU
    try:
        t0 = time.monotonic()
        busy = r"not placed within 3s: available now \{CPU: 1, GPU: 0\} of \{CPU: 2, GPU: 0\}"
        with pytest.raises(ClusterCapacityError, match=busy):
            cluster.placement_group_for(2, cpus_per_worker=1, timeout_s=3)
        assert 3 <= time.monotonic() - t0 < 15
    finally:
        remove_placement_group(hold)


def test_killed_node_is_detected_and_the_retried_task_completes_on_the_head(two_nodes, tmp_path):
    head, victim = (n.node_id for n in cluster.describe_cluster())
    strategy = NodeAffinitySchedulingStrategy(victim, soft=True)  # soft: a retry may go elsewhere
    ref = slow_on.options(scheduling_strategy=strategy).remote(victim, str(tmp_path))
    wait_until(lambda: list(tmp_path.glob(f"{victim}.*")), 60, "the task to start on the second node", every=0.2)

    t_kill = time.monotonic()
    two_nodes.cluster.kill_raylet(two_nodes.cluster.nodes[-1])
    detect_s = two_nodes.cluster.wait_for_alive(1, timeout=60)
    assert ray.get(ref, timeout=120) == head
    done_s = time.monotonic() - t_kill
    attempts = sorted(p.name.split(".")[0] for p in tmp_path.iterdir())
    assert sorted(attempts) == sorted([head, victim])
    dead = [n for n in cluster.describe_cluster(include_dead=True) if not n.alive]
    assert [n.node_id for n in dead] == [victim]
    print(f"\nraylet killed: node dead after {detect_s:.1f} s; retried task done on the head after {done_s:.1f} s")
