"""The embedded demo without any service: data -> tiny base -> eval -> SFT -> eval (-> method when it exists).

`flows/finetune.py` is the orchestrated version of the same chain; this module is the library-only path.
"""

from __future__ import annotations

import time
from typing import Any

from essaflow.config import PipelineConfig
from essaflow.models import resolve_model_path
from essaflow.warm_start import cached_sft_adapter, evaluate_adapter, prepare_splits


def run_demo(cfg: PipelineConfig) -> dict[str, Any]:
    """Run the stages in order, timing each; returns the JSON-able summary."""
    stages: dict[str, float] = {}
    start = time.perf_counter()

    def stage(name: str, t0: float) -> None:
        stages[name] = round(time.perf_counter() - t0, 2)

    t0 = time.perf_counter()
    splits = prepare_splits(cfg.data)
    stage("prepare_dataset", t0)

    t0 = time.perf_counter()
    resolve_model_path(cfg.model.name_or_path)
    stage("build_base_model", t0)

    t0 = time.perf_counter()
    base = evaluate_adapter(cfg.model, None, splits.eval, cfg.eval, cfg.sampling)
    stage("evaluate_base", t0)

    t0 = time.perf_counter()
    adapter = cached_sft_adapter(cfg, splits)
    stage("warm_start", t0)

    t0 = time.perf_counter()
    after_sft = evaluate_adapter(cfg.model, adapter, splits.eval, cfg.eval, cfg.sampling)
    stage("evaluate_sft", t0)

    return {
        "base": base.summary(),
        "sft": after_sft.summary(),
        "dataset": splits.fingerprint(),
        "sizes": {"sft": len(splits.sft), "train": len(splits.train), "eval": len(splits.eval)},
        "wall_s": round(time.perf_counter() - start, 2),
        "stages": stages,
    }
