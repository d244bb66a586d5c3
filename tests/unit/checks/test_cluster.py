"""What training asks of Ray (pure), and when the preflight checks it."""

import pytest

from essaflow.checks.cluster import check_training_fits, joins_existing_cluster
from essaflow.cluster.request import TrainingRequest
from essaflow.config import load_config


def cfg(*overrides: str):
    return load_config(None, list(overrides))


def request(c, cluster_has_gpus: bool):
    """What the config asks of a cluster with (or without) GPUs; None when training uses no Ray."""
    asked = c.cluster_request()
    return None if asked is None else asked.on(cluster_has_gpus)


def fits(c):
    return check_training_fits(c.cluster_request(), c.ray_address)


def test_essa_workers_take_whole_gpus_only_where_the_cluster_has_them():
    c = cfg("method=essa", "essa.workers.count=16")
    assert c.cluster_request() == TrainingRequest(16, 1.0, None, "SPREAD")  # settled by the cluster it meets
    assert request(c, cluster_has_gpus=True) == TrainingRequest(16, 1.0, 1.0, "SPREAD")
    assert request(c, cluster_has_gpus=False) == TrainingRequest(16, 1.0, 0.0, "SPREAD")
    packed = cfg(
        "method=essa", "essa.workers.count=8", "essa.workers.gpus=0.25", "essa.workers.placement_strategy=PACK"
    )
    assert request(packed, cluster_has_gpus=True) == TrainingRequest(8, 1.0, 0.25, "PACK")
    assert str(request(packed, True)) == "8 x {CPU: 1, GPU: 0.25} (PACK)"
    assert request(cfg("method=essa", "essa.workers.ray=false"), True) is None


def test_grpo_ranks_follow_the_device_setting():
    c = cfg("method=fgrpo", "grpo.workers.count=4", "grpo.prompts_per_step=32")
    assert request(c, cluster_has_gpus=True) == TrainingRequest(4, 1.0, 1.0, "PACK")
    assert request(c, cluster_has_gpus=False).gpus == 0.0
    cpu = cfg("method=fgrpo", "grpo.workers.count=4", "grpo.device=cpu")
    assert request(cpu, cluster_has_gpus=True).gpus == 0.0
    assert request(cfg("method=fgrpo"), True) is None  # one worker runs in process
    assert request(cfg("method=fgrpo", "grpo.workers.ray=true"), False).workers == 1
    assert request(cfg("method=none"), True) is None


def test_only_a_joined_cluster_is_checked(monkeypatch):
    monkeypatch.delenv("RAY_ADDRESS", raising=False)
    assert not joins_existing_cluster(cfg().ray_address)
    assert fits(cfg("method=essa")) is None  # a new local Ray is sized for the run: no connect
    assert joins_existing_cluster(cfg("ray_address=10.1.2.3:6379").ray_address)
    monkeypatch.setenv("RAY_ADDRESS", "10.1.2.3:6379")
    assert joins_existing_cluster(cfg().ray_address)
    assert not joins_existing_cluster(cfg("ray_address=local").ray_address)


@pytest.mark.parametrize("method", ["essa", "fgrpo"])
def test_preflight_is_skipped_when_training_needs_no_ray(method, monkeypatch):
    monkeypatch.setenv("RAY_ADDRESS", "127.0.0.1:1")  # nothing listens: a connect attempt would fail
    extra = "essa.workers.ray=false" if method == "essa" else "grpo.workers.count=1"
    assert fits(cfg(f"method={method}", extra)) is None
