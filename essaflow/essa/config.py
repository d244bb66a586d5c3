"""ESSA's settings: the search (trajectory fields) and how candidates are scored on Ray (ESSA-v3 sec. 3.2, App. A).

Fields made with `trajectory(...)` decide what the search computes; a checkpoint resumes only under the same
values. The rest (length, evaluation and checkpoint cadence, early stop, workers) may change between attempts.
"""

from __future__ import annotations

from typing import Any, ClassVar, Literal

from pydantic import Field, model_validator

from essaflow.cluster.config import ESSAWorkersConfig
from essaflow.cluster.request import TrainingRequest
from essaflow.config_base import StrictConfig, gone_keys, trajectory

#: keys this section no longer takes, each with what replaces it (a config still writing one is refused)
GONE = {
    "backend": "essa.workers.ray (false: score in this process, what backend=local did; true: a Ray actor pool)",
    "workers": "essa.workers.count",
    "worker_cpus": "essa.workers.cpus",
    "worker_gpus": "essa.workers.gpus",
    "placement_strategy": "essa.workers.placement_strategy",
    "placement_timeout_s": "essa.workers.placement_timeout_s",
    "worker_max_restarts": "essa.workers.max_restarts",
    "worker_start_timeout_s": "essa.workers.start_timeout_s",
}


class ESSAConfig(StrictConfig):
    """ESSA: CMA-ES over SVD-LoRA singular values (ESSA-v3 sec. 3.2, App. A)."""

    METHOD: ClassVar[str] = "essa"
    """The pipeline's `method:` that trains with this section (essaflow/methods/essa.py)."""

    alpha: float = trajectory(1.0, gt=0.0, le=1.0)
    """Fraction of each factor's singular values that is trainable: top floor(alpha*r) (Alg.1 line 6)."""
    population: int = trajectory(32, ge=2)
    """lambda: candidates per generation (paper: 24-96)."""
    sigma0: float = trajectory(0.1, gt=0)
    """Initial CMA-ES step size, in singular-value units (not given by the paper; docs/algorithms.md sec. 6.2)."""
    generations: int = Field(60, ge=1)
    """Number of generations E."""
    minibatch: int = trajectory(128, ge=1)
    """b: prompts per generation, shared by all candidates for fair ranking (docs/algorithms.md sec. 6.6)."""
    strategy: Literal["cma", "sep_cma", "es"] = trajectory("cma")
    """cma: full-covariance CMA-ES (paper); sep_cma: diagonal, for large d; es: plain Gaussian ES (Qiu,
    docs/algorithms.md sec. 2.6)."""
    es_lr: float = trajectory(0.05, gt=0)
    """strategy=es: step m += (lr/N) sum z_n eps_n, 1/sigma folded in as in Qiu (docs/algorithms.md sec. 2.6)."""
    es_antithetic: bool = trajectory(True)
    """strategy=es: mirrored pairs m +- sigma*e (the peer baseline); false: Qiu's i.i.d. samples
    (docs/algorithms.md sec. 2.6)."""
    returned_point: Literal["mean", "best"] = trajectory("mean")
    """Which point is returned: the CMA mean (default) or the best candidate seen (docs/algorithms.md sec. 6.5)."""
    fitness_temperature: float = trajectory(0.0, ge=0.0)
    """Decoding temperature when scoring candidates; 0 = greedy (docs/algorithms.md sec. 6.7)."""
    fitness: Literal["accuracy", "answer_probability", "answer_logprob"] = trajectory("accuracy")
    """accuracy: mean task reward of decoded answers, a black-box reward (the paper); answer_probability /
    answer_logprob: exact P_T / log P of the reference answer, gray-box (needs reference answers; our option)."""
    fitness_samples: int = trajectory(1, ge=1)
    """m: completions decoded per prompt at fitness_temperature, rewards averaged (still reward-only; m > 1 needs
    fitness_temperature > 0). A finer reward: b * m outcomes instead of b (docs/algorithms.md sec. 6.7)."""
    fitness_shaping: Literal["zscore", "centered_rank"] = trajectory("zscore")
    """strategy=es: how fitnesses weight the noise: zscore (Qiu et al.) or centred ranks in [-0.5, 0.5] with tied
    fitnesses sharing their mean rank, so ties carry no weight (docs/algorithms.md sec. 6.16)."""
    offsets: Literal["additive", "relative"] = trajectory("additive")
    """Search parameterisation: additive s0 + theta (the paper) or relative s0 * (1 + theta), which puts every
    factor's values on one scale, so one sigma fits all (docs/algorithms.md sec. 6.16)."""
    merged_scoring: bool = trajectory(True)
    """Scorers merge B'A' into the base weights and skip the LoRA path (same function, ~25% faster on CPU); used
    when batched_scoring is off."""
    batched_scoring: bool = trajectory(True)
    """Transformers engine: a worker scores its share of the population together, in batches of
    sampling.batch_size rows (candidates x prompts), each row with its candidate's singular values on the shared
    base weights and singular vectors; same fitness up to float rounding (a sampled fitness draws per-row keyed
    noise instead of torch's RNG; essaflow/essa/population_scoring.py). Off: one candidate and one batch at a
    time (merged_scoring). The vLLM engine batches its own way and ignores it."""
    eval_every: int = Field(10, ge=0)
    """Held-out greedy accuracy every this many generations (0 = never)."""
    target_accuracy: float | None = Field(None, gt=0, le=1)
    """Stop early once held-out accuracy reaches this."""
    time_budget_s: float | None = Field(None, gt=0)
    """Stop at the first generation boundary once the generations' wall time (held-out checks left out) reaches
    this many seconds; `generations` stays the cap. The compare flow gives every method the same budget
    (docs/compare.md). None: run all generations."""
    checkpoint_every: int = Field(10, ge=0)
    """Checkpoint every N generations (0 = only at the end)."""
    seed: int = trajectory(0)
    """Seed of the strategy and minibatch sampler."""
    nonnegative: bool = trajectory(False)
    """Clamp searched singular values at 0 (paper silent, docs/algorithms.md sec. 6.3); off: a negative value flips a
    component."""
    workers: ESSAWorkersConfig = ESSAWorkersConfig()
    """The population's scorers: on Ray or in this process (ray), count, CPUs and GPUs each, placement, restarts,
    start timeout."""
    inflight_per_worker: int = Field(2, ge=1)
    """Candidates queued per Ray worker at a time (2 hides the round trip; dynamic hand-out,
    docs/algorithms.md sec. 6.11)."""
    sync: Literal["seed", "vectors"] = Field("seed")
    """How Ray workers learn the candidates. seed: each holds a replica of the strategy built from essa.seed and
    regenerates them, so only (generation, index), one header per worker per generation (prompt ids, sampling seed,
    the previous fitness vector) and (index, fitness, digest) travel (ESSA-v3 App. A Algorithm 1; docs/algorithms.md
    sec. 2.8). vectors: the driver ships each candidate's float32 offsets. Same results either way (not a trajectory
    setting); workers.ray=false ignores it."""

    @model_validator(mode="before")
    @classmethod
    def _no_gone_keys(cls, data: Any) -> Any:
        problem = gone_keys(data, GONE)
        if problem:
            raise ValueError(problem)
        return data

    def cluster_request(self) -> TrainingRequest | None:
        """The Ray workers this search scores on: the population's scorers (None: workers.ray=false, in process).
        GPUs unset (essa.workers.gpus) = one whole GPU each where the cluster has GPUs."""
        if not self.on_ray:
            return None
        w = self.workers
        return TrainingRequest(w.count, w.cpus, w.gpus, w.placement_strategy)

    def pipeline_problem(self, sft_trains: bool, adapter_uri: str | None) -> str | None:
        """What ESSA asks of the rest of the pipeline: a trained adapter to search (the SFT step, or adapter_uri)."""
        if sft_trains or adapter_uri:
            return None
        return ("sft.enabled: false (or sft.steps: 0) with method essa: ESSA searches the singular values of a trained "
                "LoRA adapter (ESSA-v3 sec. 3.2), and an untrained one (B = 0) has none; keep the SFT step or give "
                "adapter_uri")  # fmt: skip

    @property
    def on_ray(self) -> bool:
        """Whether the population is scored on a Ray actor pool (workers.ray true or unset), else in this process."""
        return self.workers.ray is not False

    @property
    def fitness_kind(self) -> str:
        """How the fitness was obtained, for every output that reports an ESSA result."""
        return "black-box reward" if self.fitness == "accuracy" else "gray-box: needs reference answers"

    @model_validator(mode="after")
    def _antithetic_pairs(self) -> ESSAConfig:
        if self.strategy == "es" and self.es_antithetic and self.population % 2:
            raise ValueError(f"population={self.population} must be even for strategy=es (antithetic pairs)")
        if self.fitness_samples > 1 and (self.fitness != "accuracy" or self.fitness_temperature == 0):
            raise ValueError(
                "fitness_samples > 1 needs fitness=accuracy and fitness_temperature > 0 (else the m "
                "completions are identical)"
            )
        return self
