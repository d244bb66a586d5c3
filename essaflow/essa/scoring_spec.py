"""What every ESSA candidate scorer loads once: `ScoringSpec`, and `scoring_spec`, which reads it from a run's config.

The spec travels to each Ray worker once (one copy in the object store), so it is setup, never per-generation
traffic; per generation only indices into its prompts travel (docs/algorithms.md sec. 2.7-2.8).
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from essaflow.data.schema import Problem
from essaflow.judging.judge import JudgeSpec

if TYPE_CHECKING:
    from essaflow.config import PipelineConfig
    from essaflow.data import Splits


@dataclass(frozen=True)
class ScoringSpec:
    """Everything a scorer needs, sent once when it starts (counted as setup bytes, not per generation)."""

    model: dict[str, Any]
    """ModelConfig as a dict."""
    adapter_dir: str
    """The SFT adapter's directory on the driver (used in place by workers that see the same disk)."""
    alpha: float
    nonnegative: bool
    prompts: list[str]
    """The ESSA training split's prompts; per generation only indices into it travel."""
    answers: list[str]
    judge: JudgeSpec
    """The reward (its source by value) and the eval section's threshold, error policy and timeout."""
    max_new_tokens: int
    temperature: float
    top_p: float = 1.0
    batch_size: int = 512
    fitness: str = "accuracy"
    """accuracy (decode, then reward) or answer_probability (teacher-forced P(reference answer))."""
    fitness_samples: int = 1
    """Completions decoded per prompt (accuracy fitness); the reward is their mean."""
    offsets: str = "additive"
    """The search parameterisation (SVDLoRA offsets: additive or relative)."""
    merged: bool = True
    """Score with B'A' merged into the base weights and the LoRA path off (same function, fewer ops)."""
    batched: bool = True
    """Transformers engine: score a run of candidates together, in batches of `batch_size` rows each running with
    its candidate's singular values (`population_scoring.py`); False: one candidate at a time (`merged` applies)."""
    prompt_format: dict[str, Any] = field(default_factory=dict)
    """data.prompt_format() as a dict: the chat template and system prompt every prompt is rendered with."""
    ids: list[str] = field(default_factory=list)
    """The training problems' ids (named when a reward fails); empty: their positions."""
    fields: list[dict[str, Any]] = field(default_factory=list)
    """The training problems' own fields (`Problem.fields`), for rewards that take the problem; empty: none."""
    adapter_files: dict[str, bytes] = field(default_factory=dict)
    """The adapter's files (relative path -> bytes: safetensors, JSON, tokenizer): a worker on a node that does not
    see adapter_dir writes them to a private temporary directory, so ESSA needs no disk shared with the driver."""
    search: dict[str, Any] | None = None
    """The essa config as a dict, from which a worker builds its replica of the strategy and the minibatch sampler
    (essa.sync=seed); None: vectors only."""
    backend: str = "transformers"
    """The resolved sampling.backend: transformers, or vllm (one engine batch per share, an adapter per candidate)."""
    vllm: dict[str, Any] = field(default_factory=dict)
    """sampling.vllm as a dict: the engine's settings when backend is vllm."""


def spec_problems(spec: ScoringSpec) -> list[Problem]:
    """The training problems as the reward sees them: prompt, answer, id and fields."""
    ids = spec.ids or [str(i) for i in range(len(spec.prompts))]
    fields = spec.fields or [{}] * len(spec.prompts)
    if not len(ids) == len(fields) == len(spec.answers) == len(spec.prompts):
        raise ValueError(f"ScoringSpec: {len(spec.prompts)} prompts, {len(spec.answers)} answers, {len(ids)} ids and "
                         f"{len(fields)} fields: replace them together")  # fmt: skip
    return [Problem(id=i, prompt=p, answer=a, fields=f) for i, p, a, f in zip(ids, spec.prompts, spec.answers, fields)]


def with_problems(spec: ScoringSpec, problems: list[Problem], **changes: Any) -> ScoringSpec:
    """`spec` scoring other problems (a held-out split): prompts, answers, ids and fields replaced together."""
    return dataclasses.replace(
        spec, prompts=[p.prompt for p in problems], answers=[p.answer for p in problems],
        ids=[p.id for p in problems], fields=[p.fields for p in problems], **changes,
    )  # fmt: skip


def scoring_spec(cfg: PipelineConfig, splits: Splits, sft_adapter: Path, ship_adapter: bool = True) -> ScoringSpec:
    """What every scorer loads once: model, SFT adapter, SVD settings, the training split, fitness settings.

    ``ship_adapter``: carry the adapter's files too, for Ray workers on machines that do not see ``sft_adapter``
    (not needed by the in-process scorer, which reads the path)."""
    from essaflow.generation.sampling import resolve_backend
    from essaflow.judging.judge import judge_spec

    e = cfg.essa
    files = sorted(p for p in Path(sft_adapter).rglob("*") if p.is_file()) if ship_adapter else []
    model = cfg.model.model_dump()
    if e.on_ray:  # a Ray scorer takes the CPUs Ray gives it, so scorers side by side do not oversubscribe the cores
        model["torch_threads"] = max(1, min(cfg.model.torch_threads, int(e.workers.cpus)))
    return ScoringSpec(
        model=model,
        adapter_dir=str(sft_adapter),
        alpha=e.alpha,
        nonnegative=e.nonnegative,
        prompts=[p.prompt for p in splits.train],
        answers=[p.answer for p in splits.train],
        judge=judge_spec(cfg.eval),
        ids=[p.id for p in splits.train],
        fields=[p.fields for p in splits.train],
        max_new_tokens=cfg.sampling.max_new_tokens,
        temperature=e.fitness_temperature,
        top_p=cfg.sampling.top_p,
        batch_size=cfg.sampling.batch_size,
        fitness=e.fitness,
        fitness_samples=e.fitness_samples,
        offsets=e.offsets,
        merged=e.merged_scoring,
        batched=e.batched_scoring,
        prompt_format=cfg.data.prompt_format().to_dict(),  # rendered by the scorer as SFT and evaluation render
        search=e.model_dump(mode="json"),  # the workers' strategy replicas (essa.sync=seed)
        backend=resolve_backend(cfg.sampling.backend),
        vllm=cfg.sampling.vllm.model_dump(),
        # workers on other machines rebuild the adapter from these (small: LoRA + tokenizer)
        adapter_files={str(p.relative_to(sft_adapter)): p.read_bytes() for p in files},
    )
