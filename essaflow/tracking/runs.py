"""MLflow tracking for pipeline runs: one MLflow run per pipeline run, the registered model and its promotion gate.

- One MLflow run per pipeline run, found again by its `essaflow.run_id` tag, so a retried stage logs into the same
  run. Params are the flattened config, never a credential (secret-looking keys are dropped, URI user-info and the
  values of credential environment variables are masked). Metrics per generation/step, the pass@k table, PNG plots,
  and tags linking the storage URIs and the Prefect flow run.
- The adapter is logged as an MLflow pyfunc model (`tracking/pyfunc_model.py`, logged as code, with the adapter and,
  for a local base such as builtin:tiny, the base checkpoint as artifacts), so
  `mlflow.pyfunc.load_model("models:/<name>@champion").predict(["12+7="])` returns completions anywhere.
- Registration is idempotent: the model version carries the pipeline run id as a tag and is looked up first, so a
  retried register stage makes no second version.
- Promotion gate: alias `champion` moves to the new version only on the gate's paired evidence against the
  current champion, both scored on the same problems under the same protocol (`tracking/promotion.py`,
  `judging/gate.py`); otherwise the new version gets `challenger`.

An unreachable tracking server is reported by `check_tracking` in a few seconds, naming the URI, before any
compute starts. This module never imports prefect. (About 400 lines: runs, model logging and the registry gate
share one client and one naming scheme; `tracking/buffer.py` holds the batching of step metrics.)
"""

from __future__ import annotations

import json
import logging
import os
import subprocess
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from essaflow.config import DataConfig, ModelConfig, PipelineConfig, SamplingConfig
from essaflow.judging.evaluation import EvalReport, plot_pass_at_k
from essaflow.judging.gate import GateEvidence
from essaflow.secrets import is_secret, safe_uri, scrub  # safe_uri, scrub: also imported from here (cli, tasks)
from essaflow.tracking.promotion import CHALLENGER, CHAMPION, promote, record_evidence  # noqa: F401

log = logging.getLogger(__name__)

RUN_TAG = "essaflow.run_id"
FAILURE_TAG = "essaflow.failure"  # why a failed run failed (stage: error), removed when it is resumed
PYFUNC_SOURCE = Path(__file__).with_name("pyfunc_model.py")
# imported by the pyfunc model (stdlib only)
PROMPT_FORMAT_SOURCE = Path(__file__).parents[1] / "generation" / "prompt_format.py"
#: A local base checkpoint at most this large is copied into the registered model, so it loads anywhere.
EMBED_BASE_MAX_BYTES = 512 * 1024 * 1024


class TrackingError(RuntimeError):
    """MLflow cannot be used as configured; the message names the URI and the problem."""


# ------------------------------------------------------------------------------------------------ params


def flat_params(cfg: PipelineConfig) -> dict[str, str]:
    """The config as dotted `section.key -> value` params; secret-looking keys dropped, values scrubbed."""
    out: dict[str, str] = {}

    def walk(prefix: str, node: Any) -> None:
        if isinstance(node, dict):
            for k, v in node.items():
                walk(f"{prefix}.{k}" if prefix else str(k), v)
            return
        if is_secret(prefix):
            return
        value = json.dumps(node) if isinstance(node, (list, tuple)) else str(node)
        out[prefix] = scrub(safe_uri(value) if "://" in value else value)[:6000]

    walk("", cfg.model_dump(mode="json"))
    if cfg.method == "essa":  # how the ESSA result was obtained, beside the fitness it names
        out["essa.fitness_kind"] = cfg.essa.fitness_kind
    return out


# ------------------------------------------------------------------------------------------------ connection


def local_tracking_uri(state_dir: str | Path = ".essaflow") -> str:
    return "sqlite:///" + str((Path(state_dir) / "mlflow.db").absolute())


def resolve_tracking_uri(uri: str | None) -> str:
    """The configured URI, else MLFLOW_TRACKING_URI, else a local sqlite file under .essaflow/."""
    return uri or os.environ.get("MLFLOW_TRACKING_URI") or local_tracking_uri()


def check_tracking(uri: str, timeout: float = 5.0) -> None:
    """Fail fast, naming the URI, when the tracking backend cannot be used."""
    scheme = urlsplit(uri).scheme
    if scheme in ("http", "https"):
        import requests

        try:
            resp = requests.get(uri.rstrip("/") + "/health", timeout=timeout)
        except requests.RequestException as e:
            raise TrackingError(
                f"MLflow tracking server {safe_uri(uri)} is unreachable ({type(e).__name__}); start it "
                "(essaflow stack up) or point MLFLOW_TRACKING_URI / tracking_uri at a running server"
            ) from None
        if resp.status_code in (401, 403):
            raise TrackingError(
                f"MLflow tracking server {safe_uri(uri)} rejected our credentials (HTTP {resp.status_code})"
            )
        if resp.status_code != 200:
            raise TrackingError(
                f"MLflow tracking server {safe_uri(uri)} is not healthy (HTTP {resp.status_code} on /health)"
            )
    elif scheme == "sqlite":
        Path(uri.removeprefix("sqlite:///")).parent.mkdir(parents=True, exist_ok=True)
    elif scheme in ("", "file"):
        raise TrackingError(
            f"MLflow tracking URI {uri!r}: the file store cannot hold a model registry; use sqlite:///path.db or http://"
        )


def client(uri: str):
    from mlflow import MlflowClient

    return MlflowClient(tracking_uri=uri, registry_uri=uri)


@dataclass(frozen=True)
class TrackedRun:
    """Where one pipeline run is recorded in MLflow."""

    tracking_uri: str
    experiment_id: str
    run_id: str

    @property
    def url(self) -> str | None:
        if urlsplit(self.tracking_uri).scheme in ("http", "https"):
            return f"{safe_uri(self.tracking_uri).rstrip('/')}/#/experiments/{self.experiment_id}/runs/{self.run_id}"
        return None


def _experiment(c, name: str, tracking_uri: str) -> str:
    exp = c.get_experiment_by_name(name)
    if exp is not None:
        if exp.lifecycle_stage == "deleted":
            c.restore_experiment(exp.experiment_id)
        return exp.experiment_id
    location = None
    if urlsplit(tracking_uri).scheme == "sqlite":  # keep local artifacts beside the database, not in ./mlruns
        location = (Path(tracking_uri.removeprefix("sqlite:///")).parent / "mlartifacts").absolute().as_uri()
    from mlflow.exceptions import MlflowException

    try:
        return c.create_experiment(name, artifact_location=location)
    except MlflowException:  # created concurrently
        return c.get_experiment_by_name(name).experiment_id


def open_run(cfg: PipelineConfig, tracking_uri: str, run_id: str, tags: dict[str, str]) -> TrackedRun:
    """The MLflow run of pipeline run `run_id`: found by tag (retries) or created with params and tags."""
    c = client(tracking_uri)
    exp_id = _experiment(c, cfg.name, tracking_uri)
    found = c.search_runs([exp_id], filter_string=f"tags.`{RUN_TAG}` = '{run_id}'", max_results=1)
    if found:  # a retried stage, a flow retry or a resume: the same MLflow run, RUNNING again
        info = found[0].info
        if info.status != "RUNNING":
            c.update_run(info.run_id, status="RUNNING")
            if FAILURE_TAG in found[0].data.tags:
                c.delete_tag(info.run_id, FAILURE_TAG)
        return TrackedRun(tracking_uri, exp_id, info.run_id)
    from mlflow.entities import Param

    all_tags = {RUN_TAG: run_id, "mlflow.runName": run_id[:8], **tags}
    run = c.create_run(exp_id, tags={k: scrub(str(v)) for k, v in all_tags.items()})
    params = [Param(k, v) for k, v in flat_params(cfg).items()]
    for i in range(0, len(params), 100):
        c.log_batch(run.info.run_id, params=params[i : i + 100])
    log.info("MLflow run %s (experiment %s) at %s", run.info.run_id, exp_id, safe_uri(tracking_uri))
    return TrackedRun(tracking_uri, exp_id, run.info.run_id)


def set_tags(run: TrackedRun, tags: dict[str, Any]) -> None:
    from mlflow.entities import RunTag

    c = client(run.tracking_uri)
    c.log_batch(run.run_id, tags=[RunTag(k, scrub(str(v))) for k, v in tags.items()])


def finish_run(run: TrackedRun, status: str = "FINISHED") -> None:
    client(run.tracking_uri).set_terminated(run.run_id, status)


# ------------------------------------------------------------------------------------------------ metrics & plots


def metric_key(name: str) -> str:
    """pass@4 -> pass_at_4 (MLflow names allow no '@')."""
    return name.replace("@", "_at_")


def logged_steps(run: TrackedRun, prefix: str = "train") -> dict[str, int]:
    """{metric key: newest step already logged} for the run's metrics under `prefix.` (a resumed run skips those)."""
    c = client(run.tracking_uri)
    keys = [k for k in c.get_run(run.run_id).data.metrics if k.startswith(prefix + ".")]
    return {k: max(m.step for m in c.get_metric_history(run.run_id, k)) for k in keys}


def log_step_metrics(
    run: TrackedRun, rows: list[dict[str, Any]], prefix: str = "train", logged: dict[str, int] | None = None
) -> None:
    """Numeric entries of per-generation/step dicts as metrics, stepped by their `step`/`generation` field.

    `logged` ({key: newest logged step}, see :func:`logged_steps`) drops points at or before a key's newest step,
    so steps recomputed after a retry or a resume are not logged twice; it is updated with what is logged here.
    """
    import time

    from mlflow.entities import Metric

    now = int(time.time() * 1000)
    metrics = []
    for i, row in enumerate(rows):
        step = int(row.get("step", row.get("generation", i)))
        for k, v in row.items():
            if isinstance(v, (int, float)) and not isinstance(v, bool) and k not in ("step", "generation"):
                key = f"{prefix}.{metric_key(k)}"
                if logged is not None:
                    if step <= logged.get(key, -1):
                        continue
                    logged[key] = step
                metrics.append(Metric(key, float(v), now, step))
    c = client(run.tracking_uri)
    for i in range(0, len(metrics), 1000):
        c.log_batch(run.run_id, metrics=metrics[i : i + 1000])


def log_eval(run: TrackedRun, label: str, report: EvalReport) -> None:
    """greedy and pass@k as metrics `eval.<label>.*`, the report JSON and the pass@k curve as artifacts."""
    import time

    from mlflow.entities import Metric

    now = int(time.time() * 1000)
    c = client(run.tracking_uri)
    have = c.get_run(run.run_id).data.metrics  # a resumed run evaluates again: one point per metric all the same
    metrics = [Metric(f"eval.{label}.{metric_key(k)}", float(v), now, 0) for k, v in report.metrics().items()]
    if metrics := [m for m in metrics if m.key not in have]:
        c.log_batch(run.run_id, metrics=metrics)
    body = json.loads(report.to_json())
    body.pop("samples", None)  # completions live in the stored samples.jsonl.gz, not in the tracking server
    c.log_dict(run.run_id, body, f"eval/{label}/passk.json")
    with tempfile.TemporaryDirectory() as tmp:
        png = plot_pass_at_k({label: report}, Path(tmp) / "passk.png")
        c.log_artifact(run.run_id, str(png), f"eval/{label}")


def log_comparison(run: TrackedRun, reports: dict[str, EvalReport]) -> None:
    """The pass@k table (one row per k, one column per label) and one plot with every curve."""
    c = client(run.tracking_uri)
    ks = sorted({int(k) for r in reports.values() for k in r.pass_at_k})
    table = {"k": ks, **{label: [r.pass_at_k.get(str(k)) for k in ks] for label, r in reports.items()}}
    c.log_table(run.run_id, table, "eval/passk_table.json")
    with tempfile.TemporaryDirectory() as tmp:
        png = plot_pass_at_k(reports, Path(tmp) / "passk_before_after.png")
        c.log_artifact(run.run_id, str(png), "eval")


# ------------------------------------------------------------------------------------------------ registry


def git_commit() -> str:
    """The source commit (ESSAFLOW_GIT_COMMIT wins; 'unknown' outside a git checkout)."""
    if os.environ.get("ESSAFLOW_GIT_COMMIT"):
        return os.environ["ESSAFLOW_GIT_COMMIT"]
    try:
        out = subprocess.run(
            ["git", "rev-parse", "HEAD"],
            cwd=Path(__file__).resolve().parent,
            capture_output=True,
            text=True,
            timeout=5,
        )
        return out.stdout.strip() if out.returncode == 0 else "unknown"
    except (OSError, subprocess.SubprocessError):
        return "unknown"


def _dir_bytes(path: Path) -> int:
    return sum(p.stat().st_size for p in path.rglob("*") if p.is_file())


def log_adapter_model(
    run: TrackedRun,
    adapter_dir: Path,
    model_cfg: ModelConfig,
    base_dir: str | None,
    sampling: SamplingConfig,
    data: DataConfig | None = None,
) -> str:
    """Save adapter (+ base checkpoint when local and small) as a pyfunc model under the run's `model/` artifact
    path; returns the model's artifact URI (the registry source). Uses no global MLflow state.

    The model config stores the prompt template, chat template mode and system prompt of `data` (defaults when
    None), and prompt_format.py is logged beside the model's code, so `predict` formats raw questions as
    training did."""
    data = data or DataConfig()
    import warnings

    import mlflow
    from mlflow.models import infer_signature

    artifacts = {"adapter": str(adapter_dir)}
    if base_dir and Path(base_dir).is_dir() and _dir_bytes(Path(base_dir)) <= EMBED_BASE_MAX_BYTES:
        artifacts["base"] = str(base_dir)
    model_config = {
        "base_model": model_cfg.name_or_path,
        "revision": model_cfg.revision,
        "dtype": model_cfg.dtype,
        "trust_remote_code": model_cfg.trust_remote_code,
        "max_new_tokens": sampling.max_new_tokens,
        "prompt_template": data.prompt_template,
        "chat_template": data.chat_template,
        "system_prompt": data.system_prompt or "",
    }
    signature = infer_signature(
        ["12+7="], ["19"], params={"max_new_tokens": sampling.max_new_tokens, "temperature": 0.0}
    )
    c = client(run.tracking_uri)
    with tempfile.TemporaryDirectory(prefix="essaflow-pyfunc-") as tmp, warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)  # "add type hints" / "no input example": the signature rules
        mlflow.pyfunc.save_model(
            Path(tmp) / "model",
            python_model=str(PYFUNC_SOURCE),
            artifacts=artifacts,
            model_config=model_config,
            signature=signature,
            code_paths=[str(PROMPT_FORMAT_SOURCE)],
            pip_requirements=["mlflow", "torch", "transformers", "peft", "safetensors"],
        )
        c.log_artifacts(run.run_id, str(Path(tmp) / "model"), "model")
    return f"{c.get_run(run.run_id).info.artifact_uri.rstrip('/')}/model"


@dataclass(frozen=True)
class Registration:
    name: str
    version: str
    aliases: list[str]
    decision: str

    @property
    def model_uri(self) -> str:
        return f"models:/{self.name}/{self.version}"


def find_version(c, name: str, run_id: str):
    """The version this pipeline run already registered, if any (what makes registration idempotent)."""
    found = c.search_model_versions(f"name = '{name}' and tags.`{RUN_TAG}` = '{run_id}'")
    return min(found, key=lambda v: int(v.version)) if found else None


def register_adapter(
    run: TrackedRun,
    pipeline_run_id: str,
    name: str,
    adapter_dir: Path,
    model_cfg: ModelConfig,
    base_dir: str | None,
    sampling: SamplingConfig,
    tags: dict[str, Any],
    metric: str,
    score: float,
    data: DataConfig | None = None,
    evidence: GateEvidence | None = None,
) -> Registration:
    """Register the adapter once per pipeline run, then apply the promotion gate's `evidence` (None: only a first
    version becomes champion) and record it on the version (tags, gate/evidence.json in the run).

    `data` is the run's data config: the registered model stores its prompt formatting (see log_adapter_model)."""
    from mlflow.exceptions import MlflowException

    c = client(run.tracking_uri)
    try:
        c.create_registered_model(name, description="essaflow: LoRA adapters fine-tuned on verifiable rewards")
    except MlflowException as e:
        if e.error_code != "RESOURCE_ALREADY_EXISTS":
            raise
    version = find_version(c, name, pipeline_run_id)
    if version is None:
        source = log_adapter_model(run, adapter_dir, model_cfg, base_dir, sampling, data)
        all_tags = {RUN_TAG: pipeline_run_id, "metric": metric, f"metric.{metric_key(metric)}": score, **tags}
        version = c.create_model_version(
            name,
            source=source,
            run_id=run.run_id,
            tags={k: scrub(str(v)) for k, v in all_tags.items()},
            run_link=run.url,
        )
        log.info("registered %s version %s", name, version.version)
    else:
        log.info(
            "%s version %s already registered by run %s; not registering again", name, version.version, pipeline_run_id
        )
    aliases, decision = promote(c, name, str(version.version), metric, score, evidence)
    c.set_model_version_tag(name, str(version.version), "promotion", decision)
    if evidence is not None and decision != f"already {CHAMPION}":  # a retry after the alias moved keeps its evidence
        record_evidence(c, name, str(version.version), run.run_id, evidence, decision)
    return Registration(name, str(version.version), aliases, decision)


def download_registered(tracking_uri: str, name: str, version: str, dst: Path) -> dict[str, Any]:
    """Fetch a registered model's files (adapter, base) and its config, for evaluating it with our own protocol."""
    import mlflow
    import yaml

    # Resolve the version's source ourselves: a models:/ URI would be looked up in the *default* registry.
    source = client(tracking_uri).get_model_version_download_uri(name, version)
    local = Path(mlflow.artifacts.download_artifacts(artifact_uri=source, dst_path=str(dst), tracking_uri=tracking_uri))
    mlmodel = yaml.safe_load((local / "MLmodel").read_text())
    pyfunc = mlmodel["flavors"]["python_function"]
    artifacts = {k: str(local / v["path"]) for k, v in pyfunc.get("artifacts", {}).items()}
    return {"dir": str(local), "artifacts": artifacts, "model_config": pyfunc.get("model_config", {})}


def fail_run(tracking_uri: str, pipeline_run_id: str, reason: str = "") -> None:
    """Mark the MLflow run of a pipeline run FAILED (if it was ever opened), with `reason` as FAILURE_TAG."""
    c = client(tracking_uri)
    exp_ids = [e.experiment_id for e in c.search_experiments()]
    if not exp_ids:
        return
    for r in c.search_runs(exp_ids, filter_string=f"tags.`{RUN_TAG}` = '{pipeline_run_id}'"):
        if reason:  # MLflow caps a tag value at 5000 characters
            c.set_tag(r.info.run_id, FAILURE_TAG, scrub(reason)[:4000])
        if r.info.status == "RUNNING":
            c.set_terminated(r.info.run_id, "FAILED")
