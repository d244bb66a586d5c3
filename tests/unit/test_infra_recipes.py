"""The deployment recipes in infra/, checked as far as a machine without Docker or Kubernetes allows.

- docker-compose.yml: the services of the full stack, a healthcheck on each (and `depends_on` only on healthy ones),
  every published port bound to 127.0.0.1, no credential written into the file, Ray token auth on every Ray process.
- KubeRay RayCluster / RayJob: the fields the ray.io/v1 CRDs require (no CRD schema offline: checked explicitly),
  GPU limits, token auth from a Secret, the same Ray version as the image and the drivers, a runnable entrypoint.
- The Prefect Kubernetes work pool's base job template: accepted by Prefect's own validator, a superset of Prefect's
  default Kubernetes template, renders to a Job that reads its secrets from Kubernetes Secrets.
- Dockerfile: structural checks (hadolint, a process, runs in tests/integration/test_dockerfile_lint.py).
"""

from __future__ import annotations

import json
import re
import shlex
from pathlib import Path
from typing import Any

import pytest
import yaml

from essaflow.cluster import is_secret

REPO = Path(__file__).resolve().parents[2]
INFRA = REPO / "infra"
INTERPOLATION = re.compile(r"^\$\{[A-Z0-9_]+(:?[?-][^}]*)?\}$")
URL_PASSWORD = re.compile(r"://[^/:@\s]+:([^@\s]+)@")


def load_yaml(name: str) -> Any:
    return yaml.safe_load((INFRA / name).read_text())


def dockerfile_arg(name: str) -> str:
    m = re.search(rf"^ARG {name}=(\S+)$", (INFRA / "Dockerfile").read_text(), re.M)
    assert m, f"infra/Dockerfile has no ARG {name}"
    return m.group(1)


def walk(node: Any, path: str = ""):
    """Every (path, key, value) of a nested YAML/JSON structure whose value is a scalar."""
    if isinstance(node, dict):
        for k, v in node.items():
            yield from walk(v, f"{path}.{k}")
            if not isinstance(v, dict | list):
                yield path, str(k), v
    elif isinstance(node, list):
        for i, v in enumerate(node):
            yield from walk(v, f"{path}[{i}]")


# ------------------------------------------------------------------------------------------------------- compose


@pytest.fixture(scope="module")
def compose() -> dict:
    return load_yaml("docker-compose.yml")


def _env(service: dict) -> dict[str, str]:
    env = service.get("environment") or {}
    if isinstance(env, list):
        env = dict(item.split("=", 1) for item in env)
    return {k: str(v) for k, v in env.items()}


def _command(service: dict) -> list[str]:
    cmd = service.get("command") or []
    return shlex.split(cmd) if isinstance(cmd, str) else [str(c) for c in cmd]


REQUIRED_SERVICES = {"prefect-db", "prefect-server", "mlflow-db", "mlflow", "seaweedfs", "ray-head", "ray-worker"}


def test_compose_has_the_full_stack_with_a_healthcheck_on_every_service(compose):
    assert "version" not in compose  # obsolete in the Compose Specification
    services = compose["services"]
    assert set(services) >= REQUIRED_SERVICES
    for name, svc in services.items():
        test = (svc.get("healthcheck") or {}).get("test")
        assert test and test[0] in ("CMD", "CMD-SHELL"), f"{name} has no healthcheck"
        for dep, cond in (svc.get("depends_on") or {}).items():
            assert dep in services, f"{name} depends on unknown {dep}"
            assert cond == {"condition": "service_healthy"}, f"{name} starts before {dep} is healthy"


def test_compose_wires_prefect_and_mlflow_to_postgres_and_s3(compose):
    s = compose["services"]
    prefect = _env(s["prefect-server"])
    assert prefect["PREFECT_SERVER_DATABASE_DRIVER"] == "postgresql+asyncpg"
    assert prefect["PREFECT_SERVER_DATABASE_HOST"] == "prefect-db"
    assert s["prefect-db"]["image"].startswith("postgres:") and s["mlflow-db"]["image"].startswith("postgres:")
    mlflow = _command(s["mlflow"])
    assert "--backend-store-uri=postgresql://mlflow@mlflow-db:5432/mlflow" in mlflow
    assert any(a.startswith("--artifacts-destination=s3://") for a in mlflow)
    assert _env(s["mlflow"])["MLFLOW_S3_ENDPOINT_URL"] == "http://seaweedfs:8333"
    assert "--port=6379" in _command(s["ray-head"]) and "--address=ray-head:6379" in _command(s["ray-worker"])
    assert _env(s["prefect-worker"])["RAY_ADDRESS"] == "ray-head:6379"


def _ports(svc: dict) -> list[tuple[str | None, str]]:
    out = []
    for p in svc.get("ports") or []:
        if isinstance(p, dict):
            out.append((p.get("host_ip"), str(p.get("published"))))
        else:
            parts = str(p).split(":")
            out.append((parts[0] if len(parts) == 3 else None, parts[-2] if len(parts) >= 2 else parts[0]))
    return out


def test_compose_publishes_ports_on_127_0_0_1_only_and_databases_not_at_all(compose):
    published = 0
    for name, svc in compose["services"].items():
        assert "network_mode" not in svc, f"{name}: host networking would bypass the 127.0.0.1 bindings"
        for host_ip, port in _ports(svc):
            assert host_ip == "127.0.0.1", f"{name} publishes {port} on {host_ip or 'every interface'}"
            published += 1
    assert published >= 5
    assert not compose["services"]["prefect-db"].get("ports") and not compose["services"]["mlflow-db"].get("ports")


def test_compose_holds_no_credential_and_every_one_is_required_from_the_env_file(compose):
    required = set()
    for path, key, value in walk(compose):
        value = str(value)
        if is_secret(key, value):
            assert INTERPOLATION.match(value), f"{path}.{key} holds a literal credential"
        for password in URL_PASSWORD.findall(value):
            assert password.startswith("${"), f"{path}.{key}: a password written into a URL"
        required |= set(re.findall(r"\$\{([A-Z0-9_]+):\?", value))
    assert {"PREFECT_DB_PASSWORD", "MLFLOW_DB_PASSWORD", "S3_SECRET_KEY", "RAY_AUTH_TOKEN"} <= required
    example = dict(line.split("=", 1) for line in (INFRA / ".env.example").read_text().splitlines() if "=" in line[:40])
    assert required <= set(example), f"missing from .env.example: {required - set(example)}"
    assert all(not example[k].strip() for k in example if is_secret(k)), ".env.example must not carry secrets"
    assert ".env" in (INFRA / ".gitignore").read_text().split()


def test_compose_runs_every_ray_process_with_token_auth(compose):
    for name, svc in compose["services"].items():
        env, cmd = _env(svc), _command(svc)
        if cmd[:1] == ["ray"] or "RAY_ADDRESS" in env:
            assert env.get("RAY_AUTH_MODE") == "token", name
            assert INTERPOLATION.match(env.get("RAY_AUTH_TOKEN", "")), name


def test_compose_images_are_pinned(compose):
    for name, svc in compose["services"].items():
        image = svc["image"]
        tag = image.rsplit(":", 1)[1] if ":" in image.rsplit("/", 1)[-1] else ""
        assert tag and tag != "latest", f"{name}: {image} is not pinned to a tag"


def test_gpu_override_gives_the_ray_worker_nvidia_gpus():
    gpu = load_yaml("docker-compose.gpu.yml")
    (device,) = gpu["services"]["ray-worker"]["deploy"]["resources"]["reservations"]["devices"]
    assert device["driver"] == "nvidia" and "gpu" in device["capabilities"]


# ------------------------------------------------------------------------------------------------------- KubeRay


def _containers(template: dict) -> list[dict]:
    containers = template["spec"]["containers"]
    assert containers and all(c.get("name") and c.get("image") for c in containers)
    return containers


def _check_token_auth(container: dict) -> None:
    env = {e["name"]: e for e in container.get("env", [])}
    assert env["RAY_AUTH_MODE"]["value"] == "token", container["name"]
    ref = env["RAY_AUTH_TOKEN"]["valueFrom"]["secretKeyRef"]
    assert ref["key"] == "auth_token" and "value" not in env["RAY_AUTH_TOKEN"], container["name"]


def _check_pod_security(template: dict) -> None:
    ctx = template["spec"]["securityContext"]
    assert ctx["runAsNonRoot"] is True and ctx["runAsUser"] == dockerfile_uid()


def dockerfile_uid() -> int:
    users = re.findall(r"^USER (\S+)$", (INFRA / "Dockerfile").read_text(), re.M)
    return int(users[-1].split(":")[0])


def check_raycluster_spec(spec: dict) -> None:
    """The fields the ray.io/v1 RayCluster CRD requires, plus what an essaflow GPU cluster needs."""
    import ray

    assert spec["rayVersion"] == ray.__version__ == dockerfile_arg("RAY_VERSION")
    head = spec["headGroupSpec"]
    assert isinstance(head["rayStartParams"], dict)
    assert all(isinstance(v, str) for v in head["rayStartParams"].values()), "rayStartParams is map[string]string"
    for c in _containers(head["template"]):
        _check_token_auth(c)
    _check_pod_security(head["template"])
    groups = spec["workerGroupSpecs"]
    assert groups and len({g["groupName"] for g in groups}) == len(groups)
    for g in groups:
        assert isinstance(g["rayStartParams"], dict) and all(isinstance(v, str) for v in g["rayStartParams"].values())
        assert 0 <= g["minReplicas"] <= g.get("replicas", g["minReplicas"]) <= g["maxReplicas"], g["groupName"]
        _check_pod_security(g["template"])
        for c in _containers(g["template"]):
            _check_token_auth(c)
            limits, requests = c["resources"]["limits"], c["resources"].get("requests", {})
            assert int(limits["nvidia.com/gpu"]) >= 1, f"{g['groupName']}: no GPU limit"
            assert requests.get("nvidia.com/gpu", limits["nvidia.com/gpu"]) == limits["nvidia.com/gpu"]


def test_raycluster_manifest_has_the_crd_fields_and_gpu_workers():
    doc = load_yaml("k8s/raycluster.yaml")
    assert (doc["apiVersion"], doc["kind"]) == ("ray.io/v1", "RayCluster")
    assert doc["metadata"]["name"]
    check_raycluster_spec(doc["spec"])
    assert doc["spec"]["headGroupSpec"]["rayStartParams"]["num-cpus"] == "0"  # no training work on the head
    assert sum(g["maxReplicas"] * 8 for g in doc["spec"]["workerGroupSpecs"]) >= 128  # the 128-GPU target


def test_rayjob_manifest_has_the_crd_fields_and_a_runnable_entrypoint():
    import typer.main

    from cli.main import app
    from essaflow.config import load_config

    doc = load_yaml("k8s/rayjob.yaml")
    assert (doc["apiVersion"], doc["kind"]) == ("ray.io/v1", "RayJob")
    spec = doc["spec"]
    check_raycluster_spec(spec["rayClusterSpec"])
    assert spec["submissionMode"] in ("K8sJobMode", "HTTPMode", "InteractiveMode", "SidecarMode")
    assert isinstance(spec["shutdownAfterJobFinishes"], bool)
    for c in _containers(spec["submitterPodTemplate"]):
        _check_token_auth(c)
    env_vars = yaml.safe_load(spec["runtimeEnvYAML"])["env_vars"]
    assert not [k for k, v in env_vars.items() if is_secret(k, str(v))], "runtime_env values are printed in Ray logs"

    argv = shlex.split(spec["entrypoint"])
    assert argv[:2] == ["essaflow", "run"]
    ctx = typer.main.get_command(app).commands["run"].make_context("run", argv[2:])  # the CLI accepts the options
    cfg = load_config(REPO / ctx.params["config"], ctx.params["set_"])
    assert cfg.essa.workers.count == 16 and cfg.essa.workers.gpus == 1  # one population worker per GPU of 2 x 8


# ------------------------------------------------------------------------------------- Prefect Kubernetes work pool


@pytest.fixture(scope="module")
def pool_template() -> dict:
    return json.loads((INFRA / "k8s" / "prefect-work-pool.json").read_text())


def _prefect_default_kubernetes_template() -> dict:
    from importlib.resources import files

    metadata = files("prefect.server.api.collections_data") / "views" / "aggregate-worker-metadata.json"
    return json.loads(metadata.read_text())["prefect-kubernetes"]["kubernetes"]["default_base_job_configuration"]


def test_work_pool_template_passes_prefects_validation_and_extends_its_default(pool_template):
    from prefect.server.schemas.actions import WorkPoolCreate

    WorkPoolCreate(name="essaflow-k8s", type="kubernetes", base_job_template=pool_template)
    default = _prefect_default_kubernetes_template()
    assert set(pool_template["job_configuration"]) == set(default["job_configuration"])
    assert set(default["variables"]["properties"]) <= set(pool_template["variables"]["properties"])


def test_work_pool_variables_are_a_json_schema_their_defaults_satisfy(pool_template):
    import jsonschema

    schema = pool_template["variables"]
    jsonschema.Draft7Validator.check_schema(schema)
    defaults = {k: p["default"] for k, p in schema["properties"].items() if "default" in p}
    jsonschema.Draft7Validator(schema).validate(defaults)
    assert not [k for k, v in defaults["env"].items() if is_secret(k, v)], "secrets belong in credentials_secret"


def test_work_pool_job_reads_secrets_from_kubernetes_and_finds_the_raycluster(pool_template):
    from prefect.utilities.templating import apply_values

    schema = pool_template["variables"]
    values = {k: p["default"] for k, p in schema["properties"].items() if "default" in p}
    config = apply_values(pool_template["job_configuration"], values)
    job = config["job_manifest"]
    assert (job["apiVersion"], job["kind"]) == ("batch/v1", "Job")
    pod = job["spec"]["template"]
    (container,) = pod["spec"]["containers"]
    _check_token_auth(container)
    assert container["env"][1]["valueFrom"]["secretKeyRef"]["name"] == "essaflow-ray-auth"
    assert container["envFrom"] == [{"secretRef": {"name": "essaflow-credentials"}}]
    assert "{{" not in json.dumps(config)
    _check_pod_security(pod)
    cluster = load_yaml("k8s/raycluster.yaml")["metadata"]["name"]
    assert config["env"]["RAY_ADDRESS"].startswith(f"{cluster}-head-svc.")  # KubeRay's head Service name
    assert (
        container["image"]
        == load_yaml("k8s/raycluster.yaml")["spec"]["workerGroupSpecs"][0]["template"]["spec"]["containers"][0]["image"]
    )


# ---------------------------------------------------------------------------------------------------- Dockerfile


def _instructions() -> list[tuple[str, str]]:
    text = re.sub(r"\\\n", " ", (INFRA / "Dockerfile").read_text())
    lines = [ln.strip() for ln in text.splitlines() if ln.strip() and not ln.strip().startswith("#")]
    return [(ln.split(None, 1)[0].upper(), ln.split(None, 1)[1] if " " in ln else "") for ln in lines]


def test_dockerfile_pins_its_bases_runs_as_non_root_and_fetches_nothing_by_add():
    ins = _instructions()
    froms = [arg.split()[0] for op, arg in ins if op == "FROM"]
    assert froms[-1].startswith("nvidia/cuda:") and "cudnn-runtime" in froms[-1]  # the CUDA base
    for image in froms:
        name, _, tag = image.rpartition(":")
        assert name and tag and tag != "latest" and "$" not in image, f"FROM {image} is not pinned to a tag"
    users = [arg for op, arg in ins if op == "USER"]
    assert users and users[-1].split(":")[0].isdigit() and users[-1].split(":")[0] != "0"
    assert not [arg for op, arg in ins if op == "ADD" and "://" in arg]
    for op, arg in ins:
        if op in ("ARG", "ENV"):
            for key in re.findall(r"([A-Za-z_][A-Za-z0-9_]*)=", arg):
                assert not is_secret(key), f"{op} {key}: build args and env end up in the image history"


def test_dockerfile_installs_pinned_torch_the_package_and_the_clusters_ray():
    runs = " ".join(arg for op, arg in _instructions() if op == "RUN")
    assert '"torch==${TORCH_VERSION}"' in runs and "--index-url" in runs
    assert re.search(r'uv pip install [^&]*"\.\$\{EXTRAS', runs), "the essaflow package itself is installed"
    assert '"ray[default]==${RAY_VERSION}"' in runs
    import ray

    assert dockerfile_arg("RAY_VERSION") == ray.__version__  # drivers and cluster must run the same Ray
    python = tuple(int(x) for x in dockerfile_arg("PYTHON_VERSION").split("."))
    assert python >= (3, 10)
    ignore = (INFRA / "Dockerfile.dockerignore").read_text().split()
    assert ignore[ignore.index("**") if "**" in ignore else 0] == "**"  # allow-list: .venv, .git, infra/.env stay out
    copied = re.findall(r"^COPY (?!--from)(.+) \S+$", (INFRA / "Dockerfile").read_text(), re.M)
    for sources in copied:
        for src in sources.split():
            assert f"!{src}" in ignore or f"!{src}/**" in ignore, f"COPY {src} is not in the build context"


# ------------------------------------------------------------------------------ the run cache every Ray node shares
# The flow run is the Ray driver: it fetches the SFT adapter into ESSAFLOW_CACHE_DIR, ESSA workers load it from
# there, GRPO ranks write checkpoints and the trained adapter there. Driver and nodes must see one volume.


def image_cache_dir() -> str:
    m = re.search(r"ESSAFLOW_CACHE_DIR=(\S+)", (INFRA / "Dockerfile").read_text())
    assert m, "the image sets ESSAFLOW_CACHE_DIR"
    return m.group(1)


def test_compose_driver_and_every_ray_node_share_one_run_cache_volume(compose):
    cache = image_cache_dir()
    mounts = {}
    for name in ("prefect-worker", "ray-head", "ray-worker"):
        found = [v.split(":")[0] for v in compose["services"][name].get("volumes", []) if v.split(":")[1] == cache]
        assert len(found) == 1, f"{name} does not mount the run cache at {cache}"
        mounts[name] = found[0]
    (volume,) = set(mounts.values())
    assert volume in compose["volumes"]  # a named volume, not a host path
    assert f"chown -R essaflow:essaflow /opt/essaflow {cache}" in (INFRA / "Dockerfile").read_text()


def _cache_claims(template: dict) -> set[str]:
    """Claim names mounted at the image's cache dir in every container of a pod template."""
    volumes = {v["name"]: v for v in template["spec"].get("volumes", [])}
    claims = set()
    for c in template["spec"]["containers"]:
        names = [m["name"] for m in c.get("volumeMounts", []) if m["mountPath"] == image_cache_dir()]
        assert len(names) == 1, f"{c['name']} does not mount the run cache"
        claims.add(volumes[names[0]]["persistentVolumeClaim"]["claimName"])
    return claims


def test_k8s_flow_pods_and_every_ray_node_mount_the_same_read_write_many_claim(pool_template):
    from prefect.utilities.templating import apply_values

    pvc = load_yaml("k8s/cache-pvc.yaml")
    assert pvc["kind"] == "PersistentVolumeClaim" and pvc["spec"]["accessModes"] == ["ReadWriteMany"]
    claim = pvc["metadata"]["name"]
    for name in ("k8s/raycluster.yaml", "k8s/rayjob.yaml"):
        doc = load_yaml(name)
        spec = doc["spec"].get("rayClusterSpec", doc["spec"])
        templates = [spec["headGroupSpec"]["template"]] + [g["template"] for g in spec["workerGroupSpecs"]]
        for t in templates:
            assert _cache_claims(t) == {claim}, name
    values = {k: p["default"] for k, p in pool_template["variables"]["properties"].items() if "default" in p}
    pod = apply_values(pool_template["job_configuration"], values)["job_manifest"]["spec"]["template"]
    assert _cache_claims(pod) == {claim}
    assert pod["spec"]["securityContext"]["fsGroup"] == dockerfile_uid()  # the non-root user can write to it
