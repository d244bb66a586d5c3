"""A finished run's JSON line, the last stdout line of `essaflow run` (the whole pipeline) and of `essaflow
essa|grpo` (the stages a job runs): its fields in order, the stage that gives each, and the run's time apart from
compute. Never imports prefect."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

LINE_KEYS = (
    "state", "before", "sft_start", "after", "engine", "model_name", "model_version", "aliases", "tracking_uri",
    "storage_uri", "wall_s", "stages", "run_id", "mlflow_run_id", "decision", "gate", "judged_with", "training",
    "data_filtered", "cached", "flow_s", "overhead", "parts",
)  # fmt: skip
"""The line's fields, in the order it prints them."""

STAGE_KEYS: dict[str, tuple[str, ...]] = {
    "open_run": ("tracking_uri", "mlflow_run_id"),
    "prepare_dataset": ("data_filtered",),
    "evaluate-base": ("before",),
    "evaluate-sft_start": ("sft_start",),
    "train": ("training",),
    "evaluate-tuned": ("after", "judged_with"),
    "register": ("model_name", "model_version", "aliases", "decision", "gate"),
}
"""The fields a stage gives; every other field (the run's id, store, engine, state and times) every run gives."""

PARTS = ("compute", "storage", "tracking")
"""The parts of a stage's time a run reports (the rest of its wall time is orchestration)."""


def json_line(out: dict[str, Any], stages: Iterable[str] = STAGE_KEYS) -> dict[str, Any]:
    """The line of a run that ran `stages`: the fields every run gives and those of its stages, from `out`."""
    ran = set(stages)
    left_out = {k for stage, keys in STAGE_KEYS.items() if stage not in ran for k in keys}
    return {k: out[k] for k in LINE_KEYS if k not in left_out}


def stage_parts(refs: Iterable[Any], cached: set[str]) -> dict[str, float]:
    """Seconds of compute, storage and tracking summed over the stage references whose stage ran (not `cached`)."""
    parts = {k: 0.0 for k in PARTS}
    for ref in refs:
        if ref.stage not in cached:
            for k in parts:
                parts[k] += ref.timings.get(k, 0.0)
    return parts


def overhead(parts: dict[str, float], wall: float, server_wait_s: float = 0.0) -> dict[str, float]:
    """What of the command's wall time was not compute: storage, tracking and the rest (orchestration: an
    orchestrator's start-up and its task runs; for a job, what ran between its stages), and the share of all three."""
    return {
        "storage_s": parts["storage"],
        "tracking_s": parts["tracking"],
        "orchestration_s": round(wall - sum(parts.values()), 2),
        "server_wait_s": round(server_wait_s, 2),
        "share": round((wall - parts["compute"]) / wall, 3) if wall else 0.0,
    }
