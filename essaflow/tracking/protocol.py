"""The data and evaluation protocol a registered model version was trained and judged with, kept in its tags.

Registration writes the run's data, eval and sampling configs as JSON tags; `essaflow eval --model NAME` reads
them back, so re-evaluating a champion without a config uses the dataset it was trained on and the protocol its
recorded pass@k came from (a config or --set given on the command line still wins).
"""

from __future__ import annotations

import json
from typing import Any

from essaflow.config import DataConfig, EvalConfig, SamplingConfig

PROTOCOL_TAGS = {"data": "essaflow.data_config", "eval": "essaflow.eval_config", "sampling": "essaflow.sampling_config"}
"""Config section -> the model version tag holding it as JSON."""


def protocol_tags(data: DataConfig, eval_cfg: EvalConfig, sampling: SamplingConfig) -> dict[str, str]:
    """The version tags recording the run's data, eval and sampling sections (JSON)."""
    sections = {"data": data, "eval": eval_cfg, "sampling": sampling}
    return {tag: json.dumps(sections[section].model_dump(mode="json"), sort_keys=True)
            for section, tag in PROTOCOL_TAGS.items()}  # fmt: skip


def protocol_from_tags(tags: dict[str, str]) -> dict[str, Any]:
    """{section: config dict} for the sections a version's tags record (none for a version without those tags)."""
    out = {}
    for section, tag in PROTOCOL_TAGS.items():
        if tags.get(tag):
            out[section] = json.loads(tags[tag])
    return out


def registered_protocol(tracking_uri: str, name: str, alias: str) -> dict[str, Any]:
    """The recorded protocol of models:/name@alias ({} when its tags hold none)."""
    from essaflow import tracking

    version = tracking.client(tracking_uri).get_model_version_by_alias(name, alias)
    return protocol_from_tags(dict(version.tags or {}))
