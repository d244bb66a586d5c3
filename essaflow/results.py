"""The small typed result every trainer returns, so the pipeline treats ESSA and F-GRPO alike."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any


@dataclass
class TrainResult:
    """Outcome of one training run."""

    adapter_dir: Path
    """A standard peft LoRA adapter directory (safetensors + adapter_config.json + tokenizer)."""
    steps: int
    """Generations (ESSA) or optimizer steps (GRPO) completed, including resumed ones."""
    wall_s: float
    """Training wall time of this call."""
    bytes_per_update: float
    """Bytes crossing process boundaries per generation/step (ESSA: candidates + fitness; GRPO: all-reduce)."""
    metrics: list[dict[str, Any]] = field(default_factory=list)
    """One dict per generation/step (and held-out evals), in order."""
    resumed_from: int | None = None
    """Step/generation of the checkpoint this run resumed from, if any."""
    work_by_node: dict[str, int] = field(default_factory=dict)
    """How the work spread over Ray nodes (short node id -> ESSA candidates scored / GRPO worker starts)."""
    worker_failures: int = 0
    """Workers lost during this call (ESSA: actor deaths, their candidates re-dispatched; GRPO: Ray Train
    worker-group restarts, each resumed from the latest checkpoint)."""
