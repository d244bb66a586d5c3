"""Typed configuration for every stage.

Every field carries a docstring (pydantic keeps it as the field description, so the Prefect UI form and
`essaflow config --help` show it). Unknown keys are rejected, and cross-field rules run at load time, so a bad
value fails before any compute starts with a message naming the field.
"""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any, Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

PlacementStrategy = Literal["SPREAD", "PACK", "STRICT_SPREAD", "STRICT_PACK"]


def _ray_quantity(value: float | None) -> float | None:
    """Ray takes fractions of a resource only below 1: 0.5 or 2 CPUs, not 1.5."""
    if value is not None and value > 1 and not float(value).is_integer():
        raise ValueError(f"{value}: Ray accepts fractions only below 1 (whole numbers above)")
    return value


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", use_attribute_docstrings=True, validate_assignment=True)


class ConfigError(ValueError):
    """A configuration that cannot run; the message names the offending field."""


class SyntheticTaskConfig(_Strict):
    """The built-in arithmetic task: the embedded default, deterministic by seed."""

    min_digits: int = Field(1, ge=1, le=6)
    """Fewest digits per operand."""
    max_digits: int = Field(3, ge=1, le=6)
    """Most digits per operand."""
    operators: list[Literal["+", "-", "*"]] = ["+", "-"]
    """Operators drawn uniformly per problem."""
    num_problems: int = Field(6000, ge=10)
    """How many distinct problems to generate before splitting."""

    @model_validator(mode="after")
    def _digits_ordered(self) -> SyntheticTaskConfig:
        if self.min_digits > self.max_digits:
            raise ValueError("min_digits must be <= max_digits")
        return self


class DataConfig(_Strict):
    """Where problems come from and how they are split."""

    source: Literal["synthetic", "file", "hf", "s3"] = "synthetic"
    """synthetic: built-in arithmetic; file: local JSONL/JSON/CSV/Parquet; hf: datasets.load_dataset; s3: s3:// URI."""
    path: str | None = None
    """File path, HF dataset name or local dataset directory, or s3:// URI (unused for synthetic)."""
    hf_config: str | None = None
    """HF dataset configuration name (e.g. 'main' for GSM8K)."""
    hf_split: str = "train"
    """HF split to read."""
    hf_revision: str | None = None
    """HF dataset revision (commit or tag) for reproducibility."""
    adapter: Literal["plain", "gsm8k", "math"] = "plain"
    """How the answer column is read: as is, GSM8K (after '####'), MATH (last \\boxed{})."""
    columns: dict[str, str] = {}
    """Column mapping from our names (id, prompt, answer) to the source's names, e.g. {prompt: question}."""
    prompt_template: str = "{prompt}"
    """Template applied to every prompt; '{prompt}' is replaced by the raw prompt."""
    on_bad_row: Literal["error", "drop"] = "error"
    """Malformed rows: fail listing their row numbers (error) or drop them and count them (drop)."""
    synthetic: SyntheticTaskConfig = SyntheticTaskConfig()
    """Knobs of the built-in arithmetic task."""
    sft_fraction: float = Field(0.4, ge=0.0, lt=1.0)
    """Share of problems in the SFT split (disjoint from train/eval, as ESSA's warm start asks)."""
    eval_size: int = Field(256, ge=1)
    """Number of held-out problems in the eval split."""
    max_problems: int | None = Field(None, ge=1)
    """Cap on problems read from the source (after validation), for quick runs."""
    seed: int = 0
    """Seed of the synthetic generator (splits are by content hash, not by this seed)."""


class ModelConfig(_Strict):
    """Which base model to load and how LoRA is attached."""

    name_or_path: str = "builtin:tiny"
    """'builtin:tiny' (our embedded model), a local directory, a hub id, or an s3:// prefix."""
    revision: str | None = None
    """Hub revision to pin."""
    trust_remote_code: bool = False
    """Allow a checkpoint's own Python code to run. Off unless you trust the source."""
    dtype: Literal["float32", "bfloat16", "float16"] = "float32"
    """Weights dtype."""
    lora_rank: int = Field(8, ge=1)
    """LoRA rank r."""
    lora_alpha: float = Field(16.0, gt=0)
    """LoRA alpha (scale = alpha / r). ESSA keeps the SFT adapter's scaling (docs/algorithms.md sec. 6.9)."""
    lora_dropout: float = Field(0.0, ge=0.0, lt=1.0)
    """LoRA dropout during SFT."""
    target_modules: list[str] = ["q_proj", "k_proj", "v_proj", "o_proj"]
    """Modules LoRA adapts; ESSA uses the attention projections Q/K/V/O (ESSA-v3 sec. 3.2)."""
    torch_threads: int = Field(1, ge=1)
    """Torch intra-op threads per process: 1 avoids collapse when another process shares the cores."""
    device: Literal["auto", "cpu", "cuda"] = "auto"
    """Where models are loaded (SFT, evaluation, ESSA scorers): auto = cuda when torch sees one, else cpu. A Ray
    worker without a GPU share sees none, so CPU workers beside GPU ones stay on CPU."""


class SamplingConfig(_Strict):
    """How completions are generated."""

    backend: Literal["auto", "transformers", "vllm"] = "auto"
    """Generation backend of pass@k evaluation: vllm (the `vllm` extra and a CUDA GPU; auto picks it when both are
    there) or transformers. ESSA candidates and GRPO rollouts change the weights every call and always use
    transformers (on the model's device)."""
    temperature: float = Field(1.0, ge=0.0)
    """Sampling temperature; 0 means greedy."""
    top_p: float = Field(1.0, gt=0.0, le=1.0)
    """Nucleus sampling mass."""
    max_new_tokens: int = Field(8, ge=1)
    """Completion length cap."""
    batch_size: int = Field(512, ge=1)
    """Sequences generated per forward batch."""


class EvalConfig(_Strict):
    """pass@k evaluation protocol (Codex unbiased estimator, docs/algorithms.md sec. 4.1)."""

    samples_per_problem: int = Field(16, ge=1)
    """n: completions sampled per problem at sampling.temperature."""
    ks: list[int] = [1, 2, 4, 8, 16]
    """k values reported; each must be <= samples_per_problem."""
    max_problems: int | None = Field(None, ge=1)
    """Evaluate on at most this many eval problems (None = all)."""
    seed: int = 1234
    """Sampling seed: the same seed before and after training gives a paired comparison."""
    reward: str = "exact_match"
    """Reward used to judge correctness (see essaflow.rewards)."""

    @model_validator(mode="after")
    def _k_within_n(self) -> EvalConfig:
        bad = [k for k in self.ks if k > self.samples_per_problem or k < 1]
        if bad:
            raise ValueError(f"ks {bad} must be between 1 and samples_per_problem={self.samples_per_problem}")
        return self

    @field_validator("reward")
    @classmethod
    def _known_reward(cls, v: str) -> str:
        from essaflow.rewards import REWARDS

        if v not in REWARDS:
            raise ValueError(f"unknown reward {v!r}; known: {sorted(REWARDS)}")
        return v


class SFTConfig(_Strict):
    """LoRA supervised warm start (ESSA-v3 sec. 3.2 'Initialization')."""

    steps: int = Field(500, ge=1)
    """Optimizer steps."""
    batch_size: int = Field(64, ge=1)
    """Problems per step."""
    lr: float = Field(3e-3, gt=0)
    """AdamW learning rate."""
    weight_decay: float = Field(0.0, ge=0)
    """AdamW weight decay."""
    seed: int = 0
    """Seed for LoRA init and batch order."""


class ESSAConfig(_Strict):
    """ESSA: CMA-ES over SVD-LoRA singular values (ESSA-v3 sec. 3.2, App. A)."""

    alpha: float = Field(1.0, gt=0.0, le=1.0)
    """Fraction of each factor's singular values that is trainable: top floor(alpha*r) (Alg.1 line 6)."""
    population: int = Field(32, ge=2)
    """lambda: candidates per generation (paper: 24-96)."""
    sigma0: float = Field(0.1, gt=0)
    """Initial CMA-ES step size, in singular-value units (not given by the paper; docs/algorithms.md sec. 6.2)."""
    generations: int = Field(60, ge=1)
    """Number of generations E."""
    minibatch: int = Field(128, ge=1)
    """b: prompts per generation, shared by all candidates for fair ranking (docs/algorithms.md sec. 6.6)."""
    strategy: Literal["cma", "sep_cma", "es"] = "cma"
    """cma: full-covariance CMA-ES (paper); sep_cma: diagonal, for large d; es: plain Gaussian ES (Qiu,
    docs/algorithms.md sec. 2.6)."""
    es_lr: float = Field(0.05, gt=0)
    """strategy=es: step m += (lr/N) sum z_n eps_n, 1/sigma folded in as in Qiu (docs/algorithms.md sec. 2.6)."""
    es_antithetic: bool = True
    """strategy=es: mirrored pairs m +- sigma*e (issue's baseline); false: Qiu's i.i.d. samples
    (docs/algorithms.md sec. 2.6)."""
    returned_point: Literal["mean", "best"] = "mean"
    """Which point is returned: the CMA mean (default) or the best candidate seen (docs/algorithms.md sec. 6.5)."""
    fitness_temperature: float = Field(0.0, ge=0.0)
    """Decoding temperature when scoring candidates; 0 = greedy (docs/algorithms.md sec. 6.7)."""
    fitness: Literal["accuracy", "answer_probability", "answer_logprob"] = "accuracy"
    """accuracy: mean reward of decoded answers (paper); answer_*: exact P_T / log P of the reference (gray-box)."""
    merged_scoring: bool = True
    """Scorers merge B'A' into the base weights and skip the LoRA path (same function, ~25% faster on CPU)."""
    workers: int = Field(1, ge=1)
    """Ray population workers (one per GPU or CPU slot)."""
    eval_every: int = Field(10, ge=0)
    """Held-out greedy accuracy every this many generations (0 = never)."""
    target_accuracy: float | None = Field(None, gt=0, le=1)
    """Stop early once held-out accuracy reaches this."""
    checkpoint_every: int = Field(10, ge=0)
    """Checkpoint every N generations (0 = only at the end)."""
    seed: int = 0
    """Seed of the strategy and minibatch sampler."""
    nonnegative: bool = False
    """Clamp searched singular values at 0 (paper silent, docs/algorithms.md sec. 6.3); off: a negative value flips a
    component."""
    backend: Literal["ray", "local"] = "ray"
    """ray: score on a Ray actor pool (any workers count); local: in the driver process, no Ray (tests, debugging)."""
    inflight_per_worker: int = Field(2, ge=1)
    """Candidates queued per Ray worker at a time (2 hides the round trip; dynamic hand-out,
    docs/algorithms.md sec. 6.11)."""
    worker_max_restarts: int = Field(3, ge=0)
    """How often Ray restarts a dead worker; its candidates go to live workers meanwhile."""
    worker_start_timeout_s: float = Field(600.0, gt=0)
    """How long a Ray worker may take to load its model: at start (then the run fails, naming essa.workers) and
    after Ray restarts it (then the search goes on without it)."""
    worker_gpus: float | None = Field(None, ge=0.0)
    """GPUs per Ray worker; None (auto) = 1 when the cluster has GPUs (one model instance per GPU, ESSA-v3 sec. 4),
    else 0. 1/k packs k small models on one GPU."""
    worker_cpus: float = Field(1.0, gt=0.0)
    """CPUs per Ray worker (below 1: several workers share a core, e.g. a small test cluster)."""
    placement_strategy: PlacementStrategy = "SPREAD"
    """How the workers' placement group spreads over nodes: SPREAD (default: a lost node takes few workers),
    PACK, STRICT_SPREAD or STRICT_PACK (Ray's placement group strategies)."""
    placement_timeout_s: float = Field(120.0, gt=0)
    """How long to wait for the workers' resources before failing with a ClusterCapacityError."""

    _whole_resources = field_validator("worker_cpus", "worker_gpus")(_ray_quantity)

    @model_validator(mode="after")
    def _antithetic_pairs(self) -> ESSAConfig:
        if self.strategy == "es" and self.es_antithetic and self.population % 2:
            raise ValueError(f"population={self.population} must be even for strategy=es (antithetic pairs)")
        return self


class GRPOConfig(_Strict):
    """GRPO family with F-GRPO's focal weight (FGRPO-v2 sec. 4, App. L)."""

    loss: str = "grpo"
    """Policy loss by name (essaflow.grpo.losses registry): grpo, dapo, cispo (FGRPO-v2 App. B)."""
    advantage: str = "grpo"
    """Advantage estimator by name (essaflow.grpo.advantages registry): grpo, or drgrpo (no std division)."""
    gamma: float = Field(1.0, ge=0.0)
    """Focal exponent: advantages scaled by (1 - success_rate)^gamma (FGRPO-v2 Eq. 12-13); 0 = the base method."""
    group_size: int = Field(8, ge=2)
    """N: rollouts per prompt (F-GRPO main results: 8)."""
    prompts_per_step: int = Field(32, ge=1)
    """Prompt groups per rollout step, over all workers; must divide evenly by workers * mini_batches."""
    steps: int = Field(200, ge=1)
    """Rollout steps (each makes mini_batches optimizer steps)."""
    mini_batches: int = Field(1, ge=1)
    """Optimizer steps per rollout step, 1 PPO epoch (F-GRPO: 256/64 = 4); 1 = one on-policy step."""
    micro_batch_size: int = Field(0, ge=0)
    """Sequences per forward/backward on a worker, gradients accumulated (0 = the worker's whole mini-batch)."""
    lr: float = Field(3e-4, gt=0)
    """AdamW learning rate (F-GRPO: 1e-6 full-parameter; LoRA on the tiny model wants ~3e-4)."""
    warmup_steps: int = Field(0, ge=0)
    """Linear warm-up, in rollout steps, then constant (F-GRPO: 15)."""
    weight_decay: float = Field(0.01, ge=0)
    """AdamW weight decay (F-GRPO: 0.01)."""
    grad_clip: float = Field(1.0, gt=0)
    """Max global gradient norm (F-GRPO: 1.0)."""
    clip_eps_low: float | None = Field(None, ge=0)
    """Lower ratio clip eps; None = the loss's default (grpo 0.2, dapo 0.2, cispo 1.0 so the IS weight floor is 0)."""
    clip_eps_high: float | None = Field(None, ge=0)
    """Upper ratio clip eps; None = the loss's default (grpo 0.2, dapo 0.28 clip-higher, cispo 5.0: cap 6)."""
    kl_beta: float = Field(0.0, ge=0)
    """k3 KL coefficient to the frozen SFT start (DeepSeekMath 0.04; F-GRPO 0). >0 keeps a reference copy."""
    std_mode: Literal["population", "bessel", "none"] = "bessel"
    """Std in the group advantage: population (/N), bessel (/N-1, verl's default) or none
    (docs/algorithms.md sec. 7.1)."""
    adv_eps: float = Field(1e-6, ge=0)
    """eps in (R - mean) / (std + eps) (docs/algorithms.md sec. 7.1; verl's 1e-6)."""
    aggregation: Literal["token_mean", "seq_mean", "token_sum_norm"] = "token_mean"
    """token_mean (DAPO, F-GRPO App. L.2), seq_mean (DeepSeekMath), token_sum_norm (Dr.GRPO constant normaliser)."""
    dynamic_sampling: bool = False
    """DAPO dynamic sampling: retry zero-variance groups with other prompts (off: F-GRPO does not mention it)."""
    dynamic_sampling_rounds: int = Field(3, ge=1)
    """Retry rounds per step when dynamic_sampling is on; groups still uniform keep zero advantage."""
    overlong_buffer: int = Field(0, ge=0)
    """DAPO soft overlong punishment: last this many tokens before max_new_tokens ramp to -1 (0 = off)."""
    overlong_penalty: float = Field(1.0, ge=0)
    """Scale of the overlong punishment added to the reward (success rate still uses the unshaped reward)."""
    overlong_filter: bool = False
    """DAPO overlong filtering: truncated completions (no EOS) carry no loss."""
    temperature: float = Field(1.0, gt=0)
    """Rollout temperature (F-GRPO: 1.0)."""
    top_p: float = Field(1.0, gt=0.0, le=1.0)
    """Rollout nucleus mass (F-GRPO: 1.0)."""
    max_new_tokens: int | None = Field(None, ge=1)
    """Rollout completion cap; None = sampling.max_new_tokens."""
    parameters: Literal["lora", "full"] = "lora"
    """Train the LoRA adapter (from the SFT start) or all weights of the merged SFT model (F-GRPO: full)."""
    device: Literal["auto", "cpu", "cuda"] = "auto"
    """Where ranks compute: auto = on Ray, one whole GPU per rank (NCCL) when the cluster has GPUs, else CPU (gloo);
    in process, cuda when visible."""
    workers: int = Field(1, ge=1)
    """Ray Train workers (DDP); groups are split across them, 1 -> N is this field only."""
    ray_for_single_worker: bool = False
    """workers=1 runs in-process (same loop, world size 1) unless this forces a one-worker Ray Train run."""
    worker_cpus: float = Field(1.0, gt=0.0)
    """CPUs per Ray Train worker (on GPU each worker also takes one whole GPU)."""
    placement_strategy: PlacementStrategy = "PACK"
    """Ray Train placement of the DDP workers: PACK (default: fewer cross-node all-reduce hops) or SPREAD, ..."""
    max_failures: int = Field(2, ge=-1)
    """Ray Train restarts the worker group this often after a worker or node dies (-1: no limit); each restart
    resumes from the latest checkpoint in the run's checkpoint directory, which every node must be able to read."""
    eval_every: int = Field(50, ge=0)
    """Held-out greedy accuracy every this many steps (0 = never)."""
    checkpoint_every: int = Field(50, ge=0)
    """Checkpoint every N steps (0 = only at the end)."""
    seed: int = 0
    """Seed of rollouts and prompt order."""

    _whole_cpus = field_validator("worker_cpus")(_ray_quantity)

    @field_validator("loss")
    @classmethod
    def _known_loss(cls, v: str) -> str:
        from essaflow.grpo.losses import LOSSES

        if v not in LOSSES:
            raise ValueError(f"unknown loss {v!r}; known: {sorted(LOSSES)}")
        return v

    @field_validator("advantage")
    @classmethod
    def _known_advantage(cls, v: str) -> str:
        from essaflow.grpo.advantages import ADVANTAGES

        if v not in ADVANTAGES:
            raise ValueError(f"unknown advantage {v!r}; known: {sorted(ADVANTAGES)}")
        return v

    @model_validator(mode="after")
    def _batch_splits_evenly(self) -> GRPOConfig:
        share = self.workers * self.mini_batches
        if self.prompts_per_step % share:
            raise ValueError(
                f"prompts_per_step={self.prompts_per_step} must be a multiple of workers * mini_batches = {share}"
            )
        return self


class PipelineConfig(_Strict):
    """One fine-tuning pipeline run: data -> baseline eval -> SFT -> train -> eval -> register."""

    name: str = "tiny-arith"
    """Pipeline name; also the registered model name prefix."""
    method: Literal["essa", "fgrpo", "none"] = "essa"
    """Training method after the SFT warm start."""
    seed: int = 0
    """Global seed."""
    data: DataConfig = DataConfig()
    """Dataset preparation."""
    model: ModelConfig = ModelConfig()
    """Base model and LoRA."""
    sampling: SamplingConfig = SamplingConfig()
    """Generation settings for evaluation."""
    eval: EvalConfig = EvalConfig()
    """pass@k protocol."""
    sft: SFTConfig = SFTConfig()
    """LoRA SFT warm start."""
    essa: ESSAConfig = ESSAConfig()
    """ESSA settings (method=essa)."""
    grpo: GRPOConfig = GRPOConfig()
    """F-GRPO settings (method=fgrpo)."""
    storage_uri: str = "file://.essaflow/store"
    """Artifact root: file:// directory or s3://bucket/prefix."""
    tracking_uri: str | None = None
    """MLflow tracking URI; None uses MLFLOW_TRACKING_URI or a local sqlite file."""
    ray_address: str | None = None
    """Ray cluster for training workers: the head's GCS host:port, or "local" for a new local Ray; None uses
    RAY_ADDRESS, else a local Ray. Token auth comes from RAY_AUTH_MODE / RAY_AUTH_TOKEN(_PATH), never from here."""
    adapter_uri: str | None = None
    """Start from this SFT adapter instead of training one."""
    promotion_metric: str = "pass@1"
    """Registry gate: alias champion moves to a new version only if it beats the champion on this eval metric
    (greedy, or pass@k with k in eval.ks); otherwise the new version becomes challenger."""

    @model_validator(mode="after")
    def _promotion_metric_measured(self) -> PipelineConfig:
        measured = {"greedy", *(f"pass@{k}" for k in {1, *self.eval.ks})}
        if self.promotion_metric not in measured:
            choices = sorted(measured)
            raise ValueError(f"promotion_metric {self.promotion_metric!r} is not measured; choose from {choices}")
        return self


def _set_dotted(tree: dict[str, Any], dotted: str, raw: str) -> None:
    keys = dotted.split(".")
    node = tree
    for key in keys[:-1]:
        nxt = node.setdefault(key, {})
        if not isinstance(nxt, dict):
            raise ConfigError(f"--set {dotted}: '{key}' is not a section")
        node = nxt
    node[keys[-1]] = yaml.safe_load(raw)


def apply_overrides(tree: dict[str, Any], overrides: list[str]) -> dict[str, Any]:
    """Apply `key.sub=value` overrides (values parsed as YAML) to a plain config dict."""
    tree = copy.deepcopy(tree)
    for item in overrides:
        if "=" not in item:
            raise ConfigError(f"override {item!r} must look like section.key=value")
        key, raw = item.split("=", 1)
        _set_dotted(tree, key.strip(), raw)
    return tree


def _explain(err: ValidationError) -> str:
    lines = []
    for e in err.errors():
        loc = ".".join(str(p) for p in e["loc"]) or "<root>"
        msg = "unknown key" if e["type"] == "extra_forbidden" else e["msg"]
        lines.append(f"{loc}: {msg}")
    return "invalid config: " + "; ".join(lines)


def parse_config(tree: dict[str, Any], model: type[BaseModel] = PipelineConfig) -> Any:
    """Validate a plain dict into a config model, raising ConfigError that names each bad field."""
    try:
        return model.model_validate(tree)
    except ValidationError as err:
        raise ConfigError(_explain(err)) from None


def load_config(path: str | Path | None = None, overrides: list[str] | None = None) -> PipelineConfig:
    """Load a YAML preset (or the defaults when path is None) and apply dotted overrides."""
    tree: dict[str, Any] = {}
    if path is not None:
        p = Path(path)
        if not p.exists():
            raise ConfigError(f"config file not found: {p}")
        tree = yaml.safe_load(p.read_text()) or {}
        if not isinstance(tree, dict):
            raise ConfigError(f"config file {p} must hold a mapping at the top level")
    return parse_config(apply_overrides(tree, overrides or []))
