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
from essaflow.judging.rewards import AUTO_REWARD, get_reward, resolve_reward

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

    def summary(self) -> dict[str, float]:
        """The headline numbers: greedy and pass@k."""
        return {"greedy": self.greedy, **{f"pass@{k}": v for k, v in self.pass_at_k.items()}}

    def metrics(self) -> dict[str, float]:
        """The headline numbers and the truncation shares (what MLflow logs)."""
        return {
            **self.summary(),
            "truncated_share": self.truncated_share,
            "greedy_truncated_share": self.greedy_truncated_share,
        }

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


def _standalone_reward(name: str) -> str:
    """eval.reward, with auto left unresolved (an EvalConfig used without a pipeline config, so without data to
    follow) read as exact_match, the reward of the default synthetic data."""
    if name != AUTO_REWARD:
        return name
    log.info("eval.reward=auto outside a pipeline config: exact_match (set eval.reward to judge other data)")
    return resolve_reward(name, "synthetic", "plain")


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
    prompts, answers = [p.prompt for p in problems], [p.answer for p in problems]
    reward = get_reward(_standalone_reward(eval_cfg.reward))
    start = time.perf_counter()
    greedy = sample_completions(generator, prompts, n=1, temperature=0.0, max_new_tokens=cap)
    g_scores = [reward(o[0], a) for o, a in zip(greedy.texts, answers)]
    sampled = sample_completions(
        generator, prompts, n=n, temperature=sampling.temperature, top_p=sampling.top_p, max_new_tokens=cap,
        seed=eval_cfg.seed,
    )  # fmt: skip
    scores = [[reward(c, a) for c in outs] for outs, a in zip(sampled.texts, answers)]
    counts = [int(sum(row)) for row in scores]
    ks = sorted(set(eval_cfg.ks) | {1})
    passk = {str(k): sum(pass_at_k(n, c, k) for c in counts) / len(counts) for k in ks}
    wall = time.perf_counter() - start
    share = sampled.truncated_share()
    warn_if_truncated(max(share, greedy.truncated_share()), "evaluation", cap)
    return EvalReport(
        num_problems=len(problems),
        samples_per_problem=n,
        greedy=sum(g_scores) / max(len(g_scores), 1),
        pass_at_k=passk,
        correct_counts=counts,
        problem_ids=[p.id for p in problems],
        wall_s=round(wall, 3),
        sequences_per_s=round(len(problems) * (n + 1) / wall, 1),
        truncated_share=round(share, 4),
        greedy_truncated_share=round(greedy.truncated_share(), 4),
        max_new_tokens=cap,
        greedy_correct=[int(g >= 1.0) for g in g_scores],
        samples=_sample_rows(problems, greedy, sampled, scores, g_scores, eval_cfg.samples_saved_per_problem),
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
