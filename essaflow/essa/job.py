"""`essaflow essa`: SFT warm start (cached) -> evaluate -> ESSA -> evaluate, on the held-out eval split.

"before" is the SFT start (ESSA-v3 sec. 4: ESSA and GRPO start from the same SFT checkpoint; SFT time is excluded
from the training time), "after" is the exported ESSA adapter loaded back with plain peft, both with the same
pass@k protocol (cfg.eval, cfg.sampling) and sampling seed, so the comparison is paired.
"""

from __future__ import annotations

import hashlib
import json
import logging
import time
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

from essaflow.config import PipelineConfig
from essaflow.essa.trainer import train_essa
from essaflow.tiny_model import cache_root
from essaflow.warm_start import cached_sft_adapter, evaluate_adapter, prepare_splits

log = logging.getLogger(__name__)
HEADLINE = ("greedy", "pass@1", "pass@8")


def run_root(cfg: PipelineConfig) -> Path:
    """Local directory for runs: the storage root for file:// URIs, else the cache (the pipeline uploads)."""
    if cfg.storage_uri.startswith("file://"):
        return Path(cfg.storage_uri.removeprefix("file://")) / "runs"
    return cache_root() / "runs"


def _headline(summary: dict[str, float]) -> dict[str, float]:
    return {k: round(summary[k], 4) for k in HEADLINE if k in summary}


def run_essa_job(cfg: PipelineConfig) -> dict[str, Any]:
    """The whole ESSA job on cfg; returns the JSON-able summary the CLI prints last."""
    console = Console(stderr=True)
    start = time.perf_counter()
    splits = prepare_splits(cfg.data)
    console.log(f"splits: sft {len(splits.sft)}, train {len(splits.train)}, eval {len(splits.eval)}")
    sft = cached_sft_adapter(cfg, splits)
    console.log(f"SFT start: {sft}")
    before = evaluate_adapter(cfg.model, sft, splits.eval, cfg.eval, cfg.sampling)
    console.log(f"before (SFT): {_headline(before.summary())}")

    digest = hashlib.sha256(cfg.model_dump_json().encode()).hexdigest()[:8]
    run_dir = run_root(cfg) / f"essa-{time.strftime('%Y%m%d-%H%M%S')}-{digest}"
    e = cfg.essa
    columns = (
        TextColumn("ESSA"),
        BarColumn(),
        MofNCompleteColumn(),
        TimeElapsedColumn(),
        TextColumn("{task.fields[info]}"),
    )
    with Progress(*columns, console=console, transient=False) as bar:
        task = bar.add_task("essa", total=e.generations, info="starting workers")

        def on_metrics(row: dict[str, Any]) -> None:
            info = ""
            if "fitness_mean" in row:
                info = f"fit {row['fitness_mean']:.3f}/{row['fitness_max']:.3f} sigma {row['sigma']:.3g} "
                info += f"{row['candidates_per_s']:.0f} cand/s"
            if "eval_greedy" in row:
                info += f" held-out greedy {row['eval_greedy']:.3f}"
            bar.update(task, completed=row["generation"], info=info)
            if not console.is_terminal and "eval_greedy" in row:  # logs (CI, Prefect): a line per held-out eval
                line = f"ESSA {row['generation']}/{e.generations}: held-out greedy {row['eval_greedy']:.3f}"
                if "fitness_mean" in row:
                    line += f", fitness {row['fitness_mean']:.3f}, {row['candidates_per_s']:.0f} cand/s"
                console.print(line, soft_wrap=True)

        result = train_essa(cfg, splits, sft, run_dir, checkpoint_dir=run_dir / "checkpoints", on_metrics=on_metrics)
    after = evaluate_adapter(cfg.model, result.adapter_dir, splits.eval, cfg.eval, cfg.sampling)
    console.log(f"after (ESSA): {_headline(after.summary())}")

    dimension = json.loads((result.adapter_dir / "essa.json").read_text())["dimension"]
    evals = [m for m in result.metrics if "eval_greedy" in m]
    gens = [m for m in result.metrics if "candidates_per_s" in m]
    summary = {
        "before": _headline(before.summary()),
        "after": _headline(after.summary()),
        "wall_s": result.wall_s,
        "generations": result.steps,
        "dimension": dimension,
        "bytes_per_generation": round(result.bytes_per_update),
        "population": e.population,
        "sigma0": e.sigma0,
        "strategy": e.strategy,
        "fitness": e.fitness,
        "minibatch": e.minibatch,
        "workers": e.workers if e.backend == "ray" else 0,
        "candidates_per_s": round(sum(m["candidates_per_s"] for m in gens) / max(len(gens), 1), 2),
        "held_out_curve": [[m["generation"], round(m["eval_greedy"], 4)] for m in evals],
        "adapter": str(result.adapter_dir),
        "job_wall_s": round(time.perf_counter() - start, 2),
    }
    (run_dir / "summary.json").write_text(json.dumps(summary, indent=2))
    return summary
