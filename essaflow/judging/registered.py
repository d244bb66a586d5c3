"""A registered model version scored with our protocol: pass@k of its adapter on its base, formatted as its
`predict` formats prompts (the version's own chat template and system prompt).

The promotion gate's baseline (the champion on the current run's problems, tasks/champion.py) and
`essaflow eval --model NAME` (tasks/evaluation.py) score versions this way; the version's files come from the
registry (essaflow.tracking.registration.downloaded_version).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from essaflow.data.schema import Problem
from essaflow.generation.config import SamplingConfig
from essaflow.generation.prompt_format import PromptFormat
from essaflow.judging.config import EvalConfig
from essaflow.judging.evaluation import EvalReport
from essaflow.model.config import ModelConfig


@dataclass(frozen=True)
class VersionModel:
    """A registered version's files on this machine and how it formats prompts."""

    base: str
    """The base checkpoint: the embedded copy's directory, else the hub id or path the version names."""
    revision: str | None
    """The base's revision (None for an embedded base)."""
    dtype: str
    """The dtype the version was trained in."""
    trust_remote_code: bool
    """Whether the base may run its own code."""
    adapter_dir: Path
    """The LoRA adapter's directory."""
    chat_template: str
    """data.chat_template of the run that registered it."""
    system_prompt: str | None
    """data.system_prompt of the run that registered it."""

    def model_config(self) -> ModelConfig:
        """The base as a model config."""
        return ModelConfig(name_or_path=self.base, revision=self.revision, dtype=self.dtype,
                           trust_remote_code=self.trust_remote_code)  # fmt: skip

    def prompt_format(self) -> PromptFormat:
        """How the version formats a question (as its `predict` does)."""
        return PromptFormat(chat_template=self.chat_template, system_prompt=self.system_prompt)


def evaluate_version(
    version: VersionModel, problems: list[Problem], eval_cfg: EvalConfig, sampling: SamplingConfig
) -> EvalReport:
    """pass@k (with per-problem counts) of a downloaded version on `problems` under this protocol."""
    from essaflow.judging.model_eval import evaluate_adapter  # torch: only where a version is scored

    fmt = version.prompt_format()
    return evaluate_adapter(version.model_config(), version.adapter_dir, problems, eval_cfg, sampling, fmt)
