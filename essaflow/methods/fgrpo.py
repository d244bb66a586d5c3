"""F-GRPO as the pipeline sees it: the GRPO family with the focal weight, on Ray Train ranks (essaflow/grpo/)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from essaflow.methods.base import Method, Trainer

if TYPE_CHECKING:
    from essaflow.config import PipelineConfig


class FGRPOMethod(Method):
    """GRPO, DAPO, CISPO and their F- variants (FGRPO-v2): the `grpo` section, `essaflow.grpo.loop.train_grpo`,
    one row per rollout step."""

    name = "fgrpo"
    section = "grpo"
    command = "grpo"
    preset = "tiny-fgrpo.yaml"
    projection = "grpo"
    plans_memory = True

    def trainer(self) -> Trainer:
        from essaflow.grpo.loop import train_grpo

        return train_grpo

    def label(self, cfg: PipelineConfig) -> str:
        """'GRPO', 'F-GRPO(gamma=0.5)', 'F-DAPO(gamma=1)': the loss, focal when gamma > 0."""
        base = cfg.grpo.loss.upper()
        return base if cfg.grpo.gamma == 0 else f"F-{base}(gamma={cfg.grpo.gamma:g})"

    def planned_steps(self, cfg: PipelineConfig) -> int:
        return cfg.grpo.steps

    def progress(self, row: dict[str, Any]) -> str:
        if "reward_mean" not in row:
            return ""
        return (f"reward {row['reward_mean']:.3f} zero-var {row['zero_variance_share']:.2f} "
                f"focal {row['focal_mean_active']:.2f} {row['step_s']:.2f}s/step")  # fmt: skip

    def devices(self, cfg: PipelineConfig) -> list[tuple[str, str]]:
        return [("grpo.device", cfg.grpo.device)]

    def notes(self, cfg: PipelineConfig) -> list[str]:
        grpo = cfg.grpo
        if grpo.sharding == "fsdp" and grpo.workers.count == 1:
            return [
                "note: grpo.sharding=fsdp with grpo.workers.count=1: one rank holds every shard, so fsdp saves no "
                "memory (the steps are ddp's); raise grpo.workers.count to shard the model, or use grpo.sharding=ddp"
            ]
        return []

    def allreduce_bytes(self, cfg: PipelineConfig, trainable_bytes: float) -> float:
        """One all-reduce of the trainable weights per optimizer step, mini_batches of them per rollout step."""
        return float(trainable_bytes) * cfg.grpo.mini_batches

    def projection_settings(self, cfg: PipelineConfig) -> dict[str, int]:
        return {"workers": cfg.grpo.workers.count, "mini_batches": cfg.grpo.mini_batches}


FGRPO = FGRPOMethod()
