"""How a result was obtained, as every reported result states it: the method variant and, for ESSA, the fitness kind.

`method_label` names the variant ('ESSA(es, accuracy)', 'F-GRPO(gamma=0.5)', 'SFT only'); `method_tags` adds
ESSA's fitness kind ('black-box reward' from the task reward alone, or 'gray-box: needs reference answers'). They go
on the MLflow run, the registered version, the compare report and the CLI jobs' JSON lines. Never imports prefect.
"""

from __future__ import annotations

from essaflow.config import ESSAConfig, GRPOConfig
from essaflow.refs import AdapterRef

SFT_ONLY = "SFT only"
"""The label of method none: the SFT adapter is the result."""


def method_label(method: str, essa: ESSAConfig, grpo: GRPOConfig) -> str:
    """The method variant as results show it: 'ESSA(es, accuracy)', 'GRPO', 'F-GRPO(gamma=0.5)', 'F-DAPO(...)'."""
    if method == "essa":
        return f"ESSA({essa.strategy}, {essa.fitness})"
    if method == "none":
        return SFT_ONLY
    base = grpo.loss.upper()
    return base if grpo.gamma == 0 else f"F-{base}(gamma={grpo.gamma:g})"


def method_tags(method: str, essa: ESSAConfig, grpo: GRPOConfig) -> dict[str, str]:
    """{"method_label"} and, for ESSA, {"fitness_kind"}: what every reported result carries about how it was
    obtained."""
    tags = {"method_label": method_label(method, essa, grpo)}
    if method == "essa":
        tags["fitness_kind"] = essa.fitness_kind
    return tags


def trained_method_tags(adapter: AdapterRef) -> dict[str, str]:
    """method_tags of the run that trained `adapter`, read from its training summary (which records the label of
    a trained method; kind "none" when the SFT adapter is the result)."""
    tags = {"method_label": SFT_ONLY if adapter.kind == "none" else adapter.training.method_label}
    if adapter.training.fitness_kind:
        tags["fitness_kind"] = adapter.training.fitness_kind
    return tags
