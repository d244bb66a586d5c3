"""The champion, scored on this run's problems under this run's protocol, so the gate compares like with like.

A registered version records what its own evaluation judged (`EVAL_TAGS`: the problem set's and the protocol's
digests, and where its per-problem report is stored). When both digests equal the current run's, that report holds
the counts a fresh evaluation would give (same problems, same protocol, same seed) and is reused; otherwise the
champion is downloaded from the registry and evaluated again, with the prompt formatting its version stores.
"""

from __future__ import annotations

import tempfile
from dataclasses import dataclass
from pathlib import Path

from essaflow.data.schema import Problem
from essaflow.generation.sampling import SamplingConfig
from essaflow.judging.evaluation import EvalConfig, EvalReport

EVAL_TAGS = {
    "problems": "essaflow.eval.problems_digest",
    "protocol": "essaflow.eval.protocol_digest",
    "report": "essaflow.eval.report_uri",
}
"""What a version's own evaluation judged -> the version tag recording it."""


def eval_identity_tags(problems_digest: str, protocol_digest: str, report_uri: str) -> dict[str, str]:
    """The version tags that let a later run reuse this version's per-problem counts."""
    values = {"problems": problems_digest, "protocol": protocol_digest, "report": report_uri}
    return {EVAL_TAGS[k]: v for k, v in values.items()}


def reusable_report_uri(version_tags: dict[str, str], problems_digest: str, protocol_digest: str) -> str | None:
    """The stored report of a version whose recorded problem set and protocol match these digests, else None."""
    if version_tags.get(EVAL_TAGS["problems"]) != problems_digest:
        return None
    if version_tags.get(EVAL_TAGS["protocol"]) != protocol_digest:
        return None
    return version_tags.get(EVAL_TAGS["report"]) or None


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
    from essaflow.tracking.runs import download_registered

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
    from essaflow.generation.prompt_format import PromptFormat
    from essaflow.model.loading import ModelConfig
    from essaflow.training.warm_start import evaluate_adapter

    with tempfile.TemporaryDirectory(prefix="essaflow-registered-") as tmp:
        m = fetch_version(tracking_uri, name, version, Path(tmp))
        model_cfg = ModelConfig(name_or_path=m.base, revision=m.revision, dtype=m.dtype,
                                trust_remote_code=m.trust_remote_code)  # fmt: skip
        fmt = PromptFormat(chat_template=m.chat_template, system_prompt=m.system_prompt)
        return evaluate_adapter(model_cfg, m.adapter_dir, problems, eval_cfg, sampling, fmt)
