"""pass@k evaluation with the unbiased Codex estimator (Chen et al. 2021 sec. 2.1; docs/algorithms.md sec. 4.1)."""

from __future__ import annotations

import json
import logging
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from essaflow.data.schema import Problem
from essaflow.generation.config import SamplingConfig
from essaflow.judging.config import EvalConfig
from essaflow.judging.judge import Judge, as_judge, judge_for

if TYPE_CHECKING:  # the engines need torch; a process that only reads reports (tracking, the gate) never loads them
    from essaflow.generation.sampling import Generator, Samples

log = logging.getLogger(__name__)


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
    truncated_share: float = 0.0
    """Share of the n sampled completions that hit max_new_tokens without an EOS."""
    greedy_truncated_share: float = 0.0
    """The same for the greedy decodes."""
    max_new_tokens: int = 0
    """The cap those shares refer to."""
    greedy_correct: list[int] = field(default_factory=list, repr=False)
    """Per problem (in problem_ids order): 1 when the greedy decode was correct (the promotion gate pairs them)."""
    samples: list[dict] = field(default_factory=list, repr=False)
    """Per problem: id, prompt, reference, greedy completion and up to eval.samples_saved_per_problem sampled
    ones, each with its reward and whether it was truncated (what samples.jsonl.gz holds)."""

    reward_mean: float = 0.0
    """Mean reward of the sampled completions (a graded reward's average, beside the pass@k it was thresholded
    into)."""
    reward_components: dict[str, float] = field(default_factory=dict)
    """Mean of each named component over the sampled completions (a reward returning components)."""
    reward_errors: int = 0
    """Reward calls that raised or timed out and scored 0 (eval.reward_errors: zero)."""
    judged_with: dict[str, str] = field(default_factory=dict)
    """How it was judged (EvalConfig.judged_with): the reward, its digest, the threshold, the sandbox of code."""

    def summary(self) -> dict[str, float]:
        """The headline numbers: greedy and pass@k."""
        return {"greedy": self.greedy, **{f"pass@{k}": v for k, v in self.pass_at_k.items()}}

    def metrics(self) -> dict[str, float]:
        """The headline numbers and the truncation shares (what MLflow logs)."""
        return {
            **self.summary(),
            "truncated_share": self.truncated_share,
            "greedy_truncated_share": self.greedy_truncated_share,
            **{f"reward.{k}": v for k, v in self.reward_components.items()},
            **({"reward_errors": float(self.reward_errors)} if self.reward_errors else {}),
        }

    def to_json(self) -> str:
        return json.dumps(asdict(self))


def completion_rewards(
    completions: list[str], problems: list[Problem], reward: Judge | str = "exact_match"
) -> list[float]:
    """The reward of each completion against its problem, in order (not their mean)."""
    return as_judge(reward).score(completions, problems).rewards


def greedy_accuracy(
    generator: Generator, problems: list[Problem], max_new_tokens: int, reward: Judge | str = "exact_match"
) -> float:
    """Share of problems whose greedy decode is correct (its reward reaches the judge's threshold)."""
    outs = generator.generate([p.prompt for p in problems], n=1, temperature=0.0, max_new_tokens=max_new_tokens)
    correct = as_judge(reward).score([o[0] for o in outs], problems).correct
    return sum(correct) / max(len(correct), 1)


def _sample_rows(
    problems: list[Problem],
    greedy: Samples,
    sampled: Samples,
    scores: list[list[float]],
    g_scores: list[float],
    keep: int,
) -> list[dict]:
    rows = []
    for i, p in enumerate(problems):
        kept = [
            {"text": t, "reward": r, "truncated": tr}
            for t, r, tr in list(zip(sampled.texts[i], scores[i], sampled.truncated[i]))[:keep]
        ]
        rows.append({
            "id": p.id, "prompt": p.prompt, "answer": p.answer,
            "greedy": {"text": greedy.texts[i][0], "reward": g_scores[i], "truncated": greedy.truncated[i][0]},
            "completions": kept,
        })  # fmt: skip
    return rows


def evaluate(
    generator: Generator, problems: list[Problem], eval_cfg: EvalConfig, sampling: SamplingConfig
) -> EvalReport:
    """Greedy accuracy plus pass@k from n samples per problem, one sample set reused for every k.

    Also measures the share of completions that hit sampling.max_new_tokens (warned above 10%) and keeps up to
    eval.samples_saved_per_problem completions per problem for the report."""
    from essaflow.generation.sampling import sample_completions, warn_if_truncated

    if eval_cfg.max_problems is not None:
        problems = problems[: eval_cfg.max_problems]
    n, cap = eval_cfg.samples_per_problem, sampling.max_new_tokens
    prompts = [p.prompt for p in problems]
    judge = judge_for(eval_cfg)
    start = time.perf_counter()
    greedy = sample_completions(generator, prompts, n=1, temperature=0.0, max_new_tokens=cap)
    g = judge.score([o[0] for o in greedy.texts], problems)
    sampled = sample_completions(
        generator, prompts, n=n, temperature=sampling.temperature, top_p=sampling.top_p, max_new_tokens=cap,
        seed=eval_cfg.seed,
    )  # fmt: skip
    flat = judge.score([c for outs in sampled.texts for c in outs], [p for p in problems for _ in range(n)])
    scores = [flat.rewards[i * n : (i + 1) * n] for i in range(len(problems))]
    counts = [sum(flat.correct[i * n : (i + 1) * n]) for i in range(len(problems))]
    ks = sorted(set(eval_cfg.ks) | {1})
    passk = {str(k): sum(pass_at_k(n, c, k) for c in counts) / len(counts) for k in ks}
    wall = time.perf_counter() - start
    share = sampled.truncated_share()
    warn_if_truncated(max(share, greedy.truncated_share()), "evaluation", cap)
    return EvalReport(
        num_problems=len(problems),
        samples_per_problem=n,
        greedy=sum(g.correct) / max(len(g.rewards), 1),
        pass_at_k=passk,
        correct_counts=counts,
        problem_ids=[p.id for p in problems],
        wall_s=round(wall, 3),
        sequences_per_s=round(len(problems) * (n + 1) / wall, 1),
        truncated_share=round(share, 4),
        greedy_truncated_share=round(greedy.truncated_share(), 4),
        max_new_tokens=cap,
        greedy_correct=[int(c) for c in g.correct],
        samples=_sample_rows(problems, greedy, sampled, scores, g.rewards, eval_cfg.samples_saved_per_problem),
        reward_mean=round(flat.mean(), 6),
        reward_components={k: round(v, 6) for k, v in flat.component_means().items()},
        reward_errors=g.errors + flat.errors,
        judged_with=eval_cfg.judged_with(),
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
