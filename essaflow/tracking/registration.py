"""The registered model: the adapter logged as an MLflow pyfunc model, one version per pipeline run, and a version
downloaded again for scoring.

- The adapter is logged as a pyfunc model (`tracking/pyfunc_model.py`, logged as code, with the adapter and, for a
  local base such as builtin:tiny, the base checkpoint as artifacts), so
  `mlflow.pyfunc.load_model("models:/<name>@champion").predict(["12+7="])` returns completions anywhere.
- Registration is idempotent: the model version carries the pipeline run id as a tag and is looked up first, so a
  retried register stage makes no second version.
- Which alias the version gets is the promotion gate's call (essaflow/gate/promotion.py), not this module's.

Never imports prefect.
"""

from __future__ import annotations

import logging
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from essaflow.config import DataConfig, ModelConfig, SamplingConfig
from essaflow.judging.registered import VersionModel
from essaflow.secrets import scrub
from essaflow.tracking.metrics import metric_key
from essaflow.tracking.runs import RUN_TAG, TrackedRun
from essaflow.tracking.server import client

log = logging.getLogger(__name__)

PYFUNC_SOURCE = Path(__file__).with_name("pyfunc_model.py")
# imported by the pyfunc model (stdlib only)
PROMPT_FORMAT_SOURCE = Path(__file__).parents[1] / "generation" / "prompt_format.py"
#: A local base checkpoint at most this large is copied into the registered model, so it loads anywhere.
EMBED_BASE_MAX_BYTES = 512 * 1024 * 1024


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

    from essaflow.model.gguf import gguf_file, is_gguf_name

    artifacts = {"adapter": str(adapter_dir)}
    gguf = gguf_file(model_cfg.name_or_path) if is_gguf_name(model_cfg.name_or_path) else None
    if gguf is not None and gguf.stat().st_size <= EMBED_BASE_MAX_BYTES:  # larger: named, with its digest tag
        artifacts["base_gguf"] = str(gguf)
    elif base_dir and Path(base_dir).is_dir() and _dir_bytes(Path(base_dir)) <= EMBED_BASE_MAX_BYTES:
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
            pip_requirements=["mlflow", "torch", "transformers", "peft", "safetensors"]
            + (["gguf"] if "base_gguf" in artifacts else []),
        )
        c.log_artifacts(run.run_id, str(Path(tmp) / "model"), "model")
    return f"{c.get_run(run.run_id).info.artifact_uri.rstrip('/')}/model"


def find_version(c, name: str, run_id: str):
    """The version this pipeline run already registered, if any (what makes registration idempotent)."""
    found = c.search_model_versions(f"name = '{name}' and tags.`{RUN_TAG}` = '{run_id}'")
    return min(found, key=lambda v: int(v.version)) if found else None


@dataclass(frozen=True)
class VersionRequest:
    """A pipeline run's adapter to register as a version of `name`: the pyfunc model's inputs (see
    log_adapter_model), the version's tags and the score it is registered with."""

    run: TrackedRun
    """The MLflow run the pyfunc model is logged in."""
    pipeline_run_id: str
    """Tagged on the version (RUN_TAG): what makes a retried registration find it instead of making another."""
    name: str
    """The registered model (the pipeline's name)."""
    adapter_dir: Path
    model_cfg: ModelConfig
    base_dir: str | None
    """The local base checkpoint, embedded when small enough (None: the model config names the base)."""
    sampling: SamplingConfig
    tags: dict[str, Any]
    metric: str
    """The eval metric the version is scored on (the gate's), tagged with its `score`."""
    score: float
    data: DataConfig | None = None
    """The run's data config: the registered model stores its prompt formatting."""


def register_version(request: VersionRequest) -> str:
    """The version number of the adapter registered as `request.name` by its pipeline run: registered now (its
    pyfunc model logged in `request.run`, tagged with `request.tags`, the run id and its metric's score), or found
    when a retry already registered it."""
    from mlflow.exceptions import MlflowException

    r = request
    name, pipeline_run_id, run = r.name, r.pipeline_run_id, r.run
    c = client(run.tracking_uri)
    try:
        c.create_registered_model(name, description="essaflow: LoRA adapters fine-tuned on verifiable rewards")
    except MlflowException as e:
        if e.error_code != "RESOURCE_ALREADY_EXISTS":
            raise
    version = find_version(c, name, pipeline_run_id)
    if version is None:
        source = log_adapter_model(run, r.adapter_dir, r.model_cfg, r.base_dir, r.sampling, r.data)
        all_tags = {RUN_TAG: pipeline_run_id, "metric": r.metric, f"metric.{metric_key(r.metric)}": r.score, **r.tags}
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
    return str(version.version)


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


def fetch_version(tracking_uri: str, name: str, version: str, dst: Path) -> VersionModel:
    """Download a registered version (adapter, base when embedded) into `dst` and read its model config."""
    files = download_registered(tracking_uri, name, version, dst)
    mc = files["model_config"]
    # an embedded checkpoint, else an embedded GGUF (a .gguf path loads through essaflow.model.gguf), else the name
    embedded = files["artifacts"].get("base") or files["artifacts"].get("base_gguf")
    return VersionModel(
        base=embedded or mc.get("base_model"),
        revision=None if embedded else mc.get("revision"),
        dtype=mc.get("dtype", "float32"),
        trust_remote_code=bool(mc.get("trust_remote_code", False)),
        adapter_dir=Path(files["artifacts"]["adapter"]),
        chat_template=mc.get("chat_template", "auto"),
        system_prompt=mc.get("system_prompt") or None,
    )


@contextmanager
def downloaded_version(tracking_uri: str, name: str, version: str) -> Iterator[VersionModel]:
    """A registered version's files in a temporary directory, removed when the block ends."""
    with tempfile.TemporaryDirectory(prefix="essaflow-registered-") as tmp:
        yield fetch_version(tracking_uri, name, version, Path(tmp))
