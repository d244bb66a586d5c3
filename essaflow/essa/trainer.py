"""The ESSA loop: minibatch -> ask -> evaluate -> tell (ESSA-v3 sec. 3.2, App. A Algorithm 1;
docs/algorithms.md sec. 2.8).

Per generation t:
  1. draw the shared minibatch of b training prompts (docs/algorithms.md sec. 6.6; every candidate sees the same
     prompts),
  2. ask the strategy for lambda offset vectors (CMA-ES by default, mean starting at the SFT point),
  3. score each candidate by inference only (Ray pool or in process, `population.py`),
  4. tell the strategy the fitnesses (maximised).
Every `eval_every` generations the returned point (mean by default, docs/algorithms.md sec. 6.5) is measured on the
held-out split by greedy accuracy; training stops early once it reaches `target_accuracy`. Every `checkpoint_every`
generations the driver writes its whole state (strategy with its RNG, minibatch sampler with its RNG, generation,
metrics) as JSON + arrays; a new call with the same checkpoint_dir resumes from the latest complete checkpoint and
replays the uninterrupted run bit for bit on CPU (fitness depends only on offsets, prompts and a per-generation
seed, so no worker state needs saving). The result is a standard peft adapter with the rebuilt factors.
"""

from __future__ import annotations

import json
import logging
import time
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

from essaflow.config import PipelineConfig
from essaflow.data import Splits
from essaflow.essa.checkpoint import latest_checkpoint, read_checkpoint, write_checkpoint
from essaflow.essa.population import LocalPopulation, RayPopulation, ScoringSpec
from essaflow.essa.strategy import dump_attrs, make_strategy, restore_attrs
from essaflow.essa.svd_lora import SVDLoRA
from essaflow.evaluation import greedy_accuracy
from essaflow.models import load_model_with_adapter
from essaflow.results import TrainResult
from essaflow.sampling import TransformersGenerator

log = logging.getLogger(__name__)


class MinibatchSampler:
    """b prompt indices per generation, epoch-shuffled: every training prompt is used once per pass.

    Sampling without replacement across generations covers the split evenly (docs/algorithms.md sec. 6.6; the paper
    leaves the scheme open; Algorithm 1 only says "random minibatch"). When b does not divide the split, a minibatch may
    straddle two passes; it never repeats a prompt within itself as long as b <= the split size.
    """

    def __init__(self, size: int, batch: int, seed: int):
        if not 1 <= batch <= size:
            raise ValueError(f"essa.minibatch={batch} must be between 1 and the training split size {size}")
        self.size = size
        self.batch = batch
        self.rng = np.random.RandomState(seed)
        self.order = self.rng.permutation(size)
        self.pos = 0

    def next(self) -> np.ndarray:
        if self.pos + self.batch <= self.size:
            out = self.order[self.pos : self.pos + self.batch]
            self.pos += self.batch
            return out.copy()
        head = self.order[self.pos :]
        # New pass; the prompts of `head` go to its end so this minibatch never holds a prompt twice, and each
        # pass still holds every prompt exactly once.
        perm = self.rng.permutation(self.size)
        in_head = np.isin(perm, head)
        self.order = np.concatenate([perm[~in_head], perm[in_head]])
        take = self.batch - len(head)
        out = np.concatenate([head, self.order[:take]])
        self.pos = take
        return out

    def state_dict(self) -> tuple[dict[str, Any], dict[str, np.ndarray]]:
        return dump_attrs(self, "")

    def load_state_dict(self, meta: dict[str, Any], arrays: dict[str, np.ndarray]) -> None:
        restore_attrs(self, meta, arrays, "")


# The settings a run's trajectory depends on: a checkpoint only resumes under the same values. The others
# (generations, eval/checkpoint cadence, target, workers, backend) may change between attempts.
SEARCH_FIELDS = {
    "alpha", "population", "sigma0", "minibatch", "strategy", "es_lr", "es_antithetic", "returned_point",
    "fitness_temperature", "fitness", "seed", "nonnegative", "merged_scoring",
}  # fmt: skip


def generation_seed(seed: int, generation: int) -> int:
    """Sampling seed of a generation's fitness decoding (common to all its candidates)."""
    return int(np.random.SeedSequence([seed, generation]).generate_state(1)[0] % (2**31 - 1))


def scoring_spec(cfg: PipelineConfig, splits: Splits, sft_adapter: Path, ship_adapter: bool = True) -> ScoringSpec:
    """What every scorer loads once: model, SFT adapter, SVD settings, the training split, fitness settings.

    ``ship_adapter``: carry the adapter's files too, for Ray workers on machines that do not see ``sft_adapter``
    (not needed by the in-process scorer, which reads the path)."""
    e = cfg.essa
    return ScoringSpec(
        model=cfg.model.model_dump(),
        adapter_dir=str(sft_adapter),
        alpha=e.alpha,
        nonnegative=e.nonnegative,
        prompts=[p.prompt for p in splits.train],
        answers=[p.answer for p in splits.train],
        reward=cfg.eval.reward,
        max_new_tokens=cfg.sampling.max_new_tokens,
        temperature=e.fitness_temperature,
        top_p=cfg.sampling.top_p,
        batch_size=cfg.sampling.batch_size,
        fitness=e.fitness,
        merged=e.merged_scoring,
        adapter_files={  # workers on other machines rebuild the adapter from these (small: LoRA + tokenizer)
            str(p.relative_to(sft_adapter)): p.read_bytes() for p in sorted(Path(sft_adapter).rglob("*")) if p.is_file()
        }
        if ship_adapter
        else {},
    )


def _make_population(cfg: PipelineConfig, splits: Splits, sft_adapter: Path) -> LocalPopulation | RayPopulation:
    e = cfg.essa
    spec = scoring_spec(cfg, splits, sft_adapter, ship_adapter=e.backend == "ray")
    if e.backend == "local":
        return LocalPopulation(spec)
    return RayPopulation(
        spec,
        workers=e.workers,
        inflight=e.inflight_per_worker,
        max_restarts=e.worker_max_restarts,
        cpus_per_worker=e.worker_cpus,
        gpus_per_worker=e.worker_gpus,
        strategy=e.placement_strategy,
        placement_timeout_s=e.placement_timeout_s,
        start_timeout_s=e.worker_start_timeout_s,
        address=cfg.ray_address,
    )


def train_essa(
    cfg: PipelineConfig,
    splits: Splits,
    sft_adapter: Path,
    out_dir: Path,
    checkpoint_dir: Path | None = None,
    on_metrics: Callable[[dict], None] | None = None,
    on_checkpoint: Callable[[Path], None] | None = None,
) -> TrainResult:
    """Run ESSA from the SFT adapter; write the tuned adapter to out_dir/"adapter" and return a TrainResult."""
    e = cfg.essa
    call_start = time.perf_counter()
    out_dir = Path(out_dir)
    model, tok = load_model_with_adapter(cfg.model, sft_adapter)
    svd = SVDLoRA(model, e.alpha, nonnegative=e.nonnegative)
    evaluator = TransformersGenerator(model, tok, cfg.sampling.batch_size)
    strategy = make_strategy(e, svd.dimension)
    sampler = MinibatchSampler(len(splits.train), e.minibatch, e.seed)
    metrics: list[dict[str, Any]] = []
    generation, resumed_from = 0, None

    search = e.model_dump(include=SEARCH_FIELDS)
    latest = latest_checkpoint(checkpoint_dir)
    if latest is not None:
        generation, parts = read_checkpoint(latest)
        saved = parts["trainer"][0].get("search", {})
        changed = sorted(k for k in search if saved.get(k) != search[k])
        if changed:
            raise ValueError(
                f"checkpoint {latest} was written with different essa settings ({', '.join(changed)}); resuming "
                "would not replay the run. Use a fresh checkpoint directory or restore the settings."
            )
        strategy.load_state_dict(*parts["strategy"])
        sampler.load_state_dict(*parts["sampler"])
        metrics = parts["trainer"][0]["metrics"]
        resumed_from = generation
        log.info("ESSA resumes from %s (generation %d)", latest, generation)

    def held_out() -> float:
        svd.apply(strategy.result())
        return greedy_accuracy(evaluator, splits.eval, cfg.sampling.max_new_tokens, cfg.eval.reward)

    def checkpoint() -> None:
        if checkpoint_dir is None:
            return
        trainer_meta = {"generation": generation, "dimension": svd.dimension, "search": search, "metrics": metrics}
        path = write_checkpoint(
            checkpoint_dir,
            generation,
            {"strategy": strategy.state_dict(), "sampler": sampler.state_dict(), "trainer": (trainer_meta, {})},
        )
        if on_checkpoint is not None:
            on_checkpoint(path)

    if generation == 0 and e.eval_every > 0:
        metrics.append({"generation": 0, "eval_greedy": held_out()})
        _emit(metrics[-1], on_metrics)

    stopped_early = any(m.get("stopped_early") for m in metrics)
    population = None
    bytes_seen: list[int] = []
    by_node: Counter[str] = Counter()
    failures = 0
    try:
        if generation < e.generations and not stopped_early:
            population = _make_population(cfg, splits, sft_adapter)
            if population.dimension != svd.dimension:
                raise RuntimeError(f"workers search d={population.dimension}, driver d={svd.dimension}")
        while generation < e.generations and not stopped_early:
            t0 = time.perf_counter()
            prompt_idx = sampler.next()
            candidates = strategy.ask()
            fitness, stats = population.evaluate(candidates, prompt_idx, generation_seed(e.seed, generation))
            strategy.tell(candidates, fitness)
            generation += 1
            wall = time.perf_counter() - t0
            bytes_seen.append(stats.bytes_total)
            by_node.update({node[:8]: n for node, n in stats.per_node.items()})
            failures += stats.worker_failures
            row: dict[str, Any] = {
                "generation": generation,
                "fitness_mean": float(fitness.mean()),
                "fitness_max": float(fitness.max()),
                "fitness_min": float(fitness.min()),
                "sigma": strategy.sigma,
                "mean_norm": float(np.linalg.norm(strategy.mean)),
                "wall_s": round(wall, 4),
                "candidates_per_s": round(len(candidates) / stats.wall_s, 2),
                "bytes_sent": stats.bytes_sent,
                "bytes_received": stats.bytes_received,
                "bytes": stats.bytes_total,
                "redispatched": stats.redispatched,
                "worker_failures": stats.worker_failures,
                "nodes_active": len(stats.per_node),
                "per_worker": stats.per_worker,
                "per_node": {node[:8]: n for node, n in stats.per_node.items()},
            }
            if e.eval_every > 0 and (generation % e.eval_every == 0 or generation == e.generations):
                row["eval_greedy"] = held_out()
                if e.target_accuracy is not None and row["eval_greedy"] >= e.target_accuracy:
                    row["stopped_early"] = stopped_early = True
            metrics.append(row)
            _emit(row, on_metrics)
            last = generation == e.generations or stopped_early
            if last or (e.checkpoint_every > 0 and generation % e.checkpoint_every == 0):
                checkpoint()
    finally:
        if population is not None:
            population.close()

    final = strategy.result()
    adapter_dir = svd.export_adapter(final, out_dir / "adapter", tok)
    with (out_dir / "metrics.jsonl").open("w") as fh:
        fh.writelines(json.dumps(m) + "\n" for m in metrics)
    if not bytes_seen:  # nothing ran in this call (resumed at the end): report the recorded figure
        bytes_seen = [m["bytes"] for m in metrics if "bytes" in m] or [0]
    return TrainResult(
        adapter_dir=adapter_dir,
        steps=generation,
        wall_s=round(time.perf_counter() - call_start, 3),
        bytes_per_update=float(np.mean(bytes_seen)),
        metrics=metrics,
        resumed_from=resumed_from,
        work_by_node=dict(by_node.most_common()),
        worker_failures=failures,
    )


def _emit(row: dict[str, Any], on_metrics: Callable[[dict], None] | None) -> None:
    log.info("essa %s", row)
    if on_metrics is not None:
        on_metrics(row)
