"""What every trainer takes and returns, so the training path treats ESSA and F-GRPO alike."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from essaflow.usage import Usage

MetricsCallback = Callable[[dict[str, Any]], None]
CheckpointCallback = Callable[[Path], None]


@dataclass(frozen=True)
class TrainCallbacks:
    """What a trainer reports while it runs: a metrics row per generation/step, each committed checkpoint."""

    on_metrics: MetricsCallback | None = None
    """Called with each generation's (ESSA) or step's (F-GRPO) metrics row, in order."""
    on_checkpoint: CheckpointCallback | None = None
    """Called with the directory of each checkpoint once it is complete."""

    def metrics(self, row: dict[str, Any]) -> None:
        if self.on_metrics is not None:
            self.on_metrics(row)

    def checkpoint(self, path: Path) -> None:
        if self.on_checkpoint is not None:
            self.on_checkpoint(Path(path))


@dataclass
class TrainResult:
    """Outcome of one training run."""

    output_dir: Path
    """The trained policy: a standard peft LoRA adapter directory (safetensors + adapter_config.json + tokenizer),
    or, for F-GRPO with grpo.parameters=full, a full Hugging Face checkpoint (see output_kind)."""
    steps: int
    """Generations (ESSA) or optimizer steps (GRPO) completed, including resumed ones."""
    wall_s: float
    """Training wall time of this call."""
    bytes_per_update: float
    """Bytes crossing process boundaries per generation/step (ESSA: candidates + fitness; GRPO: all-reduce)."""
    output_kind: Literal["lora", "full"] = "lora"
    """What output_dir holds: a LoRA adapter for the base model, or a full checkpoint."""
    metrics: list[dict[str, Any]] = field(default_factory=list)
    """One dict per generation/step (and held-out evals), in order."""
    resumed_from: int | None = None
    """Step/generation of the checkpoint this run resumed from, if any."""
    work_by_node: dict[str, int] = field(default_factory=dict)
    """How the work spread over Ray nodes (short node id -> ESSA candidates scored / GRPO worker starts)."""
    worker_failures: int = 0
    """Workers lost during this call (ESSA: actor deaths, their candidates re-dispatched; GRPO: Ray Train
    worker-group restarts, each resumed from the latest checkpoint)."""
    usage: Usage = field(default_factory=Usage)
    """What this call's training cost: generated, forward and backward tokens, device-seconds (essaflow/usage.py)."""
    sharding: str = ""
    """How the F-GRPO ranks held the weights: ddp (replicas) or fsdp (FSDP2 shards); empty for ESSA."""
    memory_per_rank: dict[str, int] = field(default_factory=dict)
    """F-GRPO: bytes of params, grads and optimizer state (and their total) one rank held at the end, counted from
    its own tensors (fsdp: its shards), the largest over ranks; empty for ESSA."""
    truncated_share: float | None = None
    """Share of the rollout completions that hit the length cap, over this call's steps (GRPO; None for ESSA,
    whose fitness decodes are reported by the held-out evaluation)."""
