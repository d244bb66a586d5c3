"""essaflow.cluster without a cluster: which settings are secrets, what workers get and how, what is logged, resource
requests (GPU shares included: the CPU-visible half of the GPU paths) and the capacity check that replaces a hang."""

from __future__ import annotations

import logging
import os
import sys
import types

import pytest

from essaflow import cluster
from essaflow.cluster import ClusterCapacityError, check_capacity

SECRET = "wJalrXUtnFEMI-K7MDENG-bPxRfiCYEXAMPLEKEY"


@pytest.mark.parametrize(
    ("key", "value", "secret"),
    [
        ("AWS_SECRET_ACCESS_KEY", "x", True),
        ("AWS_ACCESS_KEY_ID", "AKIA", True),
        ("AWS_SESSION_TOKEN", "x", True),
        ("PREFECT_API_KEY", "pnu_x", True),
        ("MLFLOW_TRACKING_PASSWORD", "x", True),
        ("HF_TOKEN", "hf_x", True),
        ("RAY_AUTH_TOKEN", "x", True),
        ("PGPASSWORD", "x", True),
        ("DB_PASS", "x", True),
        ("GITHUB_AUTHTOKEN", "x", True),
        ("TOKENIZERS_PARALLELISM", "false", False),
        ("S3_BUCKET", "essaflow", False),
        ("RAY_AUTH_MODE", "token", False),
        ("PREFECT_API_URL", "http://127.0.0.1:4200/api", False),
        ("AWS_ENDPOINT_URL_S3", "http://127.0.0.1:8333", False),
        ("ESSAFLOW_STORAGE_URI", "s3://bucket/prefix", False),
        ("MLFLOW_TRACKING_URI", "https://user:pw@mlflow.internal", True),  # a password in a URL
        ("MLFLOW_TRACKING_URI", "https://user@mlflow.internal", False),
    ],
)
def test_is_secret_by_name_words_or_url_password(key, value, secret):
    assert cluster.is_secret(key, value) is secret


def test_redacted_masks_secrets_and_url_passwords_only():
    env = {
        "AWS_SECRET_ACCESS_KEY": SECRET,
        "MLFLOW_TRACKING_URI": f"postgresql://mlflow:{SECRET}@db:5432/mlflow",
        "PREFECT_API_URL": "http://127.0.0.1:4200/api",
        "ESSAFLOW_CACHE_URL": f"redis://:{SECRET}@cache:6379/0",
    }
    out = cluster.redacted(env)
    assert SECRET not in repr(out)
    assert out == {
        "AWS_SECRET_ACCESS_KEY": "***",
        "MLFLOW_TRACKING_URI": "postgresql://mlflow:***@db:5432/mlflow",
        "PREFECT_API_URL": "http://127.0.0.1:4200/api",
        "ESSAFLOW_CACHE_URL": "redis://:***@cache:6379/0",
    }


def test_select_env_takes_what_workers_need_and_never_ray_settings():
    env = {
        "PREFECT_API_URL": "a",
        "MLFLOW_TRACKING_URI": "b",
        "ESSAFLOW_STORAGE_URI": "c",
        "AWS_ENDPOINT_URL_S3": "d",
        "AWS_REGION": "e",
        "AWS_SECRET_ACCESS_KEY": "f",
        "RAY_AUTH_TOKEN": "g",
        "RAY_ADDRESS": "h",
        "HOME": "/root",
        "PATH": "/bin",
    }
    assert set(cluster.select_env(env)) == {
        "PREFECT_API_URL",
        "MLFLOW_TRACKING_URI",
        "ESSAFLOW_STORAGE_URI",
        "AWS_ENDPOINT_URL_S3",
        "AWS_REGION",
        "AWS_SECRET_ACCESS_KEY",
    }
    assert cluster.select_env(env, ["HOME"]) == {"HOME": "/root"}
    assert cluster.select_env(env, ["RAY_*"]) == {}


def test_runtime_env_sends_plain_settings_as_env_vars_and_secrets_only_through_the_setup_hook(monkeypatch):
    env = {"PREFECT_API_URL": "http://p/api", "AWS_SECRET_ACCESS_KEY": SECRET}
    rt = cluster.runtime_env_for(env, base={"env_vars": {"PYTHONPATH": "/src"}, "pip": ["x"]})
    assert rt["env_vars"] == {"PREFECT_API_URL": "http://p/api", "PYTHONPATH": "/src"}
    assert rt["pip"] == ["x"]
    hook = rt["worker_process_setup_hook"]
    assert callable(hook) and SECRET not in repr(rt)
    monkeypatch.delenv("AWS_SECRET_ACCESS_KEY", raising=False)
    hook()  # what a Ray worker runs before its first task
    assert os.environ["AWS_SECRET_ACCESS_KEY"] == SECRET

    import ray.cloudpickle

    # the hook travels pickled through the GCS: it must survive the round trip with its values
    monkeypatch.delenv("AWS_SECRET_ACCESS_KEY")
    ray.cloudpickle.loads(ray.cloudpickle.dumps(hook))()
    assert os.environ["AWS_SECRET_ACCESS_KEY"] == SECRET


def test_runtime_env_without_secrets_has_no_hook_and_refuses_secret_env_vars():
    assert cluster.runtime_env_for({"PREFECT_API_URL": "u"}) == {"env_vars": {"PREFECT_API_URL": "u"}}
    assert cluster.runtime_env_for({}) == {}
    with pytest.raises(ValueError, match="AWS_SECRET_ACCESS_KEY"):
        cluster.runtime_env_for({}, base={"env_vars": {"AWS_SECRET_ACCESS_KEY": SECRET}})
    with pytest.raises(ValueError, match="setup_hook"):
        cluster.runtime_env_for({"HF_TOKEN": "t"}, base={"worker_process_setup_hook": "my.module.setup"})


class FakeRay(types.ModuleType):
    """Stands in for `ray` in connect(): records ray.init's arguments."""

    def __init__(self, initialized: bool = False):
        super().__init__("ray")
        self.calls: list[dict] = []
        self.initialized = initialized

    def is_initialized(self) -> bool:
        return self.initialized

    def init(self, **kwargs):
        self.calls.append(kwargs)
        self.initialized = True

    def get_runtime_context(self):
        return types.SimpleNamespace(gcs_address="10.0.0.5:6379")


@pytest.fixture
def fake_ray(monkeypatch):
    fake = FakeRay()
    monkeypatch.setitem(sys.modules, "ray", fake)
    # the real Ray's per-process auth cache stays untouched: other tests in this process may start a local Ray
    monkeypatch.setattr(cluster.connection, "reload_ray_auth", lambda: fake.calls.append({"reload_auth": True}))
    # no head listens at the addresses these tests join: the port probe is what tests/unit/cluster/test_address.py
    # checks against real sockets
    monkeypatch.setattr(cluster.connection, "check_reachable", lambda address, source: None)
    for k in ("RAY_ADDRESS", "RAY_AUTH_MODE", "RAY_AUTH_TOKEN_PATH", "AWS_ACCESS_KEY_ID"):
        monkeypatch.delenv(k, raising=False)  # restored at teardown, whatever connect() sets
    monkeypatch.setenv("PREFECT_API_URL", "http://prefect:4200/api")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", SECRET)
    return fake


def test_connect_joins_ray_address_with_token_auth_and_logs_key_names_only(fake_ray, monkeypatch, tmp_path, caplog):
    monkeypatch.setenv("RAY_ADDRESS", "10.0.0.5:6379")
    token = tmp_path / "token"
    token.write_text("t0k3n")
    with caplog.at_level(logging.INFO, logger="essaflow.cluster"):
        conn = cluster.connect(auth_token_path=token, num_cpus=4)
    reload, call = fake_ray.calls  # Ray's cached auth settings were refreshed before ray.init
    assert reload == {"reload_auth": True}
    assert call["address"] == "10.0.0.5:6379" and "num_cpus" not in call  # a cluster's nodes declare resources
    assert os.environ["RAY_AUTH_MODE"] == "token" and os.environ["RAY_AUTH_TOKEN_PATH"] == str(token)
    assert call["runtime_env"]["env_vars"]["PREFECT_API_URL"] == "http://prefect:4200/api"
    assert "AWS_SECRET_ACCESS_KEY" not in call["runtime_env"]["env_vars"]
    assert conn.secret_keys == ("AWS_SECRET_ACCESS_KEY",) and not conn.local and conn.auth_mode == "token"
    assert "AWS_SECRET_ACCESS_KEY" in caplog.text and "PREFECT_API_URL" in caplog.text
    assert SECRET not in caplog.text and SECRET not in repr(conn)


@pytest.mark.parametrize("ray_address", [None, "local"])
def test_connect_without_an_address_starts_a_new_local_ray(fake_ray, monkeypatch, ray_address):
    if ray_address:
        monkeypatch.setenv("RAY_ADDRESS", ray_address)
    conn = cluster.connect(num_cpus=2)
    # auth cache refreshed (a stale token from an earlier cluster is not reused), then again with token auth on
    *reloads, call = fake_ray.calls
    assert reloads == [{"reload_auth": True}] * 2
    # "local" and not None: ray.init() would otherwise join the last `ray start` cluster of this machine
    assert call["address"] == "local" and call["num_cpus"] == 2 and call["include_dashboard"] is False
    # token auth, as ray.init turns it on for a new local Ray, but set beforehand: Ray prints no warning then
    assert conn.local and os.environ["RAY_AUTH_MODE"] == "token" == conn.auth_mode


def test_a_new_local_ray_keeps_the_auth_mode_the_user_set(fake_ray, monkeypatch):
    monkeypatch.setenv("RAY_AUTH_MODE", "disabled")
    conn = cluster.connect(num_cpus=2)
    assert [c for c in fake_ray.calls if "reload_auth" in c] == [{"reload_auth": True}]
    assert conn.local and os.environ["RAY_AUTH_MODE"] == "disabled" == conn.auth_mode


def test_connect_when_already_connected_changes_nothing(fake_ray, caplog):
    fake_ray.initialized = True
    with caplog.at_level(logging.WARNING, logger="essaflow.cluster"):
        conn = cluster.connect("10.0.0.9:6379")
    assert fake_ray.calls == [] and conn.address == "10.0.0.5:6379"
    assert "already connected" in caplog.text


def test_worker_resources_follow_rays_rules():
    assert cluster.worker_resources(2, 0.5) == {"num_cpus": 2.0, "num_gpus": 0.5}
    assert cluster.worker_resources(1, 4) == {"num_cpus": 1.0, "num_gpus": 4.0}
    with pytest.raises(ValueError, match="fractions only below 1"):
        cluster.worker_resources(1, 1.5)
    with pytest.raises(ValueError, match=">= 0"):
        cluster.worker_resources(-1, 0)


def test_gpu_share_per_worker():
    assert cluster.gpus_per_worker(1) == 1.0
    assert cluster.gpus_per_worker(4) == 0.25
    for bad in (0, 1.5, -2):
        with pytest.raises(ValueError):
            cluster.gpus_per_worker(bad)


def test_bundle_leaves_out_zero_resources():
    assert cluster.bundle_for(1, 0) == {"CPU": 1.0}
    assert cluster.bundle_for(0, 1) == {"GPU": 1.0}
    assert cluster.bundle_for(2, 1, {"accelerator_type:H100": 0.001}) == {
        "CPU": 2.0,
        "GPU": 1.0,
        "accelerator_type:H100": 0.001,
    }
    with pytest.raises(ValueError, match="some resource"):
        cluster.bundle_for(0, 0)


GPU_NODES = [{"CPU": 16.0, "GPU": 8.0}, {"CPU": 16.0, "GPU": 8.0}]


def test_capacity_of_two_eight_gpu_nodes():
    one_gpu = cluster.bundle_for(1, 1)
    check_capacity(16, one_gpu, GPU_NODES, "SPREAD")
    check_capacity(8, one_gpu, GPU_NODES, "STRICT_PACK")
    check_capacity(2, one_gpu, GPU_NODES, "STRICT_SPREAD")
    check_capacity(64, cluster.bundle_for(0.25, cluster.gpus_per_worker(4)), GPU_NODES, "PACK")
    with pytest.raises(ClusterCapacityError, match="at most 16 fit") as e:
        check_capacity(17, one_gpu, GPU_NODES, "SPREAD")
    assert "17 workers x {CPU: 1, GPU: 1} (SPREAD)" in str(e.value)
    assert "the cluster has {CPU: 32, GPU: 16} on 2 alive node(s)" in str(e.value)
    with pytest.raises(ClusterCapacityError, match="no single node holds them all"):
        check_capacity(9, one_gpu, GPU_NODES, "STRICT_PACK")
    with pytest.raises(ClusterCapacityError, match="needs 3 distinct nodes"):
        check_capacity(3, one_gpu, GPU_NODES, "STRICT_SPREAD")


def test_capacity_counts_every_resource_of_a_bundle():
    # CPUs run out before GPUs: 4 CPUs hold 2 workers of {CPU: 2, GPU: 1} although 8 GPUs are free
    with pytest.raises(ClusterCapacityError, match="at most 2 fit"):
        check_capacity(3, cluster.bundle_for(2, 1), [{"CPU": 4.0, "GPU": 8.0}], "PACK")


def test_gpus_asked_of_a_cpu_cluster_fail_naming_both():
    with pytest.raises(ClusterCapacityError) as e:
        check_capacity(1, cluster.bundle_for(1, 1), [{"CPU": 2.0}], "SPREAD")
    assert str(e.value) == (
        "1 worker x {CPU: 1, GPU: 1} (SPREAD): no node can hold even one worker; "
        "the cluster has {CPU: 2, GPU: 0} on 1 alive node(s): {CPU: 2, GPU: 0}"
    )


def test_capacity_rejects_nonsense():
    with pytest.raises(ValueError, match="strategy"):
        check_capacity(1, {"CPU": 1.0}, GPU_NODES, "EVERYWHERE")
    with pytest.raises(ValueError, match="workers"):
        check_capacity(0, {"CPU": 1.0}, GPU_NODES, "PACK")


def test_work_by_node_counts_most_first():
    assert cluster.work_by_node(["b", "a", "b", "b", "a", "c"]) == {"b": 3, "a": 2, "c": 1}
