"""The ESSA loop: minibatch -> ask -> evaluate -> tell -> record (ESSA-v3 sec. 3.2, App. A Algorithm 1).

Per generation t (steps 1-4 and the metrics of 5 are `step.run_generation`):
  1. draw the shared minibatch of b training prompts (every candidate sees the same prompts, `prompt_sampler.py`),
  2. ask the strategy for lambda offset vectors (CMA-ES by default, mean starting at the SFT point),
  3. score each candidate by inference only (Ray pool, `distributed.py`, or in process, `population.py`),
  4. tell the strategy the fitnesses (maximised),
  5. record the generation's metrics; now and then a held-out evaluation and a checkpoint.
Every `eval_every` generations the returned point (mean by default, docs/algorithms.md sec. 6.5) is measured on
the held-out split by greedy accuracy; training stops early once it reaches `target_accuracy`. Every `checkpoint_every`
generations the driver writes its whole state (strategy with its RNG, minibatch sampler with its RNG, generation,
metrics, the trajectory settings) as JSON + arrays; a new call with the same checkpoint_dir resumes from the latest
complete checkpoint and replays the uninterrupted run bit for bit on CPU (fitness depends only on offsets, prompts
and a per-generation seed, so no worker state needs saving; with essa.sync=seed the workers' strategy replicas are
sent the restored state on their first call). The result is a standard peft adapter.
"""

from __future__ import annotations

import json
import logging
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from essaflow.config import PipelineConfig
from essaflow.data import Splits
from essaflow.essa.checkpoint import restore_search, save_search
from essaflow.essa.distributed import ray_population
from essaflow.essa.population import LocalPopulation
from essaflow.essa.population_seed import SeedPopulation
from essaflow.essa.population_vectors import VectorsPopulation
from essaflow.essa.prompt_sampler import MinibatchSampler
from essaflow.essa.scoring_spec import scoring_spec
from essaflow.essa.step import Generation, run_generation, start_search
from essaflow.essa.svd_lora import SVDLoRA
from essaflow.generation.sampling import TransformersGenerator
from essaflow.judging.evaluation import greedy_accuracy
from essaflow.judging.judge import judge_for
from essaflow.model.loading import load_model_with_adapter
from essaflow.trainer_io import TrainCallbacks, TrainResult
from essaflow.usage import Usage

log = logging.getLogger(__name__)

TIED_SHARE, TIED_GENERATIONS = 0.75, 5  # warn when 3 in 4 candidates tie for this many generations in a row
TIED_WARN_EVERY = 50  # ... and again every this many generations while it goes on


def make_population(
    cfg: PipelineConfig, splits: Splits, sft_adapter: Path
) -> LocalPopulation | SeedPopulation | VectorsPopulation:
    """The candidate scorers: in this process (essa.workers.ray=false) or a Ray actor pool (essa.workers) in the
    transport of essa.sync."""
    e, w = cfg.essa, cfg.essa.workers
    spec = scoring_spec(cfg, splits, sft_adapter, ship_adapter=e.on_ray)
    if not e.on_ray:
        return LocalPopulation(spec)
    return ray_population(
        spec,
        workers=w.count,
        sync=e.sync,
        inflight=e.inflight_per_worker,
        max_restarts=w.max_restarts,
        cpus_per_worker=w.cpus,
        gpus_per_worker=w.gpus,
        strategy=w.placement_strategy,
        placement_timeout_s=w.placement_timeout_s,
        start_timeout_s=w.start_timeout_s,
        address=cfg.ray_address,
    )


@dataclass
class Search:
    """The driver's state of one ESSA run: search space, strategy, prompt sampler, generation, history."""

    cfg: PipelineConfig
    splits: Splits
    svd: SVDLoRA
    tokenizer: Any
    evaluator: TransformersGenerator
    strategy: Any
    sampler: MinibatchSampler
    generation: int = 0
    history: list[dict[str, Any]] = field(default_factory=list)
    work_by_node: Counter = field(default_factory=Counter)
    worker_failures: int = 0
    bytes_seen: list[int] = field(default_factory=list)
    tied_run: int = 0
    """Consecutive generations in which most candidates tied (see `warn_on_ties`)."""
    usage: Usage = field(default_factory=Usage)
    """What this call's generations cost (a resumed run's earlier generations are in their metrics rows)."""

    @classmethod
    def start(cls, cfg: PipelineConfig, splits: Splits, sft_adapter: Path) -> Search:
        e = cfg.essa
        model, tok = load_model_with_adapter(cfg.model, sft_adapter)
        svd = SVDLoRA(model, e.alpha, nonnegative=e.nonnegative, offsets=e.offsets)
        evaluator = TransformersGenerator(model, tok, cfg.sampling.batch_size, cfg.data.prompt_format())
        strategy, sampler = start_search(e, svd.dimension, len(splits.train))
        return cls(cfg, splits, svd, tok, evaluator, strategy, sampler)

    @property
    def finished(self) -> bool:
        return (
            self.generation >= self.cfg.essa.generations
            or self.out_of_time()
            or any(m.get("stopped_early") for m in self.history)
        )

    def out_of_time(self, more_s: float = 0.0) -> bool:
        """essa.time_budget_s spent by the recorded generations (+ more_s): the history carries it over a resume."""
        budget = self.cfg.essa.time_budget_s
        return budget is not None and sum(m.get("wall_s", 0.0) for m in self.history) + more_s >= budget

    def held_out(self) -> float:
        """Greedy accuracy of the returned point on the eval split."""
        self.svd.apply(self.strategy.result())
        s = self.cfg.sampling
        return greedy_accuracy(self.evaluator, self.splits.eval, s.max_new_tokens, judge_for(self.cfg.eval))

    def record(self, told: Generation) -> dict[str, Any]:
        """The generation just told: its metrics, a held-out evaluation when due (and the early stop)."""
        e, row, stats = self.cfg.essa, told.metrics, told.stats
        self.generation = row.generation
        last = self.generation == e.generations or self.out_of_time(told.wall_s)
        if e.eval_every > 0 and (self.generation % e.eval_every == 0 or last):
            row.eval_greedy = self.held_out()
            if e.target_accuracy is not None and row.eval_greedy >= e.target_accuracy:
                row.stopped_early = True
        self.warn_on_ties(row.tie_share or 0.0)
        self.bytes_seen.append(stats.bytes_total)
        self.usage.add(stats.usage)
        self.work_by_node.update(row.per_node or {})
        self.worker_failures += stats.worker_failures
        self.history.append(row.as_row())
        return self.history[-1]

    def warn_on_ties(self, tie_share: float) -> None:
        """Most candidates scoring alike for several generations means the search ranks noise: say what helps."""
        self.tied_run = self.tied_run + 1 if tie_share >= TIED_SHARE else 0
        if self.tied_run % TIED_WARN_EVERY == TIED_GENERATIONS:  # once per long tied stretch, not every generation
            log.warning(
                "ESSA: %.0f%%+ of the candidates tied for %d generations in a row (to generation %d): the fitness "
                "cannot tell them apart. Raise essa.sigma0 (or use essa.offsets=relative), essa.minibatch, or "
                "essa.fitness_samples with essa.fitness_temperature > 0 (docs/algorithms.md sec. 6.16)",
                100 * TIED_SHARE,
                self.tied_run,
                self.generation,
            )

    def checkpoint_due(self) -> bool:
        every = self.cfg.essa.checkpoint_every
        return self.finished or (every > 0 and self.generation % every == 0)

    def save(self, checkpoint_dir: Path) -> Path:
        return save_search(checkpoint_dir, self.cfg, self.generation, self.svd.dimension, self.strategy, self.sampler,
                           self.history)  # fmt: skip

    def restore(self, checkpoint_dir: Path | None) -> int | None:
        """Continue from the latest complete checkpoint, if any; returns its generation."""
        found = restore_search(checkpoint_dir, self.cfg, self.strategy, self.sampler)
        if found is None:
            return None
        latest, self.generation, self.history = found
        log.info("ESSA resumes from %s (generation %d)", latest, self.generation)
        return self.generation

    def export(self, out_dir: Path, started: float, resumed_from: int | None) -> TrainResult:
        """Write the returned point as a peft adapter (out_dir/adapter) and metrics.jsonl; the TrainResult."""
        adapter_dir = self.svd.export_adapter(self.strategy.result(), out_dir / "adapter", self.tokenizer)
        with (out_dir / "metrics.jsonl").open("w") as fh:
            fh.writelines(json.dumps(m) + "\n" for m in self.history)
        # nothing ran in this call (resumed at the end): report the recorded figure
        seen = self.bytes_seen or [m["bytes"] for m in self.history if "bytes" in m] or [0]
        return TrainResult(
            output_dir=adapter_dir,
            steps=self.generation,
            wall_s=round(time.perf_counter() - started, 3),
            bytes_per_update=float(np.mean(seen)),
            metrics=self.history,
            resumed_from=resumed_from,
            work_by_node=dict(self.work_by_node.most_common()),
            worker_failures=self.worker_failures,
            usage=self.usage,
        )


def train_essa(
    cfg: PipelineConfig,
    splits: Splits,
    sft_adapter: Path,
    out_dir: Path,
    checkpoint_dir: Path | None = None,
    on_metrics=None,
    on_checkpoint=None,
) -> TrainResult:
    """Run ESSA from the SFT adapter; write the tuned adapter to out_dir/"adapter" and return a TrainResult."""
    started, out_dir, report = time.perf_counter(), Path(out_dir), TrainCallbacks(on_metrics, on_checkpoint)
    search = Search.start(cfg, splits, sft_adapter)
    resumed_from = search.restore(checkpoint_dir)
    if search.generation == 0 and cfg.essa.eval_every > 0:
        search.history.append({"generation": 0, "eval_greedy": search.held_out()})
        _report(report, search.history[-1])
    population = None if search.finished else make_population(cfg, splits, sft_adapter)
    try:
        if population is not None and population.dimension != search.svd.dimension:
            raise RuntimeError(f"workers search d={population.dimension}, driver d={search.svd.dimension}")
        while not search.finished:
            told = run_generation(population, search.strategy, search.sampler, cfg.essa.seed, search.generation)
            _report(report, search.record(told))
            if checkpoint_dir is not None and search.checkpoint_due():
                report.checkpoint(search.save(checkpoint_dir))
    finally:
        if population is not None:
            population.close()
    return search.export(out_dir, started, resumed_from)


def _report(report: TrainCallbacks, row: dict[str, Any]) -> None:
    log.info("essa %s", row)
    report.metrics(row)
