"""Method none: nothing trains after the SFT warm start; the SFT adapter is the result (and `essaflow eval`'s runs)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from essaflow.methods.base import Method

if TYPE_CHECKING:
    from essaflow.config import PipelineConfig

SFT_ONLY_LABEL = "SFT only"
"""The label of method none's results."""


class SFTOnly(Method):
    """No section, no trainer, no Ray workers: the base Method's defaults."""

    name = "none"

    def label(self, cfg: PipelineConfig) -> str:
        return SFT_ONLY_LABEL


SFT_ONLY = SFTOnly()
