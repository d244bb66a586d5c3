"""ESSA as the pipeline sees it: CMA-ES over SVD-LoRA singular values, scored on Ray (essaflow/essa/)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from essaflow.methods.base import Method, Trainer

if TYPE_CHECKING:
    from essaflow.config import PipelineConfig


class ESSAMethod(Method):
    """ESSA (arXiv 2507.04453): the `essa` section, `essaflow.essa.loop.train_essa`, one row per generation."""

    name = "essa"
    section = "essa"
    command = "essa"
    preset = "tiny-essa.yaml"
    projection = "essa"

    def trainer(self) -> Trainer:
        from essaflow.essa.loop import train_essa

        return train_essa

    def label(self, cfg: PipelineConfig) -> str:
        return f"ESSA({cfg.essa.strategy}, {cfg.essa.fitness})"

    def tags(self, cfg: PipelineConfig) -> dict[str, str]:
        """The label and how the fitness was obtained ('black-box reward' from the task reward alone, or 'gray-box:
        needs reference answers')."""
        return {**super().tags(cfg), "fitness_kind": cfg.essa.fitness_kind}

    def params(self, cfg: PipelineConfig) -> dict[str, str]:
        return {"essa.fitness_kind": cfg.essa.fitness_kind}  # how the result was obtained, beside the fitness

    def planned_steps(self, cfg: PipelineConfig) -> int:
        return cfg.essa.generations

    def progress(self, row: dict[str, Any]) -> str:
        if "fitness_mean" not in row:
            return ""
        return (f"fitness {row['fitness_mean']:.3f}/{row['fitness_max']:.3f} ties {row['tie_share']:.2f} "
                f"sigma {row['sigma']:.3g}")  # fmt: skip

    def projection_settings(self, cfg: PipelineConfig) -> dict[str, int]:
        e = cfg.essa
        return {"workers": e.workers.count, "population": e.population, "minibatch": e.minibatch}


ESSA = ESSAMethod()
