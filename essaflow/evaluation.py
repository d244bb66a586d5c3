"""pass@k evaluation with the unbiased Codex estimator (Chen et al. 2021 sec. 2.1; docs/algorithms.md sec. 4.1)."""

from __future__ import annotations

import json
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

from pydantic import Field, field_validator, model_validator

from essaflow.config_base import StrictConfig, trajectory
from essaflow.data.schema import Problem
from essaflow.rewards import REWARDS, get_reward
from essaflow.sampling import Generator, SamplingConfig


class EvalConfig(StrictConfig):
    """pass@k evaluation protocol (Codex unbiased estimator, docs/algorithms.md sec. 4.1)."""

    samples_per_problem: int = Field(16, ge=1)
    """n: completions sampled per problem at sampling.temperature."""
    ks: list[int] = [1, 2, 4, 8, 16]
    """k values reported; each must be <= samples_per_problem."""
    max_problems: int | None = Field(None, ge=1)
    """Evaluate on at most this many eval problems (None = all)."""
    seed: int = 1234
    """Sampling seed: the same seed before and after training gives a paired comparison."""
    reward: str = trajectory("exact_match")
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
        return REWARDS.check(v)


def pass_at_k(n: int, c: int, k: int) -> float:
    """Probability that a random size-k subset of n samples (c correct) holds a correct one.

    Stable form 1 - prod_{i=n-c+1}^{n} (1 - k/i); never the biased 1 - (1 - c/n)^k.
    """
    if not 0 <= c <= n:
        raise ValueError(f"need 0 <= c <= n, got n={n}, c={c}")
    if k < 1 or k > n:
        raise ValueError(f"k={k} must be between 1 and n={n}")
    if n - c < k:
        return 1.0
    prod = 1.0
    for i in range(n - c + 1, n + 1):
        prod *= 1.0 - k / i
    return 1.0 - prod


@dataclass
class EvalReport:
    """What one evaluation measured; JSON-serialisable."""

    num_problems: int
    samples_per_problem: int
    greedy: float
    pass_at_k: dict[str, float]
    correct_counts: list[int] = field(repr=False)
    problem_ids: list[str] = field(repr=False)
    wall_s: float = 0.0
    sequences_per_s: float = 0.0

    def summary(self) -> dict[str, float]:
        """The headline numbers: greedy and pass@k."""
        return {"greedy": self.greedy, **{f"pass@{k}": v for k, v in self.pass_at_k.items()}}

    def to_json(self) -> str:
        return json.dumps(asdict(self))


def completion_rewards(completions: list[str], references: list[str], reward: str = "exact_match") -> list[float]:
    """The reward of each completion against its reference, in order (not their mean)."""
    fn = get_reward(reward)
    return [fn(c, r) for c, r in zip(completions, references)]


def greedy_accuracy(
    generator: Generator, problems: list[Problem], max_new_tokens: int, reward: str = "exact_match"
) -> float:
    """Share of problems solved by greedy decoding."""
    outs = generator.generate([p.prompt for p in problems], n=1, temperature=0.0, max_new_tokens=max_new_tokens)
    scores = completion_rewards([o[0] for o in outs], [p.answer for p in problems], reward)
    return sum(scores) / max(len(scores), 1)


def evaluate(
    generator: Generator, problems: list[Problem], eval_cfg: EvalConfig, sampling: SamplingConfig
) -> EvalReport:
    """Greedy accuracy plus pass@k from n samples per problem, one sample set reused for every k."""
    if eval_cfg.max_problems is not None:
        problems = problems[: eval_cfg.max_problems]
    n = eval_cfg.samples_per_problem
    start = time.perf_counter()
    greedy = greedy_accuracy(generator, problems, sampling.max_new_tokens, eval_cfg.reward)
    samples = generator.generate(
        [p.prompt for p in problems],
        n=n,
        temperature=sampling.temperature,
        top_p=sampling.top_p,
        max_new_tokens=sampling.max_new_tokens,
        seed=eval_cfg.seed,
    )
    reward = get_reward(eval_cfg.reward)
    counts = [int(sum(reward(c, p.answer) for c in outs)) for outs, p in zip(samples, problems)]
    ks = sorted(set(eval_cfg.ks) | {1})
    passk = {str(k): sum(pass_at_k(n, c, k) for c in counts) / len(counts) for k in ks}
    wall = time.perf_counter() - start
    return EvalReport(
        num_problems=len(problems),
        samples_per_problem=n,
        greedy=greedy,
        pass_at_k=passk,
        correct_counts=counts,
        problem_ids=[p.id for p in problems],
        wall_s=round(wall, 3),
        sequences_per_s=round(len(problems) * (n + 1) / wall, 1),
    )


def plot_pass_at_k(reports: dict[str, EvalReport], out_png: str | Path) -> Path:
    """One curve per labelled report: pass@k against k (log2 axis)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(5, 3.5))
    for label, rep in reports.items():
        ks = sorted(int(k) for k in rep.pass_at_k)
        ax.plot(ks, [rep.pass_at_k[str(k)] for k in ks], marker="o", label=label)
    ax.set_xscale("log", base=2)
    ax.set_xlabel("k")
    ax.set_ylabel("pass@k")
    ax.set_ylim(0, 1)
    ax.grid(alpha=0.3)
    ax.legend()
    fig.tight_layout()
    out = Path(out_png)
    fig.savefig(out, dpi=100)
    plt.close(fig)
    return out
