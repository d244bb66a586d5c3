"""Resolve the base model: build the tiny built-in checkpoint once, or fetch an s3:// checkpoint to the cache."""

from __future__ import annotations

import hashlib
from pathlib import Path

from prefect import get_run_logger, task

from essaflow.config import ModelConfig
from essaflow.refs import ModelRef
from essaflow.timing import Timer
from tasks.failures import masked_errors
from tasks.retry import retry_policy
from tasks.run import record_stage


def _digest(path: str, revision: str | None) -> str:
    p = Path(path)
    if not p.is_dir():
        return hashlib.sha256(f"{path}@{revision}".encode()).hexdigest()[:16]
    h = hashlib.sha256()
    for f in sorted(p.iterdir()):
        if f.is_file():
            h.update(f.name.encode())
            h.update(str(f.stat().st_size).encode())
            if f.suffix == ".json":
                h.update(f.read_bytes())
    return h.hexdigest()[:16]


@task(
    name="build_base_model",
    task_run_name="build_base_model",
    **retry_policy(),
    on_completion=[record_stage],
)
@masked_errors
def build_base_model(model: ModelConfig) -> ModelRef:
    """The base checkpoint on this machine (built or downloaded once, then cached)."""
    timer = Timer()
    with timer.part("compute"):
        from essaflow.model.loading import resolve_model_path  # torch, as in tasks/data.py

        path = resolve_model_path(model.name_or_path, model.dtype)
    get_run_logger().info("base model %s -> %s", model.name_or_path, path)
    return ModelRef(
        name_or_path=model.name_or_path,
        local_path=str(path),
        digest=_digest(str(path), model.revision),
        stage="build_base_model",
        timings=timer.timings(),
    )
