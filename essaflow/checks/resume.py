"""A resume checked before compute: the config must equal the one the run was started with in every field the run's
trajectory depends on: the trajectory-marked fields of the method's sections (`Method.trajectory`), the data section
(the splits the trainer reads), the held-out source, the method and the seed (essaflow/runs/resume.py finds the run
and its recorded config)."""

from __future__ import annotations

from typing import Any

from essaflow.config import ConfigError, PipelineConfig, changed_trajectory
from essaflow.methods import method_of


def _flat(tree: Any, prefix: str) -> dict[str, Any]:
    if not isinstance(tree, dict):
        return {prefix.rstrip("."): tree}
    out: dict[str, Any] = {}
    for k, v in tree.items():
        out.update(_flat(v, f"{prefix}{k}."))
    return out


def resume_identity(cfg: PipelineConfig) -> dict[str, Any]:
    """What a resumed run must share with the run it continues, as {dotted key: JSON value}."""
    return {
        "name": cfg.name,
        "method": cfg.method,
        "seed": cfg.seed,
        **_flat(cfg.data.model_dump(mode="json"), "data."),
        "eval.data": cfg.eval.data.model_dump(mode="json") if cfg.eval.data else None,  # the held-out source
        **method_of(cfg).trajectory(cfg),
    }


#: at most this many changed fields are listed (another pipeline's run differs in dozens)
SHOWN_CHANGES = 6


def check_resumable(saved: PipelineConfig, cfg: PipelineConfig, run_id: str) -> None:
    """ConfigError naming the fields whose value differs from the one run `run_id` was started with (the first
    SHOWN_CHANGES of them, and how many more), or only the pipeline or the method when those differ."""
    if saved.name != cfg.name:
        raise ConfigError(
            f"resume {run_id}: that is a run of pipeline {saved.name!r}, not of {cfg.name!r}: resume it with the "
            "config it was started with, or start a new run without --resume"
        )
    trained = method_of(saved)
    if trained is not method_of(cfg):  # every field of both methods' sections would differ
        raise ConfigError(
            f"resume {run_id}: that run trained method {saved.method!r}, this config method {cfg.method!r}: resume it "
            f"with method: {saved.method}, or start a new run without --resume"
        )
    before, now = resume_identity(saved), resume_identity(cfg)
    changed = sorted(set(changed_trajectory(before, now)) | (set(before) ^ set(now)))
    if changed:
        diffs = "; ".join(f"{k}: {_short(before.get(k))} -> {_short(now.get(k))}" for k in changed[:SHOWN_CHANGES])
        more = f"; and {len(changed) - SHOWN_CHANGES} more" if len(changed) > SHOWN_CHANGES else ""
        raise ConfigError(
            f"resume {run_id}: the config differs from the run's in {len(changed)} field"
            f"{'s' if len(changed) > 1 else ''} its trajectory depends on ({diffs}{more}); restore them, or start a "
            "new run without --resume"
        )


def _short(value: Any, limit: int = 60) -> str:
    text = repr(value)
    return text if len(text) <= limit else text[: limit - 3] + "..."
