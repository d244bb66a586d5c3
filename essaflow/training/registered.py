"""A registered model version evaluated with our protocol: downloaded from the registry, scored with pass@k.

Used for the promotion gate's baseline (the champion on the current run's problems, tasks/champion.py) and for
`essaflow eval --model NAME` (tasks/evaluation.py). The version's own prompt formatting (chat template, system
prompt) is applied, as its `predict` applies it.
"""

from __future__ import annotations

import tempfile
from dataclasses import dataclass
from pathlib import Path

from essaflow.data.schema import Problem
from essaflow.generation.config import SamplingConfig
from essaflow.generation.prompt_format import PromptFormat
from essaflow.judging.config import EvalConfig
from essaflow.judging.evaluation import EvalReport
from essaflow.model.config import ModelConfig
from essaflow.tracking import download_registered


@dataclass(frozen=True)
class VersionModel:
    """A registered version's files on this machine and how it formats prompts."""

    base: str
    revision: str | None
    dtype: str
    trust_remote_code: bool
    adapter_dir: Path
    chat_template: str
    system_prompt: str | None


def fetch_version(tracking_uri: str, name: str, version: str, dst: Path) -> VersionModel:
    """Download a registered version (adapter, base when embedded) and read its model config."""
    files = download_registered(tracking_uri, name, version, dst)
    mc = files["model_config"]
    embedded = "base" in files["artifacts"]
    return VersionModel(
        base=files["artifacts"]["base"] if embedded else mc.get("base_model"),
        revision=None if embedded else mc.get("revision"),
        dtype=mc.get("dtype", "float32"),
        trust_remote_code=bool(mc.get("trust_remote_code", False)),
        adapter_dir=Path(files["artifacts"]["adapter"]),
        chat_template=mc.get("chat_template", "auto"),
        system_prompt=mc.get("system_prompt") or None,
    )


def evaluate_version(
    tracking_uri: str, name: str, version: str, problems: list[Problem], eval_cfg: EvalConfig,
    sampling: SamplingConfig,
) -> EvalReport:  # fmt: skip
    """pass@k (with per-problem counts) of registered `name` v`version` on `problems` under this protocol."""
    from essaflow.training.warm_start import evaluate_adapter  # torch: only where a version is scored

    with tempfile.TemporaryDirectory(prefix="essaflow-registered-") as tmp:
        m = fetch_version(tracking_uri, name, version, Path(tmp))
        model_cfg = ModelConfig(name_or_path=m.base, revision=m.revision, dtype=m.dtype,
                                trust_remote_code=m.trust_remote_code)  # fmt: skip
        fmt = PromptFormat(chat_template=m.chat_template, system_prompt=m.system_prompt)
        return evaluate_adapter(model_cfg, m.adapter_dir, problems, eval_cfg, sampling, fmt)
